"""GET /api/receipt/<id>/verify: every check recomputed on every request."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from django.test import Client

from receiptsite.receipts.models import Receipt
from tests.conftest import Producer, mark_compromised, row_security_statements, tamper

pytestmark = pytest.mark.db

SITE = "https://receipts.example.org"


def verify(client: Client, receipt_id: str) -> dict[str, Any]:
    response = client.get(f"/api/receipt/{receipt_id}/verify")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def checks(body: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["result"] for check in body["checks"]}


def test_a_fresh_receipt_verifies(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    body = verify(client, answer["id"])
    assert body["status"] == "valid"
    assert list(checks(body)) == [
        "canonical_form", "hash", "record_matches", "signature", "log_inclusion"
    ]
    assert set(checks(body).values()) == {"pass"}
    assert body["receipt_id"] == answer["id"]
    assert body["receipt_url"] == answer["url"]
    assert body["algorithm"] == "sha-256"
    assert body["canonicalization"] == "RFC 8785"
    assert body["output_hash"] == answer["output_hash"]
    assert body["signature"]["algorithm"] == "Ed25519"
    assert body["signature"]["keys_url"] == f"{SITE}/.well-known/receipt-keys.json"
    assert body["log"]["index"] == 0
    assert body["log"]["tree_size"] == 1
    assert body["log"]["origin"] == "receipts.example.org/receipts"
    assert body["log"]["inclusion_proof"] == []
    assert set(body) == {
        "receipt_id", "receipt_url", "status", "algorithm", "canonicalization", "output_hash",
        "canonical_bytes", "byte_length", "checks", "signature", "log", "verified_at",
        "assurance",
    }


def test_anyone_can_check_it_without_the_sites_code(producer: Producer, client: Client) -> None:
    """What `base64 -d | sha256sum` and `openssl pkeyutl -verify -rawin` do, done with the
    standard library and `cryptography` alone, against the published key."""
    answer = producer.publish()
    body = verify(client, answer["id"])
    data = base64.b64decode(body["canonical_bytes"], validate=True)
    assert len(data) == body["byte_length"]
    assert hashlib.sha256(data).hexdigest() == answer["output_hash"] == body["output_hash"]
    assert json.loads(data)["id"] == answer["id"]

    keys = client.get("/.well-known/receipt-keys.json").json()["keys"]
    key = next(k for k in keys if k["kid"] == body["signature"]["key_id"])
    public = load_pem_public_key(key["pem"].encode())
    assert isinstance(public, Ed25519PublicKey)
    public.verify(base64.b64decode(body["signature"]["value"]), data)  # raises if invalid
    raw = base64.urlsafe_b64decode(key["x"] + "=")
    Ed25519PublicKey.from_public_bytes(raw).verify(
        base64.b64decode(body["signature"]["value"]), data
    )
    # The log leaf: RFC 9162 leaf hash; with one receipt the root is the leaf.
    assert base64.b64decode(body["log"]["root_hash"]) == hashlib.sha256(b"\x00" + data).digest()


def test_the_inclusion_proof_grows_with_the_log(producer: Producer, client: Client) -> None:
    ids = [producer.publish(idempotency_key=f"k{i}")["id"] for i in range(5)]
    body = verify(client, ids[0])
    assert body["status"] == "valid"
    assert body["log"]["tree_size"] == 5
    assert len(body["log"]["inclusion_proof"]) == 3
    assert [verify(client, i)["log"]["index"] for i in ids] == [0, 1, 2, 3, 4]


def test_verify_needs_few_queries_whatever_the_log_size(
    producer: Producer, client: Client, django_assert_max_num_queries: Any
) -> None:
    ids = [producer.publish(idempotency_key=f"k{i}")["id"] for i in range(20)]
    with django_assert_max_num_queries(4 + row_security_statements("receipt")):
        client.get(f"/api/receipt/{ids[3]}/verify")


@pytest.mark.parametrize(
    ("columns", "failed"),
    [
        ({"output_hash": "0" * 64}, {"hash", "record_matches"}),
        ({"workflow_id": "wf-other"}, {"record_matches"}),
        ({"outcome": "failed"}, {"record_matches"}),
        ({"signature": b"\x00" * 64}, {"signature"}),
    ],
)
def test_a_column_changed_behind_the_sites_back_is_invalid(
    producer: Producer, client: Client, columns: dict[str, Any], failed: set[str]
) -> None:
    answer = producer.publish()
    tamper(answer["id"], **columns)
    body = verify(client, answer["id"])
    assert body["status"] == "invalid"
    assert {name for name, result in checks(body).items() if result == "fail"} == failed


def test_changed_bytes_fail_every_check_that_reads_them(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    data = Receipt.objects.get(public_id=answer["id"]).raw_bytes()
    forged = data.replace(b"12 findings", b"13 findings")
    tamper(answer["id"], canonical_bytes=forged)
    body = verify(client, answer["id"])
    assert body["status"] == "invalid"
    result = checks(body)
    assert result["canonical_form"] == "pass"  # still well-formed JSON...
    assert result["hash"] == result["signature"] == result["log_inclusion"] == "fail"
    assert result["record_matches"] == "fail"  # ...but the stored hash column disagrees


def test_bytes_that_are_not_canonical_fail_canonical_form(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    data = Receipt.objects.get(public_id=answer["id"]).raw_bytes()
    spaced = json.dumps(json.loads(data), indent=1).encode()
    tamper(answer["id"], canonical_bytes=spaced, output_hash=hashlib.sha256(spaced).hexdigest())
    result = checks(verify(client, answer["id"]))
    assert result["canonical_form"] == "fail"
    assert result["hash"] == "pass"


def test_a_compromised_key_makes_its_signatures_fail(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    mark_compromised()
    body = verify(client, answer["id"])
    assert checks(body)["signature"] == "fail"
    assert body["status"] == "invalid"


@pytest.mark.parametrize(
    "receipt_id",
    ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "1234", "%00"],
)
def test_an_unknown_or_malformed_id_is_a_404_problem(client: Client, db: None,
                                                     receipt_id: str) -> None:
    response = client.get(f"/api/receipt/{receipt_id}/verify")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == f"{SITE}/problems/not-found"
    assert response["Cache-Control"] == "no-store"


def test_it_is_public_and_a_capability_url(producer: Producer) -> None:
    answer = producer.publish()
    response = Client().get(f"/api/receipt/{answer['id']}/verify")
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Robots-Tag"] == "noindex"
    assert response["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in response


def test_it_refuses_other_methods(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    response = client.post(f"/api/receipt/{answer['id']}/verify")
    assert response.status_code == 405
    assert response["Content-Type"] == "application/problem+json"


def test_openssl_agrees_with_the_site(producer: Producer, client: Client, tmp_path: Any) -> None:
    """The README's by-hand check, run with the real openssl command line."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    answer = producer.publish()
    body = verify(client, answer["id"])
    key = next(k for k in client.get("/.well-known/receipt-keys.json").json()["keys"]
               if k["kid"] == body["signature"]["key_id"])
    (tmp_path / "receipt.json").write_bytes(base64.b64decode(body["canonical_bytes"]))
    (tmp_path / "receipt.sig").write_bytes(base64.b64decode(body["signature"]["value"]))
    (tmp_path / "key.pem").write_text(key["pem"])
    command = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", "key.pem", "-rawin",
               "-in", "receipt.json", "-sigfile", "receipt.sig"]
    good = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert good.returncode == 0 and "Signature Verified Successfully" in good.stdout
    (tmp_path / "receipt.json").write_bytes(b" " + base64.b64decode(body["canonical_bytes"]))
    bad = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode != 0
    digest = subprocess.run(["sha256sum", "receipt.json"], cwd=tmp_path, capture_output=True,
                            text=True)
    assert digest.stdout.split()[0] != answer["output_hash"]

"""The public keys, the signed checkpoint, consistency proofs, key rotation, and the refusal to
sign a log that was rolled back. Checkpoints are signed by write paths (an ingest once it has
committed, `migrate`, `signcheckpoint`); reads serve the latest one stored."""

from __future__ import annotations

import base64
import hashlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management import call_command
from django.db import DatabaseError, OperationalError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from receiptsite.config import signing_key
from receiptsite.integrity import merkle
from receiptsite.integrity.keys import generate_private_key_pem
from receiptsite.ledger import keyring, log
from receiptsite.problems import Problem
from receiptsite.receipts.models import ApiKey, Receipt, SignedCheckpoint, SigningKey
from receiptsite.receipts.services import receipt_ingest
from tests.conftest import (
    Producer,
    assert_problem,
    command_line,
    example_body,
    mark_compromised,
    remember_a_tree_not_stored,
)

pytestmark = pytest.mark.db

SITE = "https://receipts.example.org"
ORIGIN = "receipts.example.org/receipts"


def keys(client: Client) -> dict[str, Any]:
    response = client.get("/.well-known/receipt-keys.json")
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    body: dict[str, Any] = response.json()
    return body


def check_note(note: str, public: bytes) -> str:
    """Verify a C2SP signed note independently of the site's code; return its text."""
    text, _, signatures = note.partition("\n\n")
    text += "\n"
    (line,) = signatures.splitlines()
    dash, name, blob_b64 = line.split(" ")
    assert dash == "\u2014" and name == ORIGIN
    blob = base64.b64decode(blob_b64)
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    assert blob[:4] == key_id
    Ed25519PublicKey.from_public_bytes(public).verify(blob[4:], text.encode())
    return text


def raw_public(key: dict[str, Any]) -> bytes:
    return base64.urlsafe_b64decode(key["x"] + "=")


def test_the_keys_document_has_the_specs_shape(producer: Producer, client: Client) -> None:
    producer.publish()
    body = keys(client)
    (key,) = body["keys"]
    assert set(key) == {"kty", "crv", "x", "kid", "alg", "use", "status", "created_at",
                        "retired_at", "pem"}
    assert (key["kty"], key["crv"], key["alg"], key["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")
    assert key["status"] == "active" and key["retired_at"] is None
    # kid is the RFC 7638 thumbprint, computed here from scratch.
    members = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": key["x"]}, separators=(",", ":"))
    thumb = base64.urlsafe_b64encode(hashlib.sha256(members.encode()).digest()).rstrip(b"=")
    assert key["kid"] == thumb.decode()
    assert key["pem"].startswith("-----BEGIN PUBLIC KEY-----\n")
    assert body["log"]["origin"] == ORIGIN
    key_id = hashlib.sha256(ORIGIN.encode() + b"\n\x01" + raw_public(key)).digest()[:4]
    expected = f"{ORIGIN}+{key_id.hex()}+{base64.b64encode(b'\x01' + raw_public(key)).decode()}"
    assert body["log"]["verifier_key"] == expected
    assert body["log"]["verifier_keys"] == [expected]


def test_the_checkpoint_is_a_signed_note_for_the_current_tree(
    producer: Producer, client: Client
) -> None:
    data = []
    for i in range(3):
        answer = producer.publish(idempotency_key=f"k{i}")
        verified = client.get(f"/api/receipt/{answer['id']}/verify").json()
        data.append(base64.b64decode(verified["canonical_bytes"]))
    response = client.get("/api/log/checkpoint")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    (key,) = keys(client)["keys"]
    text = check_note(response.content.decode(), raw_public(key))
    root = merkle.root_from_leaves([merkle.leaf_hash(d) for d in data])
    assert text == f"{ORIGIN}\n3\n{base64.b64encode(root).decode()}\n"


def test_the_empty_log_has_a_checkpoint_of_size_zero(client: Client, db: None) -> None:
    text = client.get("/api/log/checkpoint").content.decode()
    empty = base64.b64encode(hashlib.sha256(b"").digest()).decode()
    assert text.startswith(f"{ORIGIN}\n0\n{empty}\n\n\u2014 {ORIGIN} ")


def test_consistency_proofs_verify_between_every_pair_of_sizes(
    producer: Producer, client: Client
) -> None:
    roots = []
    for i in range(7):
        producer.publish(idempotency_key=f"k{i}")
        text = client.get("/api/log/checkpoint").content.decode().split("\n")
        roots.append(base64.b64decode(text[2]))
    for first in range(1, 8):
        for second in range(first, 8):
            response = client.get("/api/log/consistency", {"first": first, "second": second})
            assert response.status_code == 200
            body = response.json()
            assert (body["first"], body["second"]) == (first, second)
            proof = [base64.b64decode(p) for p in body["proof"]]
            if first == second:
                assert proof == []
            assert merkle.verify_consistency(first, second, proof, roots[first - 1],
                                             roots[second - 1])


@pytest.mark.parametrize(
    "query",
    [{"first": 0, "second": 1}, {"first": 2, "second": 1}, {"first": 1, "second": 4},
     {"first": "a", "second": 2}, {"first": 1}, {}, {"first": "-1", "second": 2},
     {"first": "1.0", "second": 2}],
)
def test_consistency_sizes_out_of_range_are_a_400(
    producer: Producer, client: Client, query: dict[str, Any]
) -> None:
    for i in range(3):
        producer.publish(idempotency_key=f"k{i}")
    response = client.get("/api/log/consistency", query)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == f"{SITE}/problems/bad-query-parameter"


def rotate(settings: Any, folder: Path) -> None:
    """What an operator does to rotate: point SIGNING_KEY_FILE at a new key and restart (a
    process reads the key once, at start, as settings.SIGNING_KEY)."""
    new_file = folder / "new-key.pem"
    new_file.write_bytes(generate_private_key_pem())
    settings.SIGNING_KEY_FILE = str(new_file)
    settings.SIGNING_KEY = signing_key(str(new_file))


def test_pointing_at_a_new_key_rotates_and_old_receipts_still_verify(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    old = producer.publish(idempotency_key="old")
    old_kid = keys(client)["keys"][0]["kid"]
    rotate(settings, tmp_path)

    new = producer.publish(idempotency_key="new")
    body = keys(client)
    assert [(k["kid"] == old_kid, k["status"]) for k in body["keys"]] == [
        (True, "retired"), (False, "active")
    ]
    assert body["keys"][0]["retired_at"] is not None
    assert len(body["log"]["verifier_keys"]) == 2
    assert body["log"]["verifier_key"] == body["log"]["verifier_keys"][1]

    old_check = client.get(f"/api/receipt/{old['id']}/verify").json()
    new_check = client.get(f"/api/receipt/{new['id']}/verify").json()
    assert old_check["status"] == new_check["status"] == "valid"
    assert old_check["signature"]["key_id"] == old_kid
    assert new_check["signature"]["key_id"] == body["keys"][1]["kid"]
    # From now on the new key signs the checkpoints.
    check_note(client.get("/api/log/checkpoint").content.decode(), raw_public(body["keys"][1]))


def test_signingkeys_lists_keys_and_one_compromised(
    producer: Producer, client: Client, settings: Any, tmp_path: Path, capsys: Any
) -> None:
    old = producer.publish(idempotency_key="old")
    old_kid = keys(client)["keys"][0]["kid"]
    rotate(settings, tmp_path)
    # Compromised since before it signed anything: nothing it signed is provably older.
    call_command("compromisekey", *command_line(old_kid, at="2000-01-01T00:00:00Z"))
    call_command("signingkeys")
    out = capsys.readouterr().out
    assert f"{old_kid}  compromised" in out
    assert "compromised as of 2000-01-01T00:00:00.000000Z" in out
    assert "active" in out
    assert client.get(f"/api/receipt/{old['id']}/verify").json()["status"] == "invalid"


# --- a log that was rolled back is never signed -------------------------------------------


def test_signing_remembers_the_largest_tree_outside_the_database(
    producer: Producer, settings: Any
) -> None:
    producer.publish(idempotency_key="a")
    producer.publish(idempotency_key="b")
    # Remembered when the ingest signed, no read needed.
    state = json.loads(Path(settings.LOG_STATE_FILE).read_text())
    assert state["tree_size"] == 2
    assert state["root_hash"] == base64.b64encode(log.head().root).decode()


def test_a_log_smaller_than_a_signed_one_is_refused(
    producer: Producer, client: Client, settings: Any
) -> None:
    answer = producer.publish()
    remember_a_tree_not_stored(settings)  # as if a tree of 10 had been signed before a restore
    response = client.get("/api/log/checkpoint")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    assert "10" in response.json()["detail"]
    health = client.get("/healthz")
    assert health.status_code == 503
    assert health["Content-Type"] == "application/problem+json"
    body = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert body["status"] == "invalid"
    assert body["log"] is None
    (inclusion,) = [c for c in body["checks"] if c["name"] == "log_inclusion"]
    assert inclusion["result"] == "fail" and "10" in inclusion["detail"]


def test_a_log_whose_history_differs_from_a_signed_one_is_refused(
    producer: Producer, client: Client, settings: Any
) -> None:
    producer.publish(idempotency_key="a")
    producer.publish(idempotency_key="b")
    # A different tree of size 1 was signed before.
    remember_a_tree_not_stored(settings, 1, b"\x02" * 32)
    assert client.get("/api/log/checkpoint").status_code == 503
    assert client.get("/healthz").status_code == 503


def test_healthz_is_ok_when_the_log_extends_what_was_signed(
    producer: Producer, client: Client
) -> None:
    producer.publish(idempotency_key="a")
    client.get("/api/log/checkpoint")
    producer.publish(idempotency_key="b")
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_origin_is_fixed_by_the_first_checkpoint(
    producer: Producer, client: Client, settings: Any
) -> None:
    assert client.get("/api/log/checkpoint").content.decode().startswith(f"{ORIGIN}\n0\n")
    settings.LOG_ORIGIN = "moved.example.org/receipts"  # as if SITE_URL had changed
    assert client.get("/api/log/checkpoint").content.decode().startswith(f"{ORIGIN}\n0\n")
    producer.publish()
    assert client.get("/api/log/checkpoint").content.decode().startswith(f"{ORIGIN}\n1\n")
    assert keys(client)["log"]["origin"] == ORIGIN


# --- written by write paths, served by reads ------------------------------------------------


def latest_stored() -> SignedCheckpoint:
    stored = SignedCheckpoint.objects.order_by("-tree_size", "-id").first()
    assert stored is not None
    return stored


def test_the_checkpoint_served_is_the_one_the_ingest_stored(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    stored = latest_stored()
    assert stored.tree_size == 1
    assert client.get("/api/log/checkpoint").content.decode() == stored.note
    verified = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert verified["log"]["checkpoint"] == stored.note
    # Serving it again signs nothing new.
    client.get("/api/log/checkpoint")
    assert SignedCheckpoint.objects.filter(tree_size=1).count() == 1


def test_a_new_database_has_the_empty_trees_checkpoint_signed_by_migrate(db: None) -> None:
    # The test database was made by `migrate`, which signed the empty tree.
    stored = latest_stored()
    assert stored.tree_size == 0
    empty = base64.b64encode(hashlib.sha256(b"").digest()).decode()
    assert stored.note.startswith(f"{ORIGIN}\n0\n{empty}\n\n")
    assert SigningKey.objects.get(pk=stored.signing_key_id).status == SigningKey.ACTIVE


def test_a_rotated_key_is_recorded_by_a_write_path_never_by_a_read(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    old = producer.publish()
    listed = keys(client)
    served = client.get("/api/log/checkpoint").content
    rotate(settings, tmp_path)
    # Reads after the restart: what was recorded and signed before, nothing new.
    assert keys(client) == listed
    assert client.get("/api/log/checkpoint").content == served
    assert client.get(f"/api/receipt/{old['id']}/verify").json()["status"] == "valid"
    assert SigningKey.objects.count() == 1

    out = StringIO()
    call_command("signcheckpoint", stdout=out)
    body = keys(client)
    assert [k["status"] for k in body["keys"]] == ["retired", "active"]
    assert body["keys"][1]["kid"] in out.getvalue()
    assert body["log"]["verifier_key"] == body["log"]["verifier_keys"][1]
    # The same tree head, signed again by the new key; old receipts keep verifying.
    served = client.get("/api/log/checkpoint").content
    text = check_note(served.decode(), raw_public(body["keys"][1]))
    assert text.split("\n")[1] == "1"
    assert client.get(f"/api/receipt/{old['id']}/verify").json()["status"] == "valid"
    call_command("signcheckpoint", stdout=StringIO())  # again: nothing left to sign
    assert SignedCheckpoint.objects.filter(tree_size=1).count() == 2


def test_migrate_records_a_rotated_key_and_signs_with_it(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    producer.publish()
    rotate(settings, tmp_path)
    call_command("migrate", verbosity=0)  # a deploy's migrate, nothing to apply
    body = keys(client)
    assert [k["status"] for k in body["keys"]] == ["retired", "active"]
    check_note(client.get("/api/log/checkpoint").content.decode(), raw_public(body["keys"][1]))


def test_a_receipt_stored_but_not_yet_signed_is_pending_until_a_write_signs(
    producer: Producer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer.publish(idempotency_key="a")

    def the_process_dies(current: log.Head) -> None:
        raise OperationalError("the worker was killed after the commit")

    # A tree stored without its note (an older release signed after the commit, and its
    # process died in between): committed, and no 201 was answered.
    # (The ingest itself: a request's transaction, which also writes its audit-log entry,
    # commits only after remember() is called.)
    monkeypatch.setattr(log, "sign_appended", lambda current: None)
    monkeypatch.setattr(log, "remember", the_process_dies)
    with pytest.raises(OperationalError):
        receipt_ingest(api_key=ApiKey.objects.get(), payload=example_body(idempotency_key="b"))
    monkeypatch.undo()
    (stranded,) = Receipt.objects.filter(idempotency_key="b")
    # Reads never sign: the checkpoint is still the one of 1 leaf, and the stranded receipt's
    # inclusion is pending (not failed: nothing is wrong with it).
    assert client.get("/api/log/checkpoint").content.decode().split("\n")[1] == "1"
    body = client.get(f"/api/receipt/{stranded.public_id}/verify").json()
    assert body["status"] == "pending" and body["log"] is None
    assert [c["result"] for c in body["checks"] if c["name"] == "log_inclusion"] == ["pending"]
    assert client.get(f"/run/{stranded.public_id}").status_code == 200

    # The producer, never answered, replays its key: the replay signs before it answers.
    replay = producer.post(example_body(idempotency_key="b"))
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert client.get("/api/log/checkpoint").content.decode().split("\n")[1] == "2"
    body = client.get(f"/api/receipt/{stranded.public_id}/verify").json()
    assert body["status"] == "valid" and body["log"]["tree_size"] == 2


def test_the_next_ingest_signs_a_tree_left_unsigned(
    producer: Producer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log, "sign_appended", lambda current: None)  # a tree left unsigned
    key = ApiKey.objects.get()
    stranded = receipt_ingest(api_key=key, payload=example_body(idempotency_key="a")).receipt
    monkeypatch.undo()
    producer.publish(idempotency_key="b")
    assert client.get("/api/log/checkpoint").content.decode().split("\n")[1] == "2"
    assert client.get(f"/api/receipt/{stranded.uuid}/verify").json()["status"] == "valid"


def test_while_the_log_is_refused_ingest_answers_503_and_stores_nothing(
    producer: Producer, client: Client, settings: Any
) -> None:
    first = producer.publish(idempotency_key="a")
    remember_a_tree_not_stored(settings)  # a restore from an old backup
    signed = SignedCheckpoint.objects.count()
    body = assert_problem(producer.post(example_body(idempotency_key="b")), 503, "log-not-signed")
    assert "10" in body["detail"]
    # A replay too: the log cannot vouch for what it would answer.
    assert_problem(producer.post(example_body(idempotency_key="a")), 503, "log-not-signed")
    batch = producer.post({"receipts": [example_body(idempotency_key="c")]},
                          path="/api/receipts/batch")
    assert [r["status"] for r in batch.json()["results"]] == [503]
    with pytest.raises(Problem):
        receipt_ingest(api_key=ApiKey.objects.get(), payload=example_body(idempotency_key="d"))
    assert Receipt.objects.count() == 1
    assert SignedCheckpoint.objects.count() == signed
    # Reads keep working.
    assert client.get(f"/run/{first['id']}").status_code == 200
    assert client.get("/.well-known/receipt-keys.json").status_code == 200


def test_without_a_key_it_may_use_the_site_stores_nothing_and_healthz_is_503(
    producer: Producer, client: Client, settings: Any
) -> None:
    answer = producer.publish(idempotency_key="a")
    settings.SIGNING_KEY = None  # DEBUG on and no SIGNING_KEY_FILE
    assert_problem(producer.post(example_body(idempotency_key="b")), 503, "cannot-sign")
    assert_problem(client.get("/healthz"), 503, "cannot-sign")
    assert Receipt.objects.count() == 1
    # Reads keep working.
    assert client.get("/api/log/checkpoint").status_code == 200
    assert client.get(f"/api/receipt/{answer['id']}/verify").json()["status"] == "valid"


def test_healthz_is_503_when_the_configured_key_is_marked_compromised(
    producer: Producer, client: Client
) -> None:
    producer.publish(idempotency_key="a")
    mark_compromised()  # by another process, say
    keyring.forget()  # this process starts after that
    body = assert_problem(client.get("/healthz"), 503, "cannot-sign")
    assert "compromised" in body["detail"]
    assert_problem(producer.post(example_body(idempotency_key="b")), 503, "cannot-sign")
    assert Receipt.objects.count() == 1


@pytest.mark.parametrize(
    "statement",
    ["UPDATE receipts_signedcheckpoint SET note = 'forged'",
     "DELETE FROM receipts_signedcheckpoint"],
)
def test_the_database_refuses_to_change_a_signed_checkpoint(
    producer: Producer, statement: str
) -> None:
    producer.publish()
    refused = pytest.raises(DatabaseError, match="append-only")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)


def test_a_tree_signed_but_not_remembered_before_a_crash_is_remembered_by_the_next_write(
    producer: Producer, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer.publish(idempotency_key="a")
    # Committed with its note, then the process died before it wrote LOG_STATE_FILE.
    monkeypatch.setattr(log, "remember", lambda current: None)
    producer.publish(idempotency_key="b")
    monkeypatch.undo()
    assert json.loads(Path(settings.LOG_STATE_FILE).read_text())["tree_size"] == 1
    # The next write catches up under the append lock before it stores anything.
    checked: list[int] = []
    real = log._remember

    def remembering(head: log.Head) -> None:
        checked.append(head.size)
        real(head)

    monkeypatch.setattr(log, "_remember", remembering)
    producer.publish(idempotency_key="c")
    assert checked[0] == 2  # the tree published before the crash, remembered first
    assert json.loads(Path(settings.LOG_STATE_FILE).read_text())["tree_size"] == 3


def test_one_commit_stores_the_receipt_its_leaf_and_its_signed_checkpoint(
    producer: Producer, client: Client
) -> None:
    producer.publish(idempotency_key="first")  # the key's row is recorded by this one
    with CaptureQueriesContext(connection) as queries:
        answer = producer.publish(idempotency_key="second")
    # Inside the test's own transaction each atomic block is a savepoint: the outermost one
    # (the request's, which also writes its audit-log entry) holds every insert: one commit.
    statements = [q["sql"] for q in queries.captured_queries]
    outermost = next(s for s in statements if s.startswith("SAVEPOINT")).split()[-1]
    released = statements.index(f"RELEASE SAVEPOINT {outermost}")
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert all(i < released for i, s in enumerate(statements) if s.startswith("INSERT"))
    assert any("receipts_signedcheckpoint" in sql for sql in inserts)
    note_size = client.get("/api/log/checkpoint").content.decode().split("\n")[1]
    assert int(note_size) == answer["log_index"] + 1

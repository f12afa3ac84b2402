"""Witnessed checkpoints, in this process: cosignatures stored only once they verify, the quorum
of WITNESS_POLICY_FILE, what readers are given (`/api/log/witnessed-checkpoint`, the
verification JSON's `log.witnessed`, the bundle's tlog proof, the keys document's policy), and
key compromise resting on the witnesses' dated word (SPEC, "Witnesses", "Key compromise").

The cosignatures here are made by the test itself with keys of its own (it stands for the
witnesses, choosing their timestamps); the site's submitter talking to real witness processes
over HTTP is tests/live/test_witnessing.py.
"""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.db import Error, connection, transaction
from django.test import Client
from django.utils import timezone

from receiptsite.integrity import cosignature, merkle, note, policy
from receiptsite.integrity.keys import public_raw
from receiptsite.ledger import keyring, witnesses
from receiptsite.receipts.models import Cosignature, SignedCheckpoint, format_timestamp
from tests.conftest import Producer, assert_problem, command_line
from tests.db.test_query_counts import PUBLIC, pinned, queries_of

pytestmark = pytest.mark.db

KEYS = {name: Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
        for seed, name in enumerate(["w1", "w2", "w3"], start=11)}  # fmt: skip


def key_name(name: str) -> str:
    return f"{name}.witness.test.example/w"


def vkey(name: str, key: Ed25519PrivateKey | None = None) -> str:
    return cosignature.witness_vkey(key_name(name), public_raw(key or KEYS[name]))


def use_policy(settings: Any, text: str) -> policy.Policy:
    settings.WITNESS_POLICY = policy.parse(text.encode())
    return settings.WITNESS_POLICY


def two_of_two(settings: Any) -> policy.Policy:
    return use_policy(
        settings,
        f"witness w1 {vkey('w1')} http://127.0.0.1:9/w1\n"
        f"witness w2 {vkey('w2')} http://127.0.0.1:9/w2\n"
        "group both all w1 w2\nquorum both\n",
    )


def one_of_two(settings: Any) -> policy.Policy:
    return use_policy(
        settings,
        f"witness w1 {vkey('w1')} http://127.0.0.1:9/w1\n"
        f"witness w2 {vkey('w2')} http://127.0.0.1:9/w2\n"
        "group either any w1 w2\nquorum either\n",
    )


def latest_checkpoint() -> SignedCheckpoint:
    found = SignedCheckpoint.objects.order_by("-tree_size", "-id").first()
    assert found is not None
    return found


def cosign(
    rules: policy.Policy, *names: str, at: int | None = None, key: Ed25519PrivateKey | None = None
) -> list[str]:
    """Each witness `names` cosigns the latest checkpoint (at POSIX time `at`, default now, by
    its own key unless `key`); the site stores what verifies. Returns the problems."""
    checkpoint = latest_checkpoint()
    body = witnesses.body_of(checkpoint.note)
    problems = []
    for name in names:
        line = cosignature.cosign(body, key_name(name), key or KEYS[name], at or int(time.time()))
        problems += witnesses.store(checkpoint, rules.witnesses[name], [line])
    return problems


def verification(client: Client, receipt_id: str) -> dict[str, Any]:
    response = client.get(f"/api/receipt/{receipt_id}/verify")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def cosignature_lines(text: str) -> list[str]:
    return [line for line in cosignature.signature_lines(text) if cosignature.parse_line(line)]


# --- no policy ----------------------------------------------------------------------------------


def test_without_a_policy_nothing_is_witnessed_and_the_site_says_so(
    client: Client, producer: Producer
) -> None:
    stored = producer.publish()
    body = assert_problem(client.get("/api/log/witnessed-checkpoint"), 404, "not-witnessed")
    assert "no witness policy" in body["detail"]
    assert verification(client, stored["id"])["log"]["witnessed"] is None
    assert client.get("/.well-known/receipt-keys.json").json()["log"]["witness_policy"] is None


# --- the quorum ---------------------------------------------------------------------------------


def test_a_checkpoint_cosigned_by_both_witnesses_of_a_2_of_2_policy_is_witnessed(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish()
    assert client.get("/api/log/witnessed-checkpoint").status_code == 404  # nobody yet
    when = int(time.time()) - 5
    assert cosign(rules, "w1", "w2", at=when) == []
    response = client.get("/api/log/witnessed-checkpoint")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    checkpoint = latest_checkpoint()
    text = response.content.decode()
    # The log's note, then one cosignature line per witness, each verifying.
    assert text.startswith(checkpoint.note)
    lines = cosignature_lines(text)
    assert sorted(cosignature.parse_line(line).name for line in lines) == [  # type: ignore[union-attr]
        key_name("w1"), key_name("w2")
    ]
    body = witnesses.body_of(checkpoint.note)
    for line in lines:
        read = cosignature.parse_line(line)
        assert read is not None and read.timestamp == when
        assert cosignature.verify(read, rules.witnesses[read.name.split(".")[0]].key, body)

    witnessed = verification(client, stored["id"])["log"]["witnessed"]
    assert witnessed["checkpoint"] == text
    assert witnessed["tree_size"] == checkpoint.tree_size
    assert {c["name"] for c in witnessed["cosigners"]} == {key_name("w1"), key_name("w2")}
    moment = format_timestamp(datetime.fromtimestamp(when, UTC))
    assert {c["time"] for c in witnessed["cosigners"]} == {moment}
    _, size, root = note.parse_checkpoint(body)
    data = base64.b64decode(verification(client, stored["id"])["canonical_bytes"])
    proof = [base64.b64decode(h) for h in witnessed["inclusion_proof"]]
    assert merkle.verify_inclusion(merkle.leaf_hash(data), 0, size, proof, root)


def test_one_cosignature_is_short_of_2_of_2_and_enough_for_1_of_2(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish()
    cosign(rules, "w1")
    assert client.get("/api/log/witnessed-checkpoint").status_code == 404
    assert verification(client, stored["id"])["log"]["witnessed"] is None
    one_of_two(settings)
    assert client.get("/api/log/witnessed-checkpoint").status_code == 200
    assert [c["name"] for c in verification(client, stored["id"])["log"]["witnessed"][
        "cosigners"]] == [key_name("w1")]  # fmt: skip


def test_the_largest_witnessed_tree_is_served_and_a_newer_receipt_is_not_yet_witnessed(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    older = producer.publish(idempotency_key="older")
    cosign(rules, "w1", "w2")
    witnessed_size = latest_checkpoint().tree_size
    newer = producer.publish(idempotency_key="newer")
    cosign(rules, "w1")  # the newer tree: one witness only
    text = client.get("/api/log/witnessed-checkpoint").content.decode()
    assert note.parse_checkpoint(witnesses.body_of(text))[1] == witnessed_size
    assert verification(client, older["id"])["log"]["witnessed"]["tree_size"] == witnessed_size
    assert verification(client, newer["id"])["log"]["witnessed"] is None
    cosign(rules, "w2")
    assert verification(client, newer["id"])["log"]["witnessed"]["tree_size"] == (
        witnessed_size + 1
    )


def test_nested_groups_are_counted_as_the_policy_says(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = use_policy(
        settings,
        f"witness w1 {vkey('w1')} http://w/1\nwitness w2 {vkey('w2')} http://w/2\n"
        f"witness w3 {vkey('w3')} http://w/3\ngroup pair 2 w1 w2\n"
        "group lone any w3\ngroup all-of-it all pair lone\nquorum all-of-it\n",
    )
    producer.publish()
    cosign(rules, "w1", "w3")
    assert witnesses.latest() is None
    cosign(rules, "w2")
    found = witnesses.latest()
    assert found is not None and len(found.cosigners) == 3


# --- what is stored, and what counts -------------------------------------------------------------


def test_a_cosignature_that_does_not_verify_is_refused_and_not_stored(
    producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish()
    impostor = Ed25519PrivateKey.from_private_bytes(bytes([99]) * 32)
    assert cosign(rules, "w1", key=impostor) == ["its answer holds no cosignature by its key"]
    # A line that names w1's key id but carries another signature fails to verify.
    checkpoint = latest_checkpoint()
    good = cosignature.cosign(witnesses.body_of(checkpoint.note), key_name("w1"), KEYS["w1"],
                              int(time.time()))  # fmt: skip
    blob = bytearray(base64.b64decode(good.split(" ")[2]))
    blob[-1] ^= 1
    bad = f"— {key_name('w1')} {base64.b64encode(bytes(blob)).decode()}"
    assert witnesses.store(checkpoint, rules.witnesses["w1"], [bad]) == [
        "a cosignature line of its key does not verify"
    ]
    assert not Cosignature.objects.exists()


def test_a_cosignature_dated_in_the_future_is_refused(producer: Producer, settings: Any) -> None:
    rules = two_of_two(settings)
    producer.publish()
    problems = cosign(rules, "w1", at=int(time.time()) + 3600)
    assert len(problems) == 1 and "in the future" in problems[0]
    assert not Cosignature.objects.exists()


def test_a_row_inserted_behind_the_sites_back_counts_for_nothing(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish()
    cosign(rules, "w1")
    checkpoint = latest_checkpoint()
    # Someone with the site's database role adds w2's "cosignature": its name and key id, but
    # a signature w2 never made.
    kid = note.key_id(key_name("w2"), public_raw(KEYS["w2"]), cosignature.COSIGNATURE_TYPE)
    blob = kid + int(time.time()).to_bytes(8, "big") + bytes(64)
    Cosignature.objects.create(
        checkpoint=checkpoint, tree_size=checkpoint.tree_size, witness_key=vkey("w2"),
        line=f"— {key_name('w2')} {base64.b64encode(blob).decode()}",
        cosigned_at=timezone.now(),
    )  # fmt: skip
    assert client.get("/api/log/witnessed-checkpoint").status_code == 404
    # A genuine line stored against a checkpoint of another tree does not count either.
    body = witnesses.body_of(checkpoint.note)
    line = cosignature.cosign(body, key_name("w2"), KEYS["w2"], int(time.time()))
    producer.publish(idempotency_key="later")
    later = latest_checkpoint()
    Cosignature.objects.create(
        checkpoint=later, tree_size=later.tree_size, witness_key=vkey("w2"), line=line,
        cosigned_at=timezone.now(),
    )  # fmt: skip
    assert witnesses.latest() is None


def test_a_witness_the_policy_no_longer_names_with_that_key_counts_for_nothing(
    producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish()
    cosign(rules, "w1", "w2")
    assert witnesses.latest() is not None
    other = Ed25519PrivateKey.from_private_bytes(bytes([77]) * 32)
    use_policy(
        settings,
        f"witness w1 {vkey('w1')} http://w/1\nwitness w2 {vkey('w2', other)} http://w/2\n"
        "group both all w1 w2\nquorum both\n",
    )
    assert witnesses.latest() is None


def test_the_cosignatures_are_append_only(producer: Producer, settings: Any) -> None:
    rules = two_of_two(settings)
    producer.publish()
    cosign(rules, "w1")
    table = Cosignature._meta.db_table
    for statement in (f"UPDATE {table} SET line = 'x'", f"DELETE FROM {table}"):
        with pytest.raises(Error), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    assert Cosignature.objects.get().line.startswith("— ")


# --- what readers are given ----------------------------------------------------------------------


def test_the_keys_document_publishes_the_policy_as_a_verifier_keeps_it(
    client: Client, producer: Producer, settings: Any
) -> None:
    two_of_two(settings)
    producer.publish()
    document = client.get("/.well-known/receipt-keys.json").json()
    text = document["log"]["witness_policy"]
    assert "http" not in text
    kept = policy.parse(text.encode())
    assert [log.vkey for log in kept.logs] == [document["log"]["verifier_key"]]
    assert {n: w.key.vkey for n, w in kept.witnesses.items()} == {
        "w1": vkey("w1"), "w2": vkey("w2")
    }
    assert not kept.satisfied({"w1"}) and kept.satisfied({"w1", "w2"})


def test_the_bundles_tlog_proof_is_against_the_witnessed_checkpoint(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish(idempotency_key="first")
    cosign(rules, "w1", "w2")
    producer.publish(idempotency_key="second")  # the latest checkpoint is now larger
    bundle = client.get(f"/run/{stored['id']}/bundle.json").json()
    log_part = bundle["verification"]["log"]
    assert log_part["tree_size"] == log_part["witnessed"]["tree_size"] + 1
    head, _, checkpoint = bundle["tlog_proof"].partition("\n\n")
    assert checkpoint == log_part["witnessed"]["checkpoint"]
    assert head.split("\n")[2:] == log_part["witnessed"]["inclusion_proof"]
    assert len(cosignature_lines(checkpoint)) == 2


def test_verify_with_a_policy_costs_one_more_query(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish(idempotency_key="first")
    stored = producer.publish(idempotency_key="second")
    cosign(rules, "w1", "w2")
    path = f"/api/receipt/{stored['id']}/verify"
    client.get(path)
    response, sql = queries_of(lambda: client.get(path))
    assert response.json()["log"]["witnessed"] is not None
    assert len(sql) == pinned(PUBLIC, "verify") + 1, "\n".join(sql)


# --- key compromise on the witnesses' word -------------------------------------------------------


def compromise(kid: str, at: str) -> str:
    out = StringIO()
    call_command("compromisekey", *command_line(kid, at=at), stdout=out)
    return out.getvalue()


@pytest.mark.usefixtures("own_key_file")
def test_a_compromise_re_signs_only_what_the_witnesses_cosigned_before_it(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    witnessed = producer.publish(idempotency_key="witnessed")
    cosign(rules, "w1", "w2", at=int(time.time()) - 30)
    unwitnessed = producer.publish(idempotency_key="site-record-only")
    kid = keyring.configured().kid
    report = compromise(kid, format_timestamp(timezone.now()))
    assert "that the witness policy's quorum cosigned before then" in report
    assert "Not signed again: 1 later receipt(s)" in report

    shown = verification(client, witnessed["id"])
    assert shown["status"] == "valid", shown["checks"]
    evidence = shown["signature"]["evidence"]
    assert evidence["signed_at_source"] == "witnesses"
    assert {c["name"] for c in evidence["cosigners"]} == {key_name("w1"), key_name("w2")}
    assert len(cosignature_lines(evidence["checkpoint"])) == 2
    detail = next(c["detail"] for c in shown["checks"] if c["name"] == "signature")
    assert "cosigned before then by the witnesses" in detail
    # The site's own record shows the second receipt logged before the compromise too, but no
    # witness does: with a policy, that is not taken.
    assert verification(client, unwitnessed["id"])["status"] == "invalid"


@pytest.mark.usefixtures("own_key_file")
def test_cosignatures_dated_after_the_compromise_prove_nothing_and_the_site_says_what_it_used(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish()
    at = timezone.now()
    time.sleep(1.1)  # cosignatures are dated in whole seconds
    cosign(rules, "w1", "w2")  # after `at`
    assert witnesses.evidence_before(at) is None
    report = compromise(keyring.configured().kid, format_timestamp(at))
    assert "No checkpoint was cosigned by the witness policy's quorum before then" in report
    evidence = verification(client, stored["id"])["signature"]["evidence"]
    assert evidence["signed_at_source"] == "site" and "cosigners" not in evidence


def test_tiles_and_witnesses_leave_the_checkpoint_route_unchanged(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish()
    cosign(rules, "w1", "w2")
    served = client.get("/api/log/checkpoint").content.decode()
    assert served == latest_checkpoint().note  # the site's signature alone
    assert client.get("/log/checkpoint").content.decode() == served



def test_checklog_checks_every_stored_cosignature(producer: Producer, settings: Any) -> None:
    from django.core.management.base import CommandError

    from tests.conftest import lift_guard

    rules = two_of_two(settings)
    producer.publish()
    cosign(rules, "w1", "w2")
    out = StringIO()
    call_command("checklog", stdout=out)
    assert out.getvalue().startswith("OK:")
    # A cosignature changed behind the site's back: its time, so its signature fails.
    row = Cosignature.objects.order_by("id").first()
    assert row is not None
    blob = bytearray(base64.b64decode(row.line.split(" ")[2]))
    blob[11] ^= 1
    lift_guard(Cosignature._meta.db_table)
    Cosignature.objects.filter(pk=row.pk).update(
        line=f"— {key_name('w1')} {base64.b64encode(bytes(blob)).decode()}"
    )
    with pytest.raises(CommandError, match=f"cosignature {row.pk} .*does not verify"):
        call_command("checklog", stdout=StringIO())

"""Key compromise: `compromisekey` on the suite's own database, in this process (the same on a
live site: tests/live/test_key_compromise.py), as an operator meets it (README, "Key
compromise").

The story: the site's key signs receipt `before`; later it leaks, at a time T; after T it
signs `after` (nobody knows yet); the operator runs `compromisekey <kid> --at T`, which marks
the key compromised, activates a new key, and signs `before` again with it, since a
checkpoint signed before T holds its leaf. `after` is not provably older than T: it fails, and
so does any checkpoint the leaked key signs after T, on the server, in `checklog` and in
receipt-verify. (The browser verifier's side is in tests/browser/test_browser.py.)

The proof is what the database recorded: whoever holds the leaked key and the site's database
role can append a forged receipt and a checkpoint of it, but the database stamps when that
checkpoint was signed (migrations/0013), so it cannot be dated before the leak; nor is a
checkpoint by a key compromised before it signed ever taken as proof.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import Error, connection, transaction
from django.test import Client

from receiptsite.config import signing_key
from receiptsite.integrity import keys, note
from receiptsite.ledger import keyring, log
from receiptsite.lib.rfc3339 import parse_rfc3339
from receiptsite.receipts.models import AppendedSignature, SignedCheckpoint, SigningKey
from tests.conftest import Producer, command_line, lift_guard, remember_a_tree_not_stored, tamper
from tests.db.test_immutability import database_clock

pytestmark = [pytest.mark.db, pytest.mark.usefixtures("own_key_file")]

TABLE = AppendedSignature._meta.db_table


def stamp() -> str:
    """Now, as every timestamp the site writes."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def tick() -> None:
    """Wait until the clock has moved on, so that what is stamped after is later than what
    was stamped before."""
    before = stamp()
    while stamp() == before:
        pass


# --- the command, on the suite's own database --------------------------------------------


def run_command(*args: Any, **options: Any) -> str:
    out = StringIO()
    call_command("compromisekey", *command_line(*args, **options), stdout=out, stderr=StringIO())
    return out.getvalue()


def state() -> list[Any]:
    return [
        list(SigningKey.objects.order_by("pk").values_list("kid", "status", "compromised_at")),
        AppendedSignature.objects.count(),
        SignedCheckpoint.objects.count(),
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"at": "yesterday"}, "is not an RFC 3339 timestamp"),
        ({"at": "2026-02-30T00:00:00Z"}, "is not an RFC 3339 timestamp"),
        ({"at": "2999-01-01T00:00:00Z"}, "is in the future"),
        ({"at": "2026-01-01T00:00:00Z", "kid": "no-such-key"}, "no signing key has the id"),
        (
            {"at": "2026-01-01T00:00:00Z", "new_key_file": "/nonexistent.pem"},
            "--new-key-file names /nonexistent.pem, which does not exist",
        ),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    producer: Producer, settings: Any, tmp_path: Path, arguments: dict[str, str], message: str
) -> None:
    producer.publish()
    settings.VAR_DIR = tmp_path
    before, unchanged = state(), Path(settings.SIGNING_KEY_FILE).read_bytes()
    kid = arguments.pop("kid", keyring.configured().kid)
    with pytest.raises(CommandError, match=re.escape(message)):
        run_command(kid, **arguments)
    assert state() == before
    assert Path(settings.SIGNING_KEY_FILE).read_bytes() == unchanged
    assert list(tmp_path.glob("**/signing-key-*.pem")) == []


def test_a_key_is_compromised_once(producer: Producer, settings: Any, tmp_path: Path) -> None:
    producer.publish()
    settings.VAR_DIR = tmp_path
    kid = keyring.configured().kid
    run_command(kid, at=stamp())
    before = state()
    with pytest.raises(CommandError, match="already marked compromised"):
        run_command(kid, at=stamp())
    assert state() == before


def test_a_receipt_changed_behind_the_sites_back_is_not_signed_again(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    kept = producer.publish(idempotency_key="kept")
    changed = producer.publish(idempotency_key="changed")
    tamper(changed["id"], canonical_bytes=b'{"forged": true}')
    settings.VAR_DIR = tmp_path
    output = run_command(keyring.configured().kid, at=stamp())
    assert "Signed again by" in output and ": 1 receipt(s)" in output
    assert "Left out: 1 receipt(s)" in output
    assert client.get(f"/api/receipt/{kept['id']}/verify").json()["status"] == "valid"
    body = client.get(f"/api/receipt/{changed['id']}/verify").json()
    assert body["status"] == "invalid"
    assert [c["result"] for c in body["checks"] if c["name"] == "signature"] == ["fail"]


def test_a_new_key_file_becomes_the_active_key(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    answer = producer.publish()
    new_file = tmp_path / "next.pem"
    new_file.write_bytes(keys.generate_private_key_pem())
    new = keys.jwk_thumbprint(keys.public_raw(keys.load_private_key_pem(new_file.read_bytes())))
    output = run_command(keyring.configured().kid, at=stamp(), new_key_file=str(new_file))
    assert f"Now point SIGNING_KEY_FILE at {new_file.resolve()} and restart" in output
    assert SigningKey.objects.get(kid=new).status == SigningKey.ACTIVE
    assert client.get(f"/api/receipt/{answer['id']}/verify").json()["signature"]["key_id"] == new


def test_the_key_that_took_over_can_be_compromised_in_its_turn(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    answer = producer.publish()
    settings.VAR_DIR = tmp_path
    first = keyring.configured().kid
    run_command(first, at=stamp())
    [second] = SigningKey.objects.filter(status=SigningKey.ACTIVE).values_list("kid", flat=True)
    # The operator points SIGNING_KEY_FILE at the second key; later it leaks too.
    # compromisekey wrote the second key into SIGNING_KEY_FILE; the next command reads it.
    settings.SIGNING_KEY = signing_key(settings.SIGNING_KEY_FILE)
    keyring.forget()
    tick()
    run_command(second, at=stamp())
    [third] = SigningKey.objects.filter(status=SigningKey.ACTIVE).values_list("kid", flat=True)
    body = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert body["status"] == "valid" and body["signature"]["key_id"] == third
    assert AppendedSignature.objects.count() == 2


APPEND_ONLY = "append-only"


@pytest.mark.parametrize(
    ("vendors", "statement"),
    [
        ({"sqlite", "postgresql"}, f"UPDATE {TABLE} SET signature = signature"),
        ({"sqlite", "postgresql"}, f"DELETE FROM {TABLE}"),
        ({"postgresql"}, f"TRUNCATE {TABLE}"),
        ({"sqlite"}, f"INSERT OR REPLACE INTO {TABLE} SELECT * FROM {TABLE}"),
        (
            {"sqlite", "postgresql"},
            f"INSERT INTO {TABLE} SELECT * FROM {TABLE} WHERE true "
            "ON CONFLICT (id) DO UPDATE SET signature = excluded.signature",
        ),
    ],
)
def test_the_database_refuses_to_change_an_appended_signature(
    producer: Producer, settings: Any, tmp_path: Path, vendors: set[str], statement: str
) -> None:
    if connection.vendor not in vendors:
        pytest.skip(f"{connection.vendor} has no such statement")
    producer.publish()
    settings.VAR_DIR = tmp_path
    run_command(keyring.configured().kid, at=stamp())
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # The deferred foreign-key checks now, or TRUNCATE is refused for those first.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    before = list(AppendedSignature.objects.values_list("id", "signature"))
    assert before
    with pytest.raises(Error, match=APPEND_ONLY), transaction.atomic(), connection.cursor() as c:
        c.execute(statement)
    assert list(AppendedSignature.objects.values_list("id", "signature")) == before


def test_checklog_checks_every_appended_signature(
    producer: Producer, settings: Any, tmp_path: Path
) -> None:
    producer.publish()
    settings.VAR_DIR = tmp_path
    run_command(keyring.configured().kid, at=stamp())
    settings.SIGNING_KEY = signing_key(settings.SIGNING_KEY_FILE)  # the new key, written there
    keyring.forget()
    out = StringIO()
    call_command("checklog", stdout=out)
    assert "OK: 1 leaves" in out.getvalue()
    lift_guard(TABLE)  # the test fixture's maintenance path (tests/conftest.py)
    AppendedSignature.objects.update(signature=bytes(64))
    with pytest.raises(CommandError, match=r"appended signature \d+ does not verify"):
        call_command("checklog", stdout=StringIO())


def test_a_log_the_site_refuses_to_sign_leaves_everything_as_it_was(
    producer: Producer, settings: Any, tmp_path: Path
) -> None:
    producer.publish()
    settings.VAR_DIR = tmp_path / "var"
    # The site remembers a larger tree than the database holds (restored from an old backup).
    remember_a_tree_not_stored(settings, root=bytes(32), origin="x")
    before, unchanged = state(), Path(settings.SIGNING_KEY_FILE).read_bytes()
    with pytest.raises(CommandError, match="refuses to sign its log"):
        run_command(keyring.configured().kid, at=stamp())
    assert state() == before
    assert Path(settings.SIGNING_KEY_FILE).read_bytes() == unchanged
    assert not (tmp_path / "var").exists()


# --- the evidence: what the database recorded, never a time the inserting code chose -------


def insert_checkpoint(private: Any, key_id: int, signed_at: datetime | None) -> None:
    """What whoever holds a leaked key and the site's database role can do: sign a note of the
    stored tree with the key and insert it as a signed checkpoint, raw SQL through the
    connection, saying (with `signed_at`) that it was signed then."""
    current = log.head()
    text = note.sign_note(
        note.checkpoint_body(current.origin, current.size, current.root), current.origin, private
    )
    columns = ["tree_size", "note", "signing_key_id"]
    params: list[Any] = [current.size, text, key_id]
    if signed_at is not None:
        columns.append("signed_at")
        params.append(connection.ops.adapt_datetimefield_value(signed_at))
    marks = ", ".join(["%s"] * len(params))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {SignedCheckpoint._meta.db_table} ({', '.join(columns)}) "
            f"VALUES ({marks})",
            params,
        )


def insert_back_dated_checkpoint(private: Any, key_id: int, claimed: datetime) -> None:
    """A checkpoint that says it was signed at `claimed`; where the database refuses a time of
    the insert's own (SQLite), the best the attacker can do: the same checkpoint, stamped."""
    try:
        with transaction.atomic():
            insert_checkpoint(private, key_id, claimed)
    except Error:
        assert connection.vendor == "sqlite"
        insert_checkpoint(private, key_id, None)


def past_on_the_database_clock(moment: str) -> None:
    """Wait until the database's clock (on SQLite, to the millisecond) is past `moment`, so
    that what it stamps from now on is later."""
    while database_clock() <= parse_rfc3339(moment):
        pass


def signature_check(client: Client, receipt_id: str) -> tuple[str, str]:
    body = client.get(f"/api/receipt/{receipt_id}/verify").json()
    [check] = [c for c in body["checks"] if c["name"] == "signature"]
    return check["result"], body["signature"]["key_id"]


def test_a_forgery_with_a_back_dated_checkpoint_is_not_signed_again(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path
    honest = producer.publish(idempotency_key="honest")
    claimed = datetime.now(UTC)  # what the forged checkpoint will say
    tick()
    leaked_at = stamp()  # after every real signature of the honest receipt
    past_on_the_database_clock(leaked_at)
    # Whoever holds the leaked key and the site role: a receipt signed by the leaked key and
    # appended to the log (the site's own ingest still signs with that key, so it stands in
    # for the raw inserts: every table they need is insert-only), then a checkpoint of the log
    # with it, signed by the leaked key, dated before the leak.
    forged = producer.publish(idempotency_key="forged")
    leaked = keyring.configured()
    insert_back_dated_checkpoint(leaked.private, keyring.active_key().row.pk, claimed)
    assert SignedCheckpoint.objects.latest("id").signed_at > parse_rfc3339(leaked_at)
    run_command(leaked.kid, at=leaked_at)
    [new] = SigningKey.objects.filter(status=SigningKey.ACTIVE).values_list("kid", flat=True)
    assert signature_check(client, honest["id"]) == ("pass", new)
    assert signature_check(client, forged["id"]) == ("fail", leaked.kid)
    assert AppendedSignature.objects.count() == 1


def test_a_checkpoint_by_a_key_compromised_before_it_signed_is_no_evidence(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path
    producer.publish(idempotency_key="first")
    first = keyring.configured()
    tick()
    first_compromised = stamp()
    run_command(first.kid, at=first_compromised)
    # The site now signs with the key that took over (compromisekey wrote it there).
    settings.SIGNING_KEY = signing_key(settings.SIGNING_KEY_FILE)
    keyring.forget()
    second = keyring.active_key()
    answer = producer.publish(idempotency_key="second")
    # After its compromise the first key signs the same tree again: that proves nothing.
    past_on_the_database_clock(first_compromised)
    first_row = SigningKey.objects.get(kid=first.kid)
    insert_checkpoint(first.private, first_row.pk, None)
    tick()
    run_command(second.kid, at=stamp())
    [third] = SigningKey.objects.filter(status=SigningKey.ACTIVE).values_list("kid", flat=True)
    made = AppendedSignature.objects.filter(signing_key__kid=third).select_related("evidence")
    assert [(a.evidence.tree_size, a.evidence.signing_key_id) for a in made] == [
        (2, second.row.pk),
        (2, second.row.pk),
    ]
    assert signature_check(client, answer["id"]) == ("pass", third)
    # checklog holds each appended signature to the same rule, the key it took over from
    # included (for the first receipt, the second key: compromised after that checkpoint).
    out = StringIO()
    settings.SIGNING_KEY = signing_key(settings.SIGNING_KEY_FILE)
    keyring.forget()
    call_command("checklog", stdout=out)
    assert "OK: 2 leaves" in out.getvalue()


# --- the evidence, in the verification JSON: checkable by anyone -------------------------


def test_a_re_signed_receipt_carries_its_evidence_checkpoint_and_proof(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    from receiptsite_client.verify import verify_verification

    from receiptsite.integrity import merkle
    from receiptsite.integrity.encoding import b64decode

    settings.VAR_DIR = tmp_path
    first = producer.publish(idempotency_key="first")
    answer = producer.publish(idempotency_key="second")
    producer.publish(idempotency_key="third")
    changed = producer.publish(idempotency_key="changed")  # left out: not signed again
    tamper(changed["id"], canonical_bytes=b'{"forged": true}')
    before = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert "evidence" not in before["signature"]  # signed once: nothing to rest on
    old = keyring.configured()
    tick()
    run_command(old.kid, at=stamp())
    body = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert body["status"] == "valid"
    evidence = body["signature"]["evidence"]
    made = AppendedSignature.objects.select_related("evidence").get(
        receipt__public_id=answer["id"]
    )
    assert evidence["checkpoint"] == made.evidence.note
    assert evidence["tree_size"] == made.evidence.tree_size == 4
    assert evidence["leaf_index"] == body["log"]["index"] == 1
    assert evidence["signed_at_source"] == "site"
    # Anyone can check it: a note by the compromised key, for the log, whose tree holds the
    # receipt's leaf, signed before the compromise the keys document states.
    keys_document = client.get("/.well-known/receipt-keys.json").json()
    [listed] = [k for k in keys_document["keys"] if k["kid"] == old.kid]
    origin = body["log"]["origin"]
    text = note.verify_note(evidence["checkpoint"], [note.verifier_key(origin, old.public)])
    assert text is not None
    assert note.parse_checkpoint(text)[:2] == (origin, evidence["tree_size"])
    leaf = merkle.leaf_hash(b64decode(body["canonical_bytes"]))
    proof = [b64decode(p) for p in evidence["inclusion_proof"]]
    root = note.parse_checkpoint(text)[2]
    assert merkle.verify_inclusion(leaf, 1, 4, proof, root)
    assert parse_rfc3339(evidence["signed_at"]) < parse_rfc3339(listed["compromised_at"])
    # receipt-verify checks it, and says so.
    result = verify_verification(body, keys_document, None)
    assert result.status == "valid", result.as_json()
    signature = result.check("signature")
    assert signature is not None and "the checkpoint of 4 leaves" in signature.detail
    # The offline bundle carries it, as the verify route serves it.
    bundle = client.get(f"/run/{first['id']}/bundle.json").json()
    first_body = client.get(f"/api/receipt/{first['id']}/verify").json()
    assert bundle["verification"]["signature"] == first_body["signature"]
    assert bundle["verification"]["signature"]["evidence"]["leaf_index"] == 0
    left_out = client.get(f"/api/receipt/{changed['id']}/verify").json()
    assert left_out["status"] == "invalid" and "evidence" not in left_out["signature"]


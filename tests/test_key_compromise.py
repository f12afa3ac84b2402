"""Key compromise, end to end on a live site (gunicorn, its own database: SQLite, or
PostgreSQL when the suite runs there), as an operator meets it (README, "Key compromise").

The story: the site's key signs receipt `before`; later it leaks, at a time T; after T it
signs `after` (nobody knows yet); the operator runs `compromisekey <kid> --at T`, which marks
the key compromised, activates a new key, and signs `before` again with it, since a
checkpoint signed before T holds its leaf. `after` is not provably older than T: it fails, and
so does any checkpoint the leaked key signs after T, on the server, in `checklog` and in
receipt-verify. (The browser verifier's side is in tests/test_browser.py.)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import Error, connection, transaction
from django.test import Client
from receiptsite_client import verify as client

from receiptsite.config import signing_key
from receiptsite.integrity import keys, note
from receiptsite.integrity.encoding import b64url_decode
from receiptsite.ledger import keyring
from receiptsite.receipts.models import AppendedSignature, SignedCheckpoint, SigningKey
from tests.conftest import EXAMPLE_BODY, Producer, lift_guard, tamper
from tests.livesite import LiveSite

TABLE = AppendedSignature._meta.db_table
NEW_KEY_FILE = re.compile(r"Now point SIGNING_KEY_FILE at (\S+) and restart")


def publish(live: LiveSite, **changes: Any) -> dict[str, Any]:
    response = live.post("/api/receipts", {**EXAMPLE_BODY, **changes})
    assert response.status == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def keys_document(live: LiveSite) -> dict[str, Any]:
    document: dict[str, Any] = live.get("/.well-known/receipt-keys.json").json()
    return document


def verify(live: LiveSite, receipt_id: str) -> dict[str, Any]:
    response = live.get(f"/api/receipt/{receipt_id}/verify")
    assert response.status == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def check(body: dict[str, Any], name: str) -> dict[str, str]:
    [found] = [c for c in body["checks"] if c["name"] == name]
    return found


def stamp() -> str:
    """Now, as every timestamp the site writes."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(scope="module")
def compromised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2) as live:
        leaked = keys.load_private_key_pem(Path(live.base_env["SIGNING_KEY_FILE"]).read_bytes())
        before = publish(live, idempotency_key="before")
        checkpoint_before = live.get("/api/log/checkpoint").text
        [old] = keys_document(live)["keys"]
        time.sleep(0.01)
        leaked_at = stamp()
        time.sleep(0.01)
        after = publish(live, idempotency_key="after")
        checkpoint_after = live.get("/api/log/checkpoint").text
        # One argument with "=": a kid is base64url and may begin with "-".
        output = live.manage("compromisekey", f"--at={leaked_at}", "--", old["kid"])
        yield {
            "live": live,
            "leaked": leaked,
            "old": old,
            "leaked_at": leaked_at,
            "before": before,
            "after": after,
            "output": output,
            "checkpoint_before": checkpoint_before,
            "checkpoint_after": checkpoint_after,
            "folder": tmp_path_factory.mktemp("compromise"),
        }


@pytest.fixture(scope="module")
def restarted(compromised: dict[str, Any]) -> dict[str, Any]:
    """The running site, not restarted, stores a receipt after the compromise: it read the new
    key that compromisekey wrote into SIGNING_KEY_FILE at its first write."""
    compromised["later"] = publish(compromised["live"], idempotency_key="later")
    return compromised


def test_the_keys_document_shows_the_key_compromised_with_its_time(
    compromised: dict[str, Any],
) -> None:
    document = keys_document(compromised["live"])
    old, new = document["keys"]
    assert old["kid"] == compromised["old"]["kid"]
    assert (old["status"], old["compromised_at"]) == ("compromised", compromised["leaked_at"])
    assert old["retired_at"] is not None
    assert new["status"] == "active" and "compromised_at" not in new
    assert document["log"]["verifier_key"] == document["log"]["verifier_keys"][1]
    output = compromised["output"]
    assert "Signed again by" in output and "1 receipt(s)" in output
    assert "Wrote the new key in place of the compromised one in SIGNING_KEY_FILE" in output
    # SIGNING_KEY_FILE now holds the new key, a PKCS#8 file only its owner may read.
    path = Path(compromised["live"].base_env["SIGNING_KEY_FILE"])
    assert path.stat().st_mode & 0o077 == 0
    private = keys.load_private_key_pem(path.read_bytes())
    assert keys.jwk_thumbprint(keys.public_raw(private)) == new["kid"]


def test_with_a_new_key_file_the_site_stores_nothing_until_restarted_with_it(
    tmp_path: Path,
) -> None:
    with LiveSite(workers=1) as live:
        publish(live, idempotency_key="before")
        [old] = keys_document(live)["keys"]
        new_file = tmp_path / "next.pem"
        new_file.write_bytes(keys.generate_private_key_pem())
        output = live.manage(
            "compromisekey", f"--at={stamp()}", f"--new-key-file={new_file}", "--", old["kid"]
        )
        match = NEW_KEY_FILE.search(output)
        assert match and match[1] == str(new_file.resolve()), output
        # Until the restart the site still holds the leaked key: it stores and signs nothing.
        checkpoint = live.get("/api/log/checkpoint").text
        refused = live.post("/api/receipts", {**EXAMPLE_BODY, "idempotency_key": "refused"})
        assert refused.status == 503 and refused.json()["type"].endswith("/cannot-sign")
        assert live.get("/api/log/checkpoint").text == checkpoint
        health = live.get("/healthz")
        assert health.status == 503 and "compromised" in health.json()["detail"]
        live.base_env["SIGNING_KEY_FILE"] = str(new_file)
        live.stop()
        live._serve()
        later = publish(live, idempotency_key="later")
        assert live.get("/healthz").status == 200
        assert (
            verify(live, later["id"])["signature"]["key_id"]
            == keys_document(live)["keys"][1]["kid"]
        )


def test_a_receipt_logged_before_the_compromise_verifies_by_the_new_key(
    restarted: dict[str, Any],
) -> None:
    live, old = restarted["live"], restarted["old"]
    new = keys_document(live)["keys"][1]
    body = verify(live, restarted["before"]["id"])
    assert body["status"] == "valid", body["checks"]
    assert body["signature"]["key_id"] == new["kid"]
    data = client.b64decode(body["canonical_bytes"])
    assert keys.verify_signature(
        b64url_decode(new["x"]), data, client.b64decode(body["signature"]["value"])
    )
    detail = check(body, "signature")["detail"]
    assert old["kid"] in detail and new["kid"] in detail
    assert f"compromised as of {restarted['leaked_at']}" in detail
    page = live.get(f"/run/{restarted['before']['id']}").text
    assert "does not verify" not in page


def test_a_receipt_not_provably_logged_before_fails_and_the_page_says_why(
    restarted: dict[str, Any],
) -> None:
    live, old = restarted["live"], restarted["old"]
    body = verify(live, restarted["after"]["id"])
    assert body["status"] == "invalid"
    assert body["signature"]["key_id"] == old["kid"]
    signature = check(body, "signature")
    assert signature["result"] == "fail"
    assert f"compromised as of {restarted['leaked_at']}" in signature["detail"]
    assert "cannot be shown to have been logged before" in signature["detail"]
    # The other checks pass: the bytes are the ones stored and logged.
    assert [c["name"] for c in body["checks"] if c["result"] == "fail"] == ["signature"]
    page = live.get(f"/run/{restarted['after']['id']}").text
    assert "Warning: this receipt does not verify" in page
    assert "reported compromised (it may have leaked) as of " + restarted["leaked_at"] in page
    assert "It may have been altered" not in page
    chinese = live.get(
        f"/run/{restarted['after']['id']}", headers={"Accept-Language": "zh-Hans"}
    ).text
    assert f"自 {restarted['leaked_at']} 起已泄露" in chinese


def test_the_new_key_signs_the_log_and_new_receipts(restarted: dict[str, Any]) -> None:
    live = restarted["live"]
    document = keys_document(live)
    assert live.get("/healthz").status == 200
    later = verify(live, restarted["later"]["id"])
    assert later["status"] == "valid"
    assert later["signature"]["key_id"] == document["keys"][1]["kid"]
    checkpoint = live.get("/api/log/checkpoint").text
    assert note.verify_note(checkpoint, [document["log"]["verifier_key"]]) is not None
    assert note.verify_note(checkpoint, [document["log"]["verifier_keys"][0]]) is None
    assert "OK: 3 leaves" in live.manage("checklog")


def test_checklog_accepts_a_checkpoint_the_old_key_signed_before_and_no_other(
    restarted: dict[str, Any],
) -> None:
    live, folder = restarted["live"], restarted["folder"]
    origin = keys_document(live)["log"]["origin"]
    before = folder / "before.txt"
    before.write_text(restarted["checkpoint_before"])
    assert "before the compromise" in live.manage("checklog", "--against", str(before))
    # Signed by the leaked key after T: by the site itself, or by whoever holds the key.
    after = folder / "after.txt"
    after.write_text(restarted["checkpoint_after"])
    forged = folder / "forged.txt"  # the current tree, which the leaked key never signed
    body = live.get("/api/log/checkpoint").text.partition("\n\n")[0] + "\n"
    forged.write_text(note.sign_note(body, origin, restarted["leaked"]))
    for path in (after, forged):
        with pytest.raises(RuntimeError, match="has no record of signing it before then"):
            live.manage("checklog", "--against", str(path))


def test_receipt_verify_takes_the_new_signature_and_refuses_the_leaked_keys_checkpoint(
    restarted: dict[str, Any],
) -> None:
    live = restarted["live"]
    base = live.url
    assert client.verify_target(f"{base}/run/{restarted['before']['id']}").status == "valid"
    result = client.verify_target(f"{base}/run/{restarted['after']['id']}")
    assert result.status == "invalid" and result.failed() == ["signature"]
    signature = result.check("signature")
    assert signature is not None and restarted["leaked_at"] in signature.detail
    # The verification of `before` with its checkpoint swapped for the one the leaked key
    # signed after T: genuine signature, wrong time, refused.
    verification = verify(live, restarted["before"]["id"])
    text = restarted["checkpoint_before"].partition("\n\n")[0] + "\n"
    origin = verification["log"]["origin"]
    verification["log"]["checkpoint"] = note.sign_note(text, origin, restarted["leaked"])
    [size, root] = text.splitlines()[1:3]
    verification["log"]["tree_size"], verification["log"]["root_hash"] = int(size), root
    verification["log"]["inclusion_proof"] = []
    checked = client.verify_verification(verification, keys_document(live), None)
    checkpoint = checked.check("checkpoint_signature")
    assert checkpoint is not None and checkpoint.result == client.FAIL
    assert "signed only by a key marked compromised" in checkpoint.detail
    assert restarted["leaked_at"] in checkpoint.detail


def test_the_server_never_serves_a_checkpoint_the_leaked_key_signed_after(
    restarted: dict[str, Any],
) -> None:
    """A note by the leaked key stored behind the site's back (as if it had signed after T):
    the site refuses to serve it, fails the log check, and recovers once `signcheckpoint`
    signs the tree with the active key."""
    live = restarted["live"]
    current = live.get("/api/log/checkpoint").text
    origin = keys_document(live)["log"]["origin"]
    forged = note.sign_note(current.partition("\n\n")[0] + "\n", origin, restarted["leaked"])
    live.manage(
        "shell",
        "-c",
        (
            "from receiptsite.receipts.models import SignedCheckpoint, SigningKey; "
            f"k = SigningKey.objects.get(kid={restarted['old']['kid']!r}); "
            f"SignedCheckpoint.objects.create(tree_size={current.splitlines()[1]}, "
            f"note={forged!r}, signing_key=k)"
        ),
    )
    refused = live.get("/api/log/checkpoint")
    assert refused.status == 503 and restarted["old"]["kid"] in refused.json()["detail"]
    assert live.get("/healthz").status == 503
    body = verify(live, restarted["before"]["id"])
    assert body["status"] == "invalid" and body["log"] is None
    assert "compromised" in check(body, "log_inclusion")["detail"]
    with pytest.raises(RuntimeError, match="signed after it was compromised"):
        live.manage("checklog")
    live.manage("signcheckpoint")
    assert live.get("/api/log/checkpoint").text != forged
    assert verify(live, restarted["before"]["id"])["status"] == "valid"
    assert live.get("/healthz").status == 200


# --- the command, on the suite's own database --------------------------------------------


@pytest.fixture(autouse=True)
def own_key_file(settings: Any, tmp_path: Path) -> Path:
    """A copy of the suite's signing key for SIGNING_KEY_FILE: compromisekey writes the new
    key in place of the compromised one there."""
    copy = tmp_path / "own-signing-key.pem"
    copy.write_bytes(Path(settings.SIGNING_KEY_FILE).read_bytes())
    copy.chmod(0o600)
    settings.SIGNING_KEY_FILE = str(copy)
    settings.SIGNING_KEY = settings.SIGNING_KEY  # restored after the test, whoever changes it
    return copy


def run_command(*args: Any, **options: Any) -> str:
    out = StringIO()
    call_command("compromisekey", *args, stdout=out, stderr=StringIO(), **options)
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
    time.sleep(0.01)
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
    Path(settings.LOG_STATE_FILE).write_text(
        json.dumps({"origin": "x", "tree_size": 10, "root_hash": "A" * 43 + "="})
    )
    before, unchanged = state(), Path(settings.SIGNING_KEY_FILE).read_bytes()
    with pytest.raises(CommandError, match="refuses to sign its log"):
        run_command(keyring.configured().kid, at=stamp())
    assert state() == before
    assert Path(settings.SIGNING_KEY_FILE).read_bytes() == unchanged
    assert not (tmp_path / "var").exists()

"""A log that lost signed trees ends with a signed statement and continues under a new origin
(`manage.py continuelog`), never with a silent reset.

The restore is played here by the site remembering a larger tree than the database holds
(LOG_STATE_FILE, or Redis), which is what a restore from an old backup leaves behind;
tests/live/test_backup_restore.py restores a real dump of a real PostgreSQL database.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from django.test import Client

from receiptsite.integrity import note
from receiptsite.integrity.continuation import Continuation
from receiptsite.integrity.encoding import b64, b64decode
from receiptsite.ledger import keyring, log, logstate
from receiptsite.ledger.log import LogRollback
from receiptsite.receipts.models import LogContinuation, SignedCheckpoint
from tests.conftest import (
    Producer,
    assert_problem,
    count_receipts,
    example_body,
    remember_a_tree_not_stored,
)

pytestmark = pytest.mark.db

ORIGIN = "receipts.example.org/receipts"
LOST_ROOT = b"\x07" * 32


def state(settings: Any) -> dict[str, Any]:
    return dict(json.loads(Path(settings.LOG_STATE_FILE).read_text()))


def restored(settings: Any, size: int = 5, root: bytes = LOST_ROOT, origin: str = ORIGIN) -> None:
    """As after a restore from a backup older than the tree of `size` leaves the site signed."""
    remember_a_tree_not_stored(settings, size, root, origin)


def continuelog(*args: str) -> str:
    out = StringIO()
    call_command("continuelog", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def lost(producer: Producer, settings: Any) -> list[dict[str, Any]]:
    """Two receipts kept; the site had signed a tree of 5 leaves before the restore."""
    kept = [producer.publish(idempotency_key=f"kept/{i}") for i in range(2)]
    restored(settings)
    return kept


def test_a_sound_log_is_not_continued_and_nothing_is_written(
    producer: Producer, settings: Any
) -> None:
    producer.publish()
    before = (SignedCheckpoint.objects.count(), state(settings))
    with pytest.raises(CommandError, match="nothing was lost"):
        continuelog()
    assert (SignedCheckpoint.objects.count(), state(settings)) == before
    assert not LogContinuation.objects.exists()


def test_continuelog_ends_the_log_and_the_site_signs_again_under_the_new_origin(
    lost: list[dict[str, Any]], producer: Producer, client: Client, settings: Any
) -> None:
    assert_problem(producer.post(example_body(idempotency_key="refused")), 503, "log-not-signed")
    out = continuelog()
    assert f"The log {ORIGIN} ended: it had signed 5 leaves" in out
    assert "3 leaves it had signed are lost" in out
    new = f"{ORIGIN}/2"
    assert f"continues as {new}" in out

    # The statement: signed by the active key under the ended log's name, saying what happened.
    (row,) = LogContinuation.objects.all()
    public = keyring.active_key().public
    body = note.verify_note(row.statement, [note.verifier_key(ORIGIN, public)])
    assert body is not None
    assert Continuation.parse(body) == Continuation(
        ended=ORIGIN, signed_size=5, signed_root=LOST_ROOT, kept_size=2,
        kept_root=log.head().root, continues_as=new,
    )  # fmt: skip
    # The kept tree is the new log's first checkpoint; this host remembers the new log.
    checkpoint = client.get("/api/log/checkpoint").content.decode()
    assert checkpoint.startswith(f"{new}\n2\n")
    assert note.verify_note(checkpoint, [note.verifier_key(new, public)]) is not None
    assert state(settings)["origin"] == new and state(settings)["tree_size"] == 2

    # Shown: on /healthz and in the keys document.
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    (ended,) = health["log"]["ended"]
    assert (ended["origin"], ended["signed_size"], ended["kept_size"], ended["lost"]) == (
        ORIGIN, 5, 2, 3,
    )  # fmt: skip
    keys = client.get("/.well-known/receipt-keys.json").json()
    assert keys["log"]["origin"] == new
    assert keys["log"]["ended"] == [ended]
    assert note.verify_note(ended["statement"], [ended["verifier_key"]]) == body

    # The kept receipts verify in the new log at their old indexes; a new one follows them.
    for i, receipt in enumerate(lost):
        answer = client.get(f"/api/receipt/{receipt['id']}/verify").json()
        assert answer["status"] == "valid", answer["checks"]
        assert (answer["log"]["origin"], answer["log"]["index"]) == (new, i)
    fresh = producer.publish(idempotency_key="after")
    assert fresh["log_index"] == 2
    assert state(settings)["tree_size"] == 3
    assert client.get(f"/api/receipt/{fresh['id']}/verify").json()["status"] == "valid"

    # Once is enough: nothing more was lost since.
    with pytest.raises(CommandError, match="nothing was lost"):
        continuelog()


def test_another_host_that_remembers_the_ended_log_follows_without_being_told(
    lost: list[dict[str, Any]], producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    continuelog("--origin", "receipts.example.org/receipts-2026")
    # Host B: its own LOG_STATE_FILE still names the ended log's tree of 5.
    settings.LOG_STATE_FILE = tmp_path / "host-b.json"
    restored(settings)
    assert client.get("/healthz").status_code == 200
    assert client.get(f"/api/receipt/{lost[0]['id']}/verify").json()["status"] == "valid"
    producer.publish(idempotency_key="on-host-b")
    assert state(settings) == {
        "origin": "receipts.example.org/receipts-2026", "tree_size": 3,
        "root_hash": b64(log.head().root),
    }  # fmt: skip


def test_a_host_that_signed_more_than_the_statement_says_still_refuses(
    lost: list[dict[str, Any]], producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    continuelog()
    settings.LOG_STATE_FILE = tmp_path / "host-c.json"
    restored(settings, size=9)  # a host that signed 9 leaves, which the statement says nothing of
    body = assert_problem(client.get("/healthz"), 503, "log-not-signed")
    assert "does not account for" in body["detail"]
    before = count_receipts()
    assert_problem(producer.post(example_body(idempotency_key="c")), 503, "log-not-signed")
    assert count_receipts() == before


def test_a_restore_older_than_the_continuation_is_refused_again(
    producer: Producer, client: Client, settings: Any
) -> None:
    producer.publish()
    # The site remembers a tree of a log the database does not continue: the database was
    # restored from a backup older than its `continuelog`.
    restored(settings, size=4, origin=f"{ORIGIN}/2")
    body = assert_problem(client.get("/healthz"), 503, "log-not-signed")
    assert "does not continue" in body["detail"]
    # Recovery is the same command: it ends the log this site remembers, whatever its name.
    out = continuelog()
    assert f"The log {ORIGIN}/2 ended: it had signed 4 leaves" in out
    assert client.get("/api/log/checkpoint").content.decode().startswith(f"{ORIGIN}/3\n1\n")
    assert client.get("/healthz").status_code == 200


def test_a_forged_continuation_counts_for_nothing(
    lost: list[dict[str, Any]], client: Client, caplog: Any
) -> None:
    # Someone with the database's owner role, without the site's key, writes an end of the log.
    key = keyring.active_key()
    forged = Continuation(
        ended=ORIGIN, signed_size=5, signed_root=LOST_ROOT, kept_size=2,
        kept_root=log.head().root, continues_as=f"{ORIGIN}/2",
    )  # fmt: skip
    other = Ed25519PrivateKey.generate()
    LogContinuation.objects.create(
        old_origin=ORIGIN, signed_size=5, signed_root=LOST_ROOT, tree_size=2,
        root_hash=log.head().root, new_origin=f"{ORIGIN}/2",
        statement=note.sign_note(forged.body(), ORIGIN, other), signing_key=key.row,
    )  # fmt: skip
    assert client.get("/healthz").status_code == 503
    keys = client.get("/.well-known/receipt-keys.json").json()
    assert (keys["log"]["origin"], keys["log"]["ended"]) == (ORIGIN, [])
    assert "does not verify" in caplog.text
    with pytest.raises(LogRollback):
        log.sign_head()  # nor does a write sign under the forged origin


def test_a_saved_checkpoint_is_checked_before_it_counts(
    producer: Producer, tmp_path: Path
) -> None:
    for i in range(3):
        producer.publish(idempotency_key=f"saved/{i}")
    saved = tmp_path / "monitor.checkpoint"
    saved.write_text(log.published().note.rstrip("\n"))  # a copy that lost its last newline
    # A monitor's copy of the current tree: read, verified, and nothing was lost.
    with pytest.raises(CommandError, match="nothing was lost"):
        continuelog("--checkpoint", str(saved))
    forged = tmp_path / "forged.checkpoint"
    forged.write_text(note.checkpoint_body(ORIGIN, 9, LOST_ROOT) + "\n\u2014 x Zm9vYmFy\n")
    with pytest.raises(CommandError, match="not a checkpoint signed by one of this site's keys"):
        continuelog("--checkpoint", str(forged))
    assert not LogContinuation.objects.exists()
    # (tests/live/test_backup_restore.py: a saved checkpoint larger than any remembered.)


def test_redis_remembers_the_new_log_in_place_of_the_ended_one(
    redis_url: str, producer: Producer, client: Client, settings: Any
) -> None:
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    settings.REDIS_URL = redis_url
    producer.publish(idempotency_key="r/0")
    logstate.write({"origin": ORIGIN, "tree_size": 6, "root_hash": b64(LOST_ROOT)})
    assert client.get("/healthz").status_code == 503
    out = continuelog()
    assert "it had signed 6 leaves" in out
    shared = logstate.read()
    assert shared is not None and shared["origin"] == f"{ORIGIN}/2"
    assert (shared["tree_size"], b64decode(shared["root_hash"])) == (1, log.head().root)
    producer.publish(idempotency_key="r/1")
    assert logstate.read() == state(settings)


def test_the_new_origin_must_be_new(lost: list[dict[str, Any]]) -> None:
    with pytest.raises(CommandError, match="was a log's origin before"):
        continuelog("--origin", ORIGIN)
    with pytest.raises(CommandError, match="not a log origin"):
        continuelog("--origin", "has space")
    assert not LogContinuation.objects.exists()


def test_the_default_origin_counts_up() -> None:
    assert log.next_origin("h/receipts") == "h/receipts/2"
    assert log.next_origin("h/receipts/2") == "h/receipts/3"
    assert log.next_origin("h/receipts/09") == "h/receipts/09/2"


def test_the_ended_logs_cosignatures_do_not_witness_the_new_log(
    lost: list[dict[str, Any]], client: Client, settings: Any
) -> None:
    from receiptsite.ledger import witnesses
    from tests.db.test_witnesses import cosign, one_of_two

    rules = one_of_two(settings)
    assert cosign(rules, "w1") == []  # the ended log's checkpoint of the kept tree, cosigned
    w1 = rules.witnesses["w1"]
    continuelog()
    new = f"{ORIGIN}/2"
    # The new log's checkpoint of the same tree is another body: not witnessed until cosigned,
    # and the submitter starts the new log afresh with that witness.
    assert_problem(client.get("/api/log/witnessed-checkpoint"), 404, "not-witnessed")
    assert client.get(f"/api/receipt/{lost[0]['id']}/verify").json()["log"]["witnessed"] is None
    assert (witnesses.has_cosigned(w1, 2, ORIGIN), witnesses.has_cosigned(w1, 2, new)) == (
        True, False,
    )  # fmt: skip
    assert (witnesses.cosigned_size(w1, ORIGIN), witnesses.cosigned_size(w1, new)) == (2, None)
    assert cosign(rules, "w1") == []
    served = client.get("/api/log/witnessed-checkpoint").content.decode()
    assert served.startswith(f"{new}\n2\n")


def test_checklog_follows_a_kept_checkpoint_of_the_ended_log_and_names_what_was_lost(
    producer: Producer, settings: Any, tmp_path: Path
) -> None:
    producer.publish(idempotency_key="k/0")
    early = tmp_path / "early.checkpoint"
    early.write_text(log.published().note)  # a monitor's copy, of 1 leaf
    producer.publish(idempotency_key="k/1")
    restored(settings, size=5)
    continuelog()
    out = StringIO()
    call_command("checklog", "--against", str(early), stdout=out)
    assert f"is of the log {ORIGIN}: the log {ORIGIN} ended at 2 leaves" in out.getvalue()
    assert "Consistent with the checkpoint of size 1" in out.getvalue()
    # A copy of a tree in what was lost: the statement says so, and the check fails.
    lost_copy = tmp_path / "lost.checkpoint"
    key = keyring.active_key()
    lost_copy.write_text(
        note.sign_note(note.checkpoint_body(ORIGIN, 4, LOST_ROOT), ORIGIN, key.private)
    )
    with pytest.raises(CommandError) as refused:
        call_command("checklog", "--against", str(lost_copy), stdout=StringIO())
    assert "which the site says it lost" in str(refused.value)
    bigger = tmp_path / "bigger.checkpoint"
    bigger.write_text(
        note.sign_note(note.checkpoint_body(ORIGIN, 6, LOST_ROOT), ORIGIN, key.private)
    )
    with pytest.raises(CommandError) as refused:
        call_command("checklog", "--against", str(bigger), stdout=StringIO())
    assert "more than the site says it signed" in str(refused.value)

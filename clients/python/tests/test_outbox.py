"""The durable outbox with no site: what is written before any network call, that nothing in
it is ever overwritten, the claims that let two processes flush one outbox at once, and the
hand-off text rendered from it. Against a real site (a process killed in the middle of a POST,
two processes flushing at once): test_outbox_live.py.

Where publication is involved the server is a real loopback server of the test's own; "down"
is a port where nothing listens, "stalled" one whose connections are accepted by the kernel
and never answered.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from client_helpers import ScriptedServer, created, document, problem
from receiptsite_client import Client, IdempotencyKeyReused
from receiptsite_client.document import FREE_TEXT, free_texts
from receiptsite_client.outbox import NewEntry, Outbox, Outcome, new_owner
from receiptsite_client.redaction import REDACTED

pytestmark = pytest.mark.unit


OPENAI_KEY = "sk-proj-4f9Qa81Lm2Zx7Rt0Yb3Kc6Wd"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def outbox_bytes(path: Path) -> bytes:
    """Every byte the outbox left on disk: the database, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


# --- what is written, and when ---------------------------------------------------------------


def test_the_redacted_evidence_is_on_disk_before_any_network_call(
    outbox_path: Path, refused_url: str, workflow_id: str
) -> None:
    client = Client(refused_url, "rk_key", outbox_path, deadline=0.5, metadata_allowlist={"ticket"})
    entry = client.record(
        document(
            workflow_id,
            input_summary=f"password={OPENAI_KEY}",
            result=f"aws {AWS_KEY}",
            attempt={"number": 2, "retry_reason": f"401 with {OPENAI_KEY}"},
            metadata={"ticket": "OPS-1", "internal_note": "kept out", "x": 1},
        )
    )
    assert entry.receipt_status == "pending"
    raw = outbox_bytes(outbox_path)
    assert OPENAI_KEY.encode() not in raw and AWS_KEY.encode() not in raw
    assert b"kept out" not in raw  # outside the metadata allowlist: never written
    assert entry.document["input_summary"] == f"password={REDACTED}"
    assert entry.document["result"] == f"aws {REDACTED}"
    assert entry.document["attempt"] == {"number": 2, "retry_reason": f"401 with {REDACTED}"}
    assert entry.document["metadata"] == {"ticket": "OPS-1"}
    assert entry.attempt == 2 and entry.step_id == "audit-site" and entry.phase == "end"
    assert entry.document["outcome"] == "succeeded"  # the work's status, apart from the receipt's
    events = client.outbox.events(entry.idempotency_key)
    assert [e["kind"] for e in events][:2] == ["written", "claim"]
    assert events[0]["at"] == entry.created_at
    assert {e["kind"] for e in events[2:-1]} == {"attempt"}
    assert events[-1]["kind"] == "release"


def test_a_stalled_site_holds_record_no_longer_than_its_deadline(
    outbox_path: Path, stalled_url: tuple[str, socket.socket], workflow_id: str
) -> None:
    url, _listener = stalled_url
    client = Client(url, "rk_key", outbox_path, deadline=1.0, request_timeout=30)
    started = time.monotonic()
    entry = client.record(document(workflow_id))
    assert time.monotonic() - started < 1.5
    assert entry.receipt_status == "pending"
    assert entry.error is not None and "timed out" in entry.error


def test_a_redirect_is_not_followed_and_is_failed_naming_where_it_points(
    outbox_path: Path, workflow_id: str
) -> None:
    moved = (301, {"Location": "https://receipts.example.org/api/receipts"}, b"")
    with ScriptedServer(then=lambda _seen: moved) as server:
        entry = Client(server.url, "rk_key", outbox_path).record(document(workflow_id))
        assert [(s.method, s.path) for s in server.seen] == [("POST", "/api/receipts")]
    assert entry.receipt_status == "failed"
    assert entry.error == (
        "301: the site redirected to https://receipts.example.org/api/receipts; give the "
        "address that serves the API as site_url"
    )


def test_an_identifier_that_looks_like_a_secret_is_neither_stored_nor_sent(
    outbox_path: Path, workflow_id: str
) -> None:
    with ScriptedServer(then=lambda seen: created(str(uuid.uuid4()))) as server:
        client = Client(server.url, "rk_key", outbox_path)
        entry = client.record(
            document(workflow_id, framework={"name": "tests", "run_id": OPENAI_KEY})
        )
        assert server.seen == []
    assert entry.receipt_status == "failed"
    assert entry.error is not None and "/framework/run_id looks like a secret" in entry.error
    assert OPENAI_KEY not in entry.error
    assert entry.document["framework"] == {"name": "tests", "run_id": REDACTED}
    assert OPENAI_KEY.encode() not in outbox_bytes(outbox_path)
    assert client.flush() == []


def test_a_document_without_a_key_gets_one_and_the_same_key_twice_is_one_entry(
    outbox_path: Path, refused_url: str, workflow_id: str
) -> None:
    client = Client(refused_url, "rk_key", outbox_path, deadline=0.1)
    doc = document(workflow_id)
    first = client.record(doc)
    assert "idempotency_key" not in doc  # the caller's document is left alone
    uuid.UUID(first.idempotency_key.removeprefix("rsc-"))
    keyed = document(workflow_id, idempotency_key=f"{workflow_id}/end/1")
    one = client.record(keyed)
    again = client.record(keyed)
    assert again.idempotency_key == one.idempotency_key == f"{workflow_id}/end/1"
    assert len(client.entries(workflow_id)) == 2
    with pytest.raises(IdempotencyKeyReused):
        client.record({**keyed, "result": "something else"})
    assert len(client.entries(workflow_id)) == 2


def test_entries_are_oldest_first_and_each_attempt_is_an_entry_of_its_own(
    outbox_path: Path, refused_url: str
) -> None:
    client = Client(refused_url, "rk_key", outbox_path, deadline=0.1)
    client.record(document("wf-a", step_id="fetch", attempt={"number": 1}, outcome="failed"))
    client.record(document("wf-b", step_id="other"))
    client.record(
        document(
            "wf-a",
            step_id="fetch",
            attempt={"number": 2, "prior_attempt_id": "wf-a/fetch/1", "retry_reason": "timeout"},
        )
    )
    client.record(document("wf-a", step_id="fetch", attempt={"number": 2}, phase="handoff"))

    every = client.entries()
    assert [(e.workflow_id, e.step_id, e.attempt, e.phase) for e in every] == [
        ("wf-a", "fetch", 1, "end"),
        ("wf-b", "other", 1, "end"),
        ("wf-a", "fetch", 2, "end"),
        ("wf-a", "fetch", 2, "handoff"),
    ]
    assert [e.created_at for e in every] == sorted(e.created_at for e in every)
    assert len({e.idempotency_key for e in every}) == 4
    assert [e.step_id for e in client.entries("wf-b")] == ["other"]
    assert [e.attempt for e in client.entries("wf-a")] == [1, 2, 2]
    assert client.entries("wf-none") == []
    assert {e.receipt_status for e in every} == {"pending"}
    assert [e.document["outcome"] for e in client.entries("wf-a")] == [
        "failed",
        "succeeded",
        "succeeded",
    ]


def test_nothing_in_the_outbox_is_ever_updated_or_deleted(
    outbox_path: Path, refused_url: str, workflow_id: str
) -> None:
    client = Client(refused_url, "rk_key", outbox_path, deadline=0.1)
    client.record(document(workflow_id))
    before = client.outbox.events()
    db = sqlite3.connect(outbox_path)
    try:
        for statement in (
            "UPDATE entries SET payload = '{}'",
            "DELETE FROM entries",
            "UPDATE events SET receipt_status = 'published'",
            "DELETE FROM events",
        ):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                db.execute(statement)
    finally:
        db.close()
    client.flush(deadline=0.1)
    after = client.outbox.events()
    assert after[: len(before)] == before  # history only ever grows
    assert len(after) > len(before)


def test_a_status_reached_is_not_undone_by_a_late_attempt(outbox_path: Path) -> None:
    outbox = Outbox(outbox_path)
    owner = new_owner()
    [(stored, held)] = outbox.write(
        [NewEntry("k-1", "wf", None, 1, "end", "{}")], owner=owner, lease_until=time.time() + 60
    )
    assert held
    outbox.record_attempt(stored.seq, Outcome("published", 201, False, "id-1", "u-1"))
    outbox.record_attempt(stored.seq, Outcome("pending", None, error="network: reset"))
    [entry] = outbox.entries()
    assert (entry.receipt_status, entry.receipt_id, entry.url, entry.error) == (
        "published",
        "id-1",
        "u-1",
        None,
    )
    assert entry.publish_attempts == 2


# --- claims -----------------------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_claim_holds_an_entry_until_released_expired_or_its_process_is_gone(
    outbox_path: Path,
) -> None:
    outbox = Outbox(outbox_path)
    later = time.time() + 600
    a, b, c, d = new_owner(), new_owner(), new_owner(), new_owner()
    [(first, _)] = outbox.write(
        [NewEntry("k-1", "wf", None, 1, "end", "{}")], owner=a, lease_until=later
    )
    assert outbox.claim(owner=b, lease_until=later, limit=10) == []
    outbox.release([first.seq], owner=a)
    assert outbox.claim(owner=b, lease_until=later, limit=10) == [first]

    # A lease that ran out frees the entry; the late release of its old owner frees nothing.
    [(second, _)] = outbox.write(
        [NewEntry("k-2", "wf", None, 1, "end", "{}")], owner=a, lease_until=time.time() - 1
    )
    assert outbox.claim(owner=c, lease_until=later, limit=10) == [second]
    outbox.release([second.seq], owner=a)
    assert outbox.claim(owner=d, lease_until=later, limit=10) == []  # b and c hold them

    # A claim whose process is gone (this host, no such pid) frees the entry at once; one of
    # another host only when its lease runs out.
    gone = f"{socket.gethostname()}:{dead_pid()}:cafe"
    [(third, _)] = outbox.write(
        [NewEntry("k-3", "wf", None, 1, "end", "{}")], owner=gone, lease_until=later
    )
    [(fourth, _)] = outbox.write(
        [NewEntry("k-4", "wf", None, 1, "end", "{}")],
        owner=f"elsewhere.example:{os.getpid()}:beef",
        lease_until=later,
    )
    assert outbox.claim(owner=d, lease_until=later, limit=10) == [third]
    assert fourth not in outbox.claim(owner=new_owner(), lease_until=later, limit=10)


# --- the hand-off text -----------------------------------------------------------------------


# The site's boundary statements, as the contract words them (the site appends one to every
# receipt's not_observed; the hand-off shows it for receipts not stored yet too).
END = (
    "This records what the agent runtime reported to this site. It does not show that any "
    "effect outside that report happened (an email received, a payment settled, a write "
    "accepted)."
)
HANDOFF = (
    "This records what was handed over and when. It does not show that the recipient "
    "reviewed or accepted it."
)
START = "A start record shows that the step was invoked. It cannot show its result."


def test_the_handoff_lists_each_receipt_with_its_status(
    outbox_path: Path, refused_url: str
) -> None:
    receipt_id = "f5245d22-e650-49ae-8876-f1a335f309bc"
    refusal = problem(
        422,
        "validation-error",
        detail="1 field(s) are not valid: /duration_ms",
        errors=[{"field": "/duration_ms", "message": "must be between 0 and 9007199254740991"}],
    )
    with ScriptedServer(script=[created(receipt_id), refusal]) as server:
        site = Client(server.url, "rk_key", outbox_path)
        site.record(document("wf-7f3a", attempt={"number": 2}))
        site.record(document("wf-7f3a", step_id="send", phase="handoff", duration_ms=-1))
    Client(refused_url, "rk_key", outbox_path, deadline=0.1).record(
        document(
            "wf-7f3a",
            phase="start",
            outcome=None,
            observed=None,
            not_observed=None,
            idempotency_key="wf-7f3a/notify/start/1",
            subject={"type": "task", "name": "notify"},
        )
    )
    Client(refused_url, "rk_key", outbox_path, deadline=0.1).record(document("wf-other"))

    assert Client(refused_url, "rk_key", outbox_path).handoff("wf-7f3a") == (
        "Work item:          tool website_audit\n"
        "Workflow / attempt: wf-7f3a / 2\n"
        "Observed status:    succeeded\n"
        f"Receipt:            http://testserver/run/{receipt_id}\n"
        "Recorded at:        2026-11-30T09:31:42.062797Z\n"
        "What it shows:      The audit tool returned 12 findings.\n"
        f"What it does not show: Whether the findings were sent to the client. {END}\n"
        "Follow-up:          none recorded\n"
        "\n"
        "Work item:          tool website_audit\n"
        "Workflow / attempt: wf-7f3a / 1\n"
        "Observed status:    succeeded\n"
        "Receipt:            failed: 422 validation-error: 1 field(s) are not valid: "
        "/duration_ms; /duration_ms: must be between 0 and 9007199254740991\n"
        "Recorded at:        \n"
        "What it shows:      The audit tool returned 12 findings.\n"
        f"What it does not show: Whether the findings were sent to the client. {HANDOFF}\n"
        "Follow-up:          none recorded\n"
        "\n"
        "Work item:          task notify\n"
        "Workflow / attempt: wf-7f3a / 1\n"
        "Observed status:    started\n"
        "Receipt:            pending: not yet published (idempotency key "
        "wf-7f3a/notify/start/1)\n"
        "Recorded at:        \n"
        "What it shows:      nothing stated by the producer\n"
        f"What it does not show: {START}\n"
        "Follow-up:          none recorded\n"
    )


# --- one source of truth, no framework ------------------------------------------------------


def test_the_free_text_fields_are_those_of_the_site_declaration() -> None:
    """The client redacts exactly the fields the site treats as free text: the site's own
    declaration (receiptsite.evidence.redaction, imported by this test only) finds the same."""
    from receiptsite.evidence.redaction import free_texts as site_free_texts

    doc = document(
        "wf",
        attempt={"number": 2, "retry_reason": "timeout"},
        metadata={"ticket": "OPS-1", "count": 3, "note": "n"},
    )
    theirs = sorted(pointer for pointer, *_ in site_free_texts(json.loads(json.dumps(doc))))
    ours = sorted(pointer for pointer, *_ in free_texts(json.loads(json.dumps(doc))))
    assert ours == theirs
    assert "/metadata/note" in ours and "/attempt/retry_reason" in ours
    assert {p for p, cut in FREE_TEXT.items() if cut} == {"/input_summary", "/result"}


def test_the_core_imports_no_framework_and_no_django() -> None:
    code = textwrap.dedent(
        """
        import sys
        import receiptsite_client, receiptsite_client.client, receiptsite_client.outbox
        import receiptsite_client.document, receiptsite_client.transport
        import receiptsite_client.redaction, receiptsite_client.handoff, receiptsite_client.cli
        banned = {"django", "receiptsite", "langchain_core", "crewai", "agents", "openai"}
        found = sorted({m.split(".")[0] for m in sys.modules} & banned)
        assert not found, found
        print("clean")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"

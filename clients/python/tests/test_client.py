"""The client against a real site (tests/livesite.py: gunicorn, its own database, HTTP only):
record, the site being down, flush, refusals, replays, batches; and retries honouring Retry-After,
through a small HTTP server of the test's own on loopback that answers 503/429 first and then
forwards to the live site (a real server in front of a real site; nothing of the client is
replaced)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from client_helpers import (
    LiveSite,
    ScriptedServer,
    document,
    problem,
    site_document,
    site_keys,
    site_receipts,
)
from receiptsite_client import Client, Entry
from receiptsite_client.redaction import REDACTED

pytestmark = pytest.mark.live

OPENAI_KEY = "sk-proj-4f9Qa81Lm2Zx7Rt0Yb3Kc6Wd"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVl"


def test_record_publishes_a_verifiable_receipt_with_the_secrets_redacted(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(live_site.url, live_site.api_key, outbox_path)
    entry = client.record(
        document(
            workflow_id,
            input_summary=f"called with api_key={OPENAI_KEY}",
            result=f"sent header Authorization: {BEARER} " + "x" * 5000,
            observed=[f"The token {OPENAI_KEY} was used."],
            metadata={"ticket": "OPS-118", "note": f"key {OPENAI_KEY}"},
        )
    )

    assert entry.receipt_status == "published"
    assert entry.error is None
    assert entry.receipt_id and entry.url == f"{live_site.url}/run/{entry.receipt_id}"
    assert entry.idempotency_key.startswith("rsc-")
    assert entry.publish_attempts == 1 and entry.replayed is False
    verification = live_site.get(f"/api/receipt/{entry.receipt_id}/verify").json()
    assert verification["status"] == "valid"
    assert verification["output_hash"] == entry.output_hash

    stored = site_document(live_site, entry.receipt_id)
    text = json.dumps(stored)
    assert OPENAI_KEY not in text and "eyJzdWIiOiIxIn0" not in text
    assert stored["input_summary"] == f"called with api_key={REDACTED}"
    assert stored["observed"] == [f"The token {REDACTED} was used."]
    assert stored["metadata"] == {"ticket": "OPS-118", "note": f"key {REDACTED}"}
    assert len(stored["result"]) == 4000 and stored["result"].endswith("chars]")
    assert stored["idempotency_key"] == entry.idempotency_key
    # What the site stored is what the outbox holds (the site adds its boundary statement):
    # the client redacted, the site had nothing left to remove.
    ours = dict(entry.document)
    assert stored["not_observed"][:1] == ours.pop("not_observed")
    assert {k: stored[k] for k in ours} == ours
    assert stored["redactions"] == []


def test_a_receipt_recorded_while_the_site_is_down_is_published_by_flush_once(
    own_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    calls: list[str] = []

    def tool(city: str) -> str:
        calls.append(city)
        return f"sunny in {city}"

    # Each record tries the site (no quiet spell), and is still held no longer than its deadline.
    client = Client(
        own_site.url, own_site.api_key, outbox_path, deadline=1.0, quiet_after_failure=0
    )
    own_site.stop()
    entries: list[Entry] = []
    for number, city in enumerate(["Paris", "Oslo"], start=1):
        started = time.monotonic()
        answer = tool(city)
        entries.append(
            client.record(
                document(
                    workflow_id,
                    step_id=f"weather-{city}",
                    result=answer,
                    attempt={"number": number},
                )
            )
        )
        assert time.monotonic() - started < 2.5  # the agent is not held past the deadline
    assert [e.receipt_status for e in entries] == ["pending", "pending"]
    assert all(e.error and e.error.startswith("network:") for e in entries)
    assert all(e.document["outcome"] == "succeeded" for e in entries)  # the work's status
    keys = sorted(e.idempotency_key for e in entries)

    own_site._serve()
    flushed = client.flush()

    assert sorted(e.idempotency_key for e in flushed) == keys
    assert [e.receipt_status for e in flushed] == ["published", "published"]
    assert [e.idempotency_key for e in client.entries(workflow_id)] == [
        e.idempotency_key for e in entries
    ]
    assert site_keys(own_site, workflow_id) == keys  # one receipt per key, no duplicate
    assert calls == ["Paris", "Oslo"]  # the tool ran once each; flush never called it
    assert client.flush() == []  # nothing left pending
    assert len(site_receipts(own_site, workflow_id)) == 2


def test_a_422_is_failed_with_the_site_errors_kept_and_is_not_retried(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(live_site.url, live_site.api_key, outbox_path)
    entry = client.record(document(workflow_id, phase="start", duration_ms=-1))

    assert entry.receipt_status == "failed"
    assert entry.receipt_id is None and entry.url is None
    assert entry.error is not None and entry.error.startswith("422 validation-error")
    assert "/outcome: must not be sent on a start record" in entry.error
    assert "/duration_ms" in entry.error
    assert entry.problem is not None
    assert {e["field"] for e in entry.problem["errors"]} == {"/outcome", "/duration_ms"}
    assert client.flush() == []
    assert client.entries(workflow_id)[0].publish_attempts == 1
    assert site_receipts(live_site, workflow_id) == []


def test_a_wrong_key_is_failed_at_once(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(live_site.url, "rk_000000000000_nope", outbox_path, deadline=5)
    started = time.monotonic()
    entry = client.record(document(workflow_id))
    assert time.monotonic() - started < 2
    assert entry.receipt_status == "failed"
    assert entry.error is not None and entry.error.startswith("401 unauthorized")
    assert entry.publish_attempts == 1


def test_a_replay_is_success_and_a_reused_key_is_failed_naming_its_receipt(
    live_site: LiveSite, tmp_path: Path, workflow_id: str
) -> None:
    doc = document(workflow_id, idempotency_key=f"{workflow_id}/audit/end/1")
    first = Client(live_site.url, live_site.api_key, tmp_path / "a.sqlite3").record(doc)
    again = Client(live_site.url, live_site.api_key, tmp_path / "b.sqlite3").record(doc)
    assert (first.receipt_status, first.replayed) == ("published", False)
    assert (again.receipt_status, again.replayed) == ("published", True)
    assert again.receipt_id == first.receipt_id

    other = Client(live_site.url, live_site.api_key, tmp_path / "c.sqlite3").record(
        {**doc, "result": "a different result"}
    )
    assert other.receipt_status == "failed"
    assert other.error is not None and "idempotency-key-reused" in other.error
    assert str(first.url) in other.error
    assert len(site_receipts(live_site, workflow_id)) == 1


def test_a_withdrawn_receipts_key_is_failed_at_once_and_never_sent_again(
    live_site: LiveSite, tmp_path: Path, workflow_id: str
) -> None:
    doc = document(workflow_id, idempotency_key=f"{workflow_id}/audit/end/1")
    first = Client(live_site.url, live_site.api_key, tmp_path / "a.sqlite3").record(doc)
    assert first.receipt_status == "published"
    path = f"/api/receipts/{first.receipt_id}/withdrawal"
    assert live_site.post(path, {"reason": "personal_data"}).status == 201

    client = Client(live_site.url, live_site.api_key, tmp_path / "b.sqlite3", deadline=10)
    started = time.monotonic()
    again = client.record(doc)
    assert time.monotonic() - started < 2
    assert (again.receipt_status, again.receipt_id, again.publish_attempts) == ("failed", None, 1)
    assert again.error is not None and again.error.startswith("410 withdrawn")
    assert str(first.url) in again.error
    assert again.problem is not None and again.problem["id"] == first.receipt_id
    assert client.flush() == []
    # In a batch, that item alone fails; the other is published.
    other = document(workflow_id, step_id="other")
    batch = Client(live_site.url, live_site.api_key, tmp_path / "c.sqlite3").record_batch(
        [doc, other]
    )
    assert [e.receipt_status for e in batch] == ["failed", "published"]
    assert batch[0].error is not None and batch[0].error.startswith("410 withdrawn")
    # The withdrawn receipt's columns are erased: the workflow's list shows the other alone.
    assert site_keys(live_site, workflow_id) == [batch[1].idempotency_key]


def test_record_batch_publishes_the_valid_items_and_fails_the_others(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(live_site.url, live_site.api_key, outbox_path)
    entries = client.record_batch(
        [
            document(workflow_id, step_id="one"),
            document(workflow_id, step_id="two", phase="start"),  # outcome on a start
            document(workflow_id, step_id="three", result=f"token {OPENAI_KEY}"),
        ]
    )
    assert [e.step_id for e in entries] == ["one", "two", "three"]
    assert [e.receipt_status for e in entries] == ["published", "failed", "published"]
    assert entries[1].error is not None and "/outcome" in entries[1].error
    assert site_keys(live_site, workflow_id) == sorted(
        [entries[0].idempotency_key, entries[2].idempotency_key]
    )
    assert site_document(live_site, str(entries[2].receipt_id))["result"] == f"token {REDACTED}"
    # The same batch again: the published ones are the outbox's own entries, untouched.
    assert client.record_batch([dict(entries[0].document)]) == [entries[0]]


def test_503_and_429_are_retried_honouring_retry_after(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    unavailable = problem(503, "database-unavailable")
    limited = problem(429, "rate-limited", detail="slow down")
    script = [
        (unavailable[0], {**unavailable[1], "Retry-After": "1"}, unavailable[2]),
        (limited[0], {**limited[1], "Retry-After": "1"}, limited[2]),
    ]
    with ScriptedServer(script=script, forward_to=live_site.url) as proxy:
        client = Client(proxy.url, live_site.api_key, outbox_path, deadline=10)
        started = time.monotonic()
        entry = client.record(document(workflow_id))
        elapsed = time.monotonic() - started

    assert entry.receipt_status == "published"
    assert elapsed >= 2.0  # two waits of Retry-After: 1
    assert [s.path for s in proxy.seen] == ["/api/receipts"] * 3
    assert len({s.body for s in proxy.seen}) == 1  # the same stored payload each time
    assert entry.publish_attempts == 3
    attempts = [e for e in client.outbox.events(entry.idempotency_key) if e["kind"] == "attempt"]
    assert [(a["http_status"], a["receipt_status"]) for a in attempts] == [
        (503, "pending"),
        (429, "pending"),
        (201, "published"),
    ]
    assert "Retry-After: 1 s" in attempts[1]["error"]
    assert site_keys(live_site, workflow_id) == [entry.idempotency_key]


def test_a_retry_after_beyond_the_deadline_leaves_the_entry_pending_at_once(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    status, headers, body = problem(429, "rate-limited")
    with ScriptedServer(
        then=lambda _seen: (status, {**headers, "Retry-After": "30"}, body)
    ) as busy:
        client = Client(busy.url, live_site.api_key, outbox_path, deadline=3)
        started = time.monotonic()
        entry = client.record(document(workflow_id))
        assert time.monotonic() - started < 1.5
        assert len(busy.seen) == 1
    assert entry.receipt_status == "pending"
    assert entry.error is not None and entry.error.startswith("429 rate-limited")
    # Later, the site itself takes it from the stored payload.
    flushed = Client(live_site.url, live_site.api_key, outbox_path).flush()
    assert [e.receipt_status for e in flushed] == ["published"]
    assert site_keys(live_site, workflow_id) == [entry.idempotency_key]


def test_5xx_without_retry_after_are_retried_with_backoff_within_the_deadline(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    bad_gateway = (502, {"Content-Type": "text/html"}, b"<h1>Bad Gateway</h1>")
    with ScriptedServer(script=[bad_gateway, bad_gateway], forward_to=live_site.url) as proxy:
        entry = Client(proxy.url, live_site.api_key, outbox_path, deadline=5).record(
            document(workflow_id)
        )
        assert len(proxy.seen) == 3
    assert entry.receipt_status == "published" and entry.publish_attempts == 3

    with ScriptedServer(then=lambda _seen: bad_gateway) as broken:
        started = time.monotonic()
        stuck = Client(broken.url, live_site.api_key, outbox_path, deadline=1.5).record(
            document(workflow_id, step_id="other")
        )
        assert time.monotonic() - started < 2.0
        assert 2 <= len(broken.seen) <= 6  # backed off, not hammered
    assert stuck.receipt_status == "pending"
    assert stuck.error == "502 (no problem document in the answer)"


def test_after_a_network_failure_record_stays_quiet_for_a_while_and_flush_still_tries(
    stalled_url: tuple[str, object], outbox_path: Path, workflow_id: str
) -> None:
    url, _listener = stalled_url
    client = Client(url, "rk_000000000000_x", outbox_path, deadline=1.0, request_timeout=1.0)
    started = time.monotonic()
    first = client.record(document(workflow_id, idempotency_key=f"{workflow_id}/1"))
    waited = time.monotonic() - started
    assert first.receipt_status == "pending" and waited >= 0.5  # it tried, and waited
    started = time.monotonic()
    rest = [client.record(document(workflow_id, idempotency_key=f"{workflow_id}/{n}"))
            for n in range(2, 7)]
    assert time.monotonic() - started < 0.5  # five more, none held by the stalled site
    assert {entry.receipt_status for entry in rest} == {"pending"}
    assert all(entry.publish_attempts == 0 for entry in rest)
    # flush is asked for explicitly: it tries even while record is quiet.
    started = time.monotonic()
    client.flush(deadline=1.0)
    assert time.monotonic() - started >= 0.5
    quiet_off = Client(url, "rk_000000000000_x", outbox_path, deadline=1.0, request_timeout=1.0,
                       quiet_after_failure=0)
    started = time.monotonic()
    quiet_off.record(document(workflow_id, idempotency_key=f"{workflow_id}/7"))
    quiet_off.record(document(workflow_id, idempotency_key=f"{workflow_id}/8"))
    assert time.monotonic() - started >= 1.0  # without the quiet spell each one waits

"""`receipt-outbox`, the installed command, run as a user would against a live site
(tests/livesite.py): flush while the site is down and after it is back, list, handoff."""

from __future__ import annotations

from pathlib import Path

import pytest
from client_helpers import LiveSite, document, site_keys
from client_helpers import run_outbox as run
from receiptsite_client import Client

pytestmark = pytest.mark.live


def test_flush_exits_1_while_receipts_stay_pending_and_0_once_published(
    own_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(own_site.url, own_site.api_key, outbox_path, deadline=0.5)
    published = client.record(document(workflow_id, step_id="first"))
    own_site.stop()
    pending = [client.record(document(workflow_id, step_id=s)) for s in ("second", "third")]
    assert [e.receipt_status for e in pending] == ["pending", "pending"]

    flush = ("flush", "--outbox", str(outbox_path), "--site", own_site.url, "--deadline", "1")
    down = run(*flush, key=own_site.api_key)
    assert down.returncode == 1, down
    lines = down.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["pending", e.idempotency_key] for e in pending]
    assert all("network:" in line for line in lines)
    assert "2 entries still pending" in down.stderr

    own_site._serve()
    up = run(*flush, key=own_site.api_key)
    assert up.returncode == 0, up
    entries = client.entries(workflow_id)
    assert up.stdout.splitlines() == [f"published {e.idempotency_key} {e.url}" for e in entries[1:]]
    assert site_keys(own_site, workflow_id) == sorted(e.idempotency_key for e in entries)
    assert entries[0] == published

    again = run(*flush, key=own_site.api_key)
    assert (again.returncode, again.stdout) == (0, "")

    listing = run("list", "--outbox", str(outbox_path), "--workflow", workflow_id)
    assert listing.returncode == 0
    assert listing.stdout.splitlines() == [
        f"published {e.idempotency_key} {e.url}" for e in entries
    ]
    handoff = run("handoff", "--outbox", str(outbox_path), "--workflow", workflow_id)
    assert handoff.returncode == 0
    assert handoff.stdout == client.handoff(workflow_id)
    assert handoff.stdout.count("Receipt:            http") == 3

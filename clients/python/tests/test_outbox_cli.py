"""`receipt-outbox`, the installed command, run as a user would against a live site
(tests.live): flush while the site is down and after it is back, list, handoff, and the
exits when it cannot start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from client_helpers import document, site_keys
from receiptsite_client import Client

from tests.live import LiveSite

COMMAND = shutil.which("receipt-outbox", path=str(Path(sys.executable).parent))


def run(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    assert COMMAND, "receipt-outbox is not installed beside this python"
    env = {k: v for k, v in os.environ.items() if k != "RECEIPTSITE_API_KEY"}
    if key is not None:
        env["RECEIPTSITE_API_KEY"] = key
    return subprocess.run([COMMAND, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.live
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


def test_flush_exits_2_without_a_key_or_an_outbox(tmp_path: Path, refused_url: str) -> None:
    outbox = tmp_path / "receipts.sqlite3"
    missing = run("flush", "--outbox", str(outbox), "--site", refused_url, key="rk_x")
    assert missing.returncode == 2 and "no outbox at" in missing.stderr
    assert not outbox.exists()  # a typo does not leave an empty outbox behind

    Client(refused_url, "rk_x", outbox, deadline=0.1).record(document("wf"))
    no_key = run("flush", "--outbox", str(outbox), "--site", refused_url)
    assert no_key.returncode == 2 and "RECEIPTSITE_API_KEY" in no_key.stderr
    bad_site = run("flush", "--outbox", str(outbox), "--site", "ftp://x", key="rk_x")
    assert bad_site.returncode == 2 and "http(s) URL" in bad_site.stderr
    down = run(
        "flush", "--outbox", str(outbox), "--site", refused_url, "--deadline", "0.2", key="rk_x"
    )
    assert down.returncode == 1
    assert down.stdout.startswith("pending ")

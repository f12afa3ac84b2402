"""The durable outbox against a real site (tests/livesite.py): a process killed in the middle
of a POST is flushed after the restart, and two processes flushing one outbox at once publish
each receipt once. The rest of the outbox's tests, with no site, are in test_outbox.py."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from client_helpers import LiveSite, document, site_keys
from receiptsite_client import Client
from receiptsite_client.outbox import Outbox

pytestmark = pytest.mark.live


# --- a process killed in the middle; two processes at once ----------------------------------

CHILD_RECORD = textwrap.dedent(
    """
    import sys
    from receiptsite_client import Client

    url, outbox, workflow_id, tool_log = sys.argv[1:]
    with open(tool_log, "a") as log:  # the tool: runs once, before its receipt is recorded
        log.write("ran\\n")
    client = Client(url, "rk_000000000000_child", outbox, deadline=300, request_timeout=300)
    client.record({
        "workflow_id": workflow_id, "phase": "end", "outcome": "succeeded",
        "subject": {"type": "tool", "name": "charge_card"}, "result": "charged 40 EUR",
    })
    print("record returned", flush=True)
    """
)


def test_a_process_killed_between_the_outbox_write_and_the_answer_is_flushed_after_restart(
    live_site: LiveSite,
    outbox_path: Path,
    tmp_path: Path,
    stalled_url: tuple[str, socket.socket],
    workflow_id: str,
) -> None:
    url, listener = stalled_url
    tool_log = tmp_path / "tool.log"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_RECORD, url, str(outbox_path), workflow_id, str(tool_log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # The child's POST arrives at an address that never answers: it is in flight.
        listener.settimeout(30)
        connection, _ = listener.accept()
        connection.settimeout(10)
        request = b""
        while b"charged 40 EUR" not in request:
            chunk = connection.recv(65536)
            assert chunk, "the child closed the connection"
            request += chunk
        assert request.startswith(b"POST /api/receipts HTTP/1.1")
        [entry] = Outbox(outbox_path).entries(workflow_id)
        assert (entry.receipt_status, entry.publish_attempts) == ("pending", 0)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        connection.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert child.stdout is not None and b"record returned" not in child.stdout.read()

    # After the restart: the claim of the dead process holds nothing back.
    client = Client(live_site.url, live_site.api_key, outbox_path)
    [flushed] = client.flush(deadline=20)
    assert flushed.idempotency_key == entry.idempotency_key
    assert flushed.receipt_status == "published"
    assert site_keys(live_site, workflow_id) == [entry.idempotency_key]
    kinds = [e["kind"] for e in client.outbox.events(entry.idempotency_key)]
    assert kinds == ["written", "claim", "claim", "attempt", "release"]
    assert tool_log.read_text() == "ran\n"
    assert client.flush() == []


# Ready once imported and connected to its outbox; then it waits for "go" on stdin, so that
# both children flush at the same moment however long each took to start.
CHILD_FLUSH = textwrap.dedent(
    """
    import json, sys
    from receiptsite_client import Client

    url, key, outbox = sys.argv[1:]
    client = Client(url, key, outbox)
    print("ready", flush=True)
    sys.stdin.readline()
    entries = client.flush(deadline=60, chunk=3)
    print(json.dumps([[e.idempotency_key, e.receipt_status] for e in entries]))
    """
)


def test_two_processes_flushing_one_outbox_at_once_publish_each_receipt_once(
    live_site: LiveSite, outbox_path: Path, refused_url: str, workflow_id: str
) -> None:
    count = 30
    down = Client(refused_url, live_site.api_key, outbox_path, deadline=0.1)
    pending = down.record_batch([document(workflow_id, step_id=f"step-{n}") for n in range(count)])
    assert {e.receipt_status for e in pending} == {"pending"}
    keys = sorted(e.idempotency_key for e in pending)
    attempts_before = len([e for e in down.outbox.events() if e["kind"] == "attempt"])

    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD_FLUSH,
                live_site.url,
                live_site.api_key,
                str(outbox_path),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for child in children:
        assert child.stdout is not None and child.stdin is not None
        readable, _, _ = select.select([child.stdout], [], [], 120)
        assert readable, "a child did not get ready"
        assert child.stdout.readline() == b"ready\n", child.stderr
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err.decode()
        outputs.append(json.loads(out))

    flushed = [key for output in outputs for key, status in output if status == "published"]
    assert sorted(flushed) == keys  # every key, and none by both processes
    assert site_keys(live_site, workflow_id) == keys  # one receipt per key on the site
    attempts = [e for e in down.outbox.events() if e["kind"] == "attempt"][attempts_before:]
    assert len(attempts) == count  # each POSTed once
    assert {(a["receipt_status"], a["replayed"]) for a in attempts} == {("published", 0)}
    assert {e.receipt_status for e in down.entries(workflow_id)} == {"published"}

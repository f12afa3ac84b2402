"""A gunicorn worker killed with SIGKILL in the middle of ingest, several times, under load.

Client threads keep posting receipts with idempotency keys; a worker (a child of the gunicorn
master) is killed while requests are in flight, then another, and another. The master starts
replacements. A client whose connection broke retries with the same key until it gets a
201. Afterwards every key names exactly one stored receipt, which verifies; there is no
partial receipt and no gap in the log (`manage.py checklog` recomputes the whole tree).

Runs on both databases: SQLite (WAL) and PostgreSQL (a database of the live site's own).
"""

from __future__ import annotations

import http.client
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import example_body
from tests.livesite import LiveSite, Response

pytestmark = pytest.mark.live

WORKERS = 3
CLIENTS = 8  # threads posting at once: more than the workers, so every worker is busy
KILLS = 4
RETRY_FOR = 60.0  # seconds a client keeps retrying one key (a correctness bound)


def workers_of(master: int) -> list[int]:
    """The pids of the master's children (its workers), from /proc."""
    children = Path(f"/proc/{master}/task/{master}/children")
    if children.exists():
        return [int(pid) for pid in children.read_text().split()]
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=WORKERS) as live:
        yield live


def test_a_worker_killed_mid_ingest_leaves_no_partial_receipt_and_no_gap(site: LiveSite) -> None:
    assert site._process is not None
    master = site._process.pid
    run = secrets.token_hex(4)
    stop = threading.Event()
    lock = threading.Lock()
    answered: dict[str, Response] = {}  # key -> the final 201
    broken: dict[str, int] = {}  # key -> connections that broke before an answer
    bad: list[object] = []  # any answer that is neither 201 nor a broken connection

    def client(number: int) -> None:
        sent = 0
        while not stop.is_set():
            key = f"kill/{run}/{number}/{sent}"
            body = example_body(
                workflow_id=f"kill-{run}", step_id=f"{number}-{sent}", idempotency_key=key
            )
            sent += 1
            deadline = time.monotonic() + RETRY_FOR
            while True:  # the producer's retry: the same request, the same key
                try:
                    answer = site.post("/api/receipts", body, timeout=30)
                except (OSError, http.client.HTTPException) as error:
                    with lock:
                        broken[key] = broken.get(key, 0) + 1
                    if time.monotonic() > deadline:
                        bad.append((key, repr(error)))
                        return
                    time.sleep(0.05)
                    continue
                if answer.status == 201:
                    with lock:
                        answered[key] = answer
                    break
                bad.append((key, answer))
                return

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        futures = [pool.submit(client, n) for n in range(CLIENTS)]
        killed: list[int] = []
        def answers_grow_by(count: int) -> None:
            """Wait until the load has had `count` more answers (it is running, and reaching
            the workers there are now)."""
            with lock:
                target = len(answered) + count
            deadline = time.monotonic() + 30
            while True:
                with lock:
                    if len(answered) >= target or bad:
                        return
                assert time.monotonic() < deadline, ("the load got no answers", site.logs())
                time.sleep(0.02)

        try:
            answers_grow_by(2 * CLIENTS)  # every client under way
            for _ in range(KILLS):
                pids = workers_of(master)
                assert pids, "gunicorn has no workers"
                victim = pids[len(killed) % len(pids)]
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
                # Let the master replace it and the load reach the new worker.
                deadline = time.monotonic() + 20
                while victim in workers_of(master) or len(workers_of(master)) < WORKERS:
                    assert time.monotonic() < deadline, ("no replacement worker", site.logs())
                    time.sleep(0.05)
                answers_grow_by(2 * CLIENTS)  # the load reaches the new worker
        finally:
            stop.set()
            for future in futures:
                future.result(timeout=RETRY_FOR + 30)
    assert not bad, (bad[:5], site.logs()[-4000:])
    assert broken, (
        "no request was cut by a kill: the test did not exercise the fault",
        len(answered),
    )

    # Every key names one stored receipt; a retried key's receipt is the one stored first
    # (replayed) or the one stored by the retry, never two.
    listed: list[dict[str, object]] = []
    cursor = ""
    while True:
        page = site.get(f"/api/receipts?workflow_id=kill-{run}&limit=100{cursor}",
                        key=site.api_key)  # fmt: skip
        assert page.status == 200, page
        data = page.json()
        listed += data["receipts"]
        if not data.get("next_cursor"):
            break
        cursor = f"&cursor={quote(data['next_cursor'])}"
    ids = {key: answer.json()["id"] for key, answer in answered.items()}
    assert sorted(str(r["id"]) for r in listed) == sorted(ids.values())
    assert len(set(ids.values())) == len(ids)

    # The log has no gap: dense indexes, a checkpoint over all of them, the whole tree
    # recomputed by checklog.
    indexes = sorted(answer.json()["log_index"] for answer in answered.values())
    size = int(site.get("/api/log/checkpoint").text.split("\n")[1])
    assert indexes == list(range(size)), (indexes, size)
    for key in list(broken)[:20]:  # the retried ones, where a partial receipt would show
        verdict = site.get(f"/api/receipt/{ids[key]}/verify")
        assert verdict.status == 200 and verdict.json()["status"] == "valid", verdict
        assert verdict.json()["log"]["index"] == answered[key].json()["log_index"]
    assert "OK:" in site.manage("checklog")
    # And a retry now is a replay of the stored receipt.
    key, answer = next(iter(answered.items()))
    body = example_body(
        workflow_id=f"kill-{run}", step_id=key.split("/", 2)[2].replace("/", "-"),
        idempotency_key=key,
    )  # fmt: skip
    again = site.post("/api/receipts", body)
    assert again.status == 201 and again.headers.get("Idempotent-Replayed") == "true", again
    assert again.json()["id"] == answer.json()["id"]
    print(f"{len(answered)} receipts, {len(broken)} keys retried after {len(killed)} kills")

"""Group commit against a real gunicorn with threads (gthread: one worker, four threads): posts
that wait for the log's append lock at once are stored in one transaction under one signed
checkpoint, and each is still the request it was: answered 201 once stored, with its own audit
entry (its own request id, its own receipt) written in that transaction.

To make the posts wait together, the test holds the append lock itself, from a session of its
own on the site's database (PostgreSQL: the advisory lock log.lock_for_append takes; SQLite: the
write lock, BEGIN IMMEDIATE), while they arrive, and lets go after a pause.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from receiptsite.ledger.log import APPEND_LOCK
from tests.conftest import example_body
from tests.livesite import LiveSite, Response, is_postgres

pytestmark = pytest.mark.live

POSTS = 4  # the worker's threads


@contextlib.contextmanager
def append_lock_held(site: LiveSite) -> Iterator[None]:
    """Hold the site's append lock until the block ends."""
    if is_postgres(site.database_url):
        import psycopg

        with psycopg.connect(site.database_url) as holder:
            holder.execute("SELECT pg_advisory_xact_lock(%s)", [APPEND_LOCK])
            yield
            holder.rollback()
        return
    with contextlib.closing(sqlite3.connect(database(site), isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("ROLLBACK")


def database(site: LiveSite) -> str:
    return site.database_url.removeprefix("sqlite:///")


def signed_checkpoints(site: LiveSite) -> int:
    """How many signed checkpoints the site's database holds."""
    query = "SELECT count(*) FROM receipts_signedcheckpoint"
    if is_postgres(site.database_url):
        import psycopg

        with psycopg.connect(site.database_url) as reader:
            return int(reader.execute(query).fetchone()[0])  # type: ignore[index]
    with contextlib.closing(sqlite3.connect(database(site))) as reader:
        return int(reader.execute(query).fetchone()[0])


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=1, env={"GUNICORN_CMD_ARGS": f"-k gthread --threads {POSTS}"}) as site:
        assert site.post("/api/receipts", example_body()).status == 201  # the key recorded
        yield site


def test_posts_waiting_together_share_one_checkpoint_and_keep_their_own_audit_entries(
    site: LiveSite,
) -> None:
    request_ids = [uuid.uuid4().hex for _ in range(POSTS)]
    signed = signed_checkpoints(site)
    with ThreadPoolExecutor(POSTS) as pool:
        with append_lock_held(site):
            futures = [
                pool.submit(site.post, "/api/receipts", example_body(idempotency_key=rid),
                            headers={"X-Request-ID": rid}, timeout=60)
                for rid in request_ids
            ]  # fmt: skip
            time.sleep(1.5)  # every post has arrived and waits (for the lock, or its group)
            assert not any(future.done() for future in futures), "answered before storing"
        answers: list[Response] = [future.result(timeout=60) for future in futures]
    assert [a.status for a in answers] == [201] * POSTS, [a.text for a in answers]
    # One checkpoint signed for the four, where four posts alone sign four.
    assert signed_checkpoints(site) == signed + 1
    entries = site.get("/api/audit-logs", key=site.api_key).json()["entries"]
    by_request = {entry["request_id"]: entry for entry in entries}
    for rid, answer in zip(request_ids, answers, strict=True):
        assert answer.headers["X-Request-ID"] == rid
        entry = by_request[rid]
        assert (entry["status"], entry["receipt_ids"]) == (201, [answer.json()["id"]]), entry

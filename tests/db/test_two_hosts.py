"""Several hosts: the largest signed tree remembered in Redis, where every host sees it, and
two gunicorn masters, each on its own port with its own LOG_STATE_FILE, in
front of one PostgreSQL database and one Redis (a redis-server of this module's own, on a Unix
socket). They keep every promise one host keeps: one receipt per idempotency key, one log,
the same checkpoint, rate limits counted once across both, and a database restored from an old
backup refused by both hosts, even by the one that did not sign the lost trees.

The two-master tests run when the suite runs on PostgreSQL (DATABASE_URL=postgres://...):
hosts share a database server, which an SQLite file is not. The tests of the shared remembered
tree itself run on both databases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from receiptsite.integrity.encoding import b64
from receiptsite.ledger import log, logstate
from tests.conftest import Producer, assert_problem, count_receipts, example_body

pytestmark = pytest.mark.db


@pytest.fixture
def shared_state(redis_url: str, settings: Any) -> str:
    """This process as one host of several: REDIS_URL set, Redis empty."""
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    settings.REDIS_URL = redis_url
    return redis_url


def _remembered_in_redis(url: str) -> dict[str, Any] | None:
    import redis

    raw = redis.Redis.from_url(url).hget(logstate.key(), "state")
    return None if raw is None else dict(json.loads(raw))


def test_every_tree_stored_is_remembered_in_redis_too(
    shared_state: str, producer: Producer, settings: Any
) -> None:
    for i in range(3):
        producer.publish(idempotency_key=f"redis-state/{i}")
    in_file = json.loads(Path(settings.LOG_STATE_FILE).read_text())
    assert _remembered_in_redis(shared_state) == in_file
    assert in_file["tree_size"] == log.head().size == 3
    # A smaller tree never replaces a larger one (another host, late).
    logstate.write({**in_file, "tree_size": 2})
    assert _remembered_in_redis(shared_state) == in_file


def test_a_tree_another_host_signed_makes_this_host_refuse_a_log_that_lacks_it(
    shared_state: str, producer: Producer, client: Client, settings: Any, caplog: Any
) -> None:
    producer.publish(idempotency_key="redis-state/kept")
    mine = json.loads(Path(settings.LOG_STATE_FILE).read_text())
    # Another host signed a larger tree, which this database (restored) does not hold.
    other = {"origin": mine["origin"], "tree_size": 7, "root_hash": b64(b"\x07" * 32)}
    logstate.write(other)
    before = count_receipts()
    body = assert_problem(producer.post(example_body(idempotency_key="redis-state/x")), 503,
                          "log-not-signed")  # fmt: skip
    assert "a tree of 7 leaves was signed before" in body["detail"]
    assert count_receipts() == before
    assert client.get("/healthz").status_code == 503
    assert client.get("/api/log/checkpoint").status_code == 503
    assert "refusing to sign" in caplog.text
    # This host's own file alone would have let it sign: Redis is what refused.
    settings.REDIS_URL = None
    assert producer.post(example_body(idempotency_key="redis-state/x")).status_code == 201


def test_the_same_size_with_another_root_in_redis_is_refused(
    shared_state: str, producer: Producer, client: Client
) -> None:
    answer = producer.publish(idempotency_key="redis-state/one")
    remembered = _remembered_in_redis(shared_state)
    assert remembered is not None and remembered["tree_size"] == 1
    forked = {**remembered, "root_hash": b64(b"\x01" * 32)}  # a tree of 1 from another log
    import redis

    redis.Redis.from_url(shared_state).hset(logstate.key(), "state", json.dumps(forked))
    assert client.get("/healthz").status_code == 503
    verdict = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert verdict["status"] == "invalid", verdict


def test_a_redis_that_does_not_answer_leaves_the_file_to_guard_and_says_so(
    producer: Producer, settings: Any, tmp_path: Path, caplog: Any
) -> None:
    settings.REDIS_URL = f"unix://{tmp_path / 'nobody.sock'}"
    settings.DATABASE_TIMEOUT = 1
    producer.publish(idempotency_key="redis-state/down")
    assert json.loads(Path(settings.LOG_STATE_FILE).read_text())["tree_size"] == 1
    assert "cannot remember the signed tree in Redis" in caplog.text
    assert "the tree remembered in Redis is not checked" in caplog.text




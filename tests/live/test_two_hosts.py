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
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from tests.conftest import example_body
from tests.livesite import LiveSite, Response, free_port, is_postgres, suite_database_url

pytestmark = pytest.mark.live

# The live tests: two hosts need a database server they share, which an SQLite file is not.
on_postgres = pytest.mark.skipif(
    not is_postgres(suite_database_url()),
    reason="several hosts share one PostgreSQL database; this runs when the suite runs on "
    "PostgreSQL (DATABASE_URL=postgres://...)",
)

WORKERS = 2  # per host
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _pg_tool(name: str) -> str:
    found = PG_BIN / name
    if found.exists():
        return str(found)
    other = shutil.which(name)
    if other is None:
        pytest.skip(f"{name} is not installed")
    return other


@dataclass
class SecondHost(LiveSite):
    """Another gunicorn master for the database of `first`: the same configuration (SITE_URL,
    signing key, secret key, REDIS_URL), its own port and its own LOG_STATE_FILE. It migrates
    nothing (migrations run once) and drops nothing: the database is the first host's."""

    first: LiveSite | None = None

    def start(self) -> None:
        assert self.first is not None
        self.tmp = Path(tempfile.mkdtemp(prefix="receiptsite-host-b-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = self.first.database_url
        self.api_key = self.first.api_key
        self.base_env = {
            **self.first.base_env,
            "LOG_STATE_FILE": str(self.tmp / "log-state.json"),
            "VAR_DIR": str(self.tmp / "var"),
            **self.env,
        }
        self._serve()


@pytest.fixture(scope="module")
def hosts(redis_url: str) -> Iterator[tuple[LiveSite, LiveSite]]:
    env = {"REDIS_URL": redis_url}
    with LiveSite(workers=WORKERS, env=env) as a, SecondHost(workers=WORKERS, first=a) as b:
        yield a, b


def all_at_once[T](calls: list[Callable[[], T]]) -> list[T]:
    barrier = threading.Barrier(len(calls), timeout=30)

    def run(call: Callable[[], T]) -> T:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        return [future.result(timeout=120) for future in futures]


def checkpoint_size(site: LiveSite) -> int:
    answer = site.get("/api/log/checkpoint")
    assert answer.status == 200, (answer, site.logs())
    return int(answer.text.split("\n")[1])


def state_file(site: LiveSite) -> dict[str, Any]:
    return dict(json.loads((site.tmp / "log-state.json").read_text()))


@pytest.mark.live
@on_postgres
def test_one_receipt_per_key_and_one_log_across_both_hosts(
    hosts: tuple[LiveSite, LiveSite],
) -> None:
    a, b = hosts
    run = secrets.token_hex(4)
    keys, senders = 12, 6  # each key sent 6 times, 3 to each host, all at once
    bodies = [
        example_body(
            workflow_id=f"hosts-{run}",
            step_id=f"step-{k}",
            idempotency_key=f"hosts/{run}/{k}/end/1",
            result=f"result {k}",
        )
        for k in range(keys)
    ]
    calls: list[Callable[[], Response]] = [
        partial(site.post, "/api/receipts", body)
        for body in bodies
        for site in [a, b] * (senders // 2)
    ]
    answers: list[Response] = all_at_once(calls)
    assert [answer.status for answer in answers] == [201] * len(calls), [
        answer for answer in answers if answer.status != 201
    ]
    ids: dict[str, set[str]] = {}
    for body, start in zip(bodies, range(0, len(calls), senders), strict=True):
        group = answers[start : start + senders]
        ids[str(body["idempotency_key"])] = {answer.json()["id"] for answer in group}
        fresh = [answer for answer in group if answer.headers.get("Idempotent-Replayed") is None]
        assert len(fresh) == 1, ("exactly one request stores each key", group)
    assert all(len(found) == 1 for found in ids.values()), ids

    # One log: both hosts list the same receipts, with dense indexes, and serve one checkpoint.
    listed = {}
    for site in (a, b):
        page = site.get(f"/api/receipts?workflow_id=hosts-{run}&limit=100", key=site.api_key)
        assert page.status == 200, page
        listed[site.port] = sorted(r["id"] for r in page.json()["receipts"])
    assert listed[a.port] == listed[b.port] == sorted(i for (i,) in ids.values())
    size = checkpoint_size(a)
    assert a.get("/api/log/checkpoint").body == b.get("/api/log/checkpoint").body
    indexes = []
    for (receipt_id,) in ids.values():
        for site in (a, b):
            verdict = site.get(f"/api/receipt/{receipt_id}/verify")
            assert verdict.status == 200, verdict
            assert verdict.json()["status"] == "valid", verdict.json()
        indexes.append(verdict.json()["log"]["index"])
    assert len(set(indexes)) == keys and max(indexes) < size
    for site in (a, b):
        assert "OK:" in site.manage("checklog")
    # Each host remembered what it signed; Redis holds the largest, which is the log's.
    import redis

    shared = redis.Redis.from_url(a.base_env["REDIS_URL"]).hgetall(
        f"receiptsite:log-state:127.0.0.1:{a.port}/receipts"
    )
    assert int(shared[b"tree_size"]) == size, shared
    assert max(state_file(a)["tree_size"], state_file(b)["tree_size"]) == size


def _restore(site: LiveSite, dump: Path) -> None:
    """Replace the site's database by the backup in `dump`, as an operator restoring an old
    backup would: drop it (its connections cut), create it again, pg_restore."""
    parts = urlsplit(site.database_url)
    name = unquote(parts.path.lstrip("/"))
    server = site.database_url.replace(parts.path, "/postgres")
    import psycopg

    with psycopg.connect(server, autocommit=True, connect_timeout=10) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [_pg_tool("pg_restore"), "--no-owner", "-d", site.database_url, str(dump)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


@pytest.mark.live
@on_postgres
def test_a_restored_old_backup_is_refused_by_both_hosts_even_the_one_that_did_not_sign(
    hosts: tuple[LiveSite, LiveSite], tmp_path: Path
) -> None:
    # Last in this module: after it, the hosts refuse their (rolled-back) log for good.
    a, b = hosts
    run = secrets.token_hex(4)

    def body(name: str) -> dict[str, Any]:
        return example_body(
            workflow_id=f"restore-{run}", step_id=name, idempotency_key=f"restore/{run}/{name}"
        )

    kept = b.post("/api/receipts", body("kept"))
    assert kept.status == 201, (kept, b.logs())
    backup_size = checkpoint_size(b)
    assert state_file(b)["tree_size"] == backup_size
    dump = tmp_path / "backup.dump"
    subprocess.run(
        [_pg_tool("pg_dump"), "-Fc", "-f", str(dump), a.database_url],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    for i in range(3):  # trees only host A signs
        answer = a.post("/api/receipts", body(f"lost-{i}"))
        assert answer.status == 201, (answer, a.logs())
    assert state_file(a)["tree_size"] == backup_size + 3
    assert state_file(b)["tree_size"] == backup_size  # B's own file knows nothing of them

    _restore(a, dump)

    for site in (b, a):  # B first: its own LOG_STATE_FILE alone would let it sign
        answer = site.post("/api/receipts", body(f"after-{site.port}"))
        assert answer.status == 503, (answer, site.logs())
        assert answer.content_type == "application/problem+json"
        assert answer.json()["type"].endswith("/problems/log-not-signed"), answer.json()
        health = site.get("/healthz")
        assert health.status == 503, health
        assert site.get("/api/log/checkpoint").status == 503
        # Reads keep working: the receipt kept by the backup is still served.
        assert site.get(f"/run/{kept.json()['id']}").status == 200
        assert site.get(f"/api/receipts/{kept.json()['id']}", key=site.api_key).status == 200
        verdict = site.get(f"/api/receipt/{kept.json()['id']}/verify")
        assert verdict.status == 200, verdict
        inclusion = [c for c in verdict.json()["checks"] if c["name"] == "log_inclusion"]
        assert inclusion and inclusion[0]["result"] == "fail", verdict.json()
        assert verdict.json()["status"] == "invalid"
    assert "refusing to sign" in b.stderr(), b.logs()
    assert "was the database restored from an old backup?" in b.stderr()
    # Nothing was stored after the restore, by either host.
    page = a.get(f"/api/receipts?workflow_id=restore-{run}", key=a.api_key)
    assert [r["id"] for r in page.json()["receipts"]] == [kept.json()["id"]]
    assert state_file(b)["tree_size"] == backup_size


@pytest.mark.live
@on_postgres
def test_rate_limits_count_once_across_both_hosts(redis_url: str) -> None:
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    env = {"REDIS_URL": redis_url, "RATE_LIMITS": "ingest=20/0.001,read=20/0.001"}
    # One worker each: what is counted here is hosts (tests/test_rate_limits.py counts workers).
    with LiveSite(workers=1, env=env) as a, SecondHost(workers=1, first=a) as b:
        published = a.post("/api/receipts", example_body())
        assert published.status == 201, published
        path = f"/api/receipt/{published.json()['id']}/verify"
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda i: (a, b)[i % 2].get(path), range(60)))
    statuses = Counter(answer.status for answer in answers)
    assert statuses == {200: 20, 429: 40}, statuses
    by_host = Counter(i % 2 for i, answer in enumerate(answers) if answer.status == 200)
    assert set(by_host) == {0, 1}, ("both hosts answered some", by_host)

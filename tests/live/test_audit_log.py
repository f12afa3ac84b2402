"""The API audit log: every request a tenant's key makes leaves exactly one append-only entry;
GET /api/audit-logs lists the tenant's own; the admin shows them to auditors; only
`manage.py pruneauditlog` can remove old ones, and the database refuses everything else.

The first part runs in-process on the suite's database (SQLite, or PostgreSQL with
DATABASE_URL); the last part drives a live gunicorn (tests/livesite.py) on a database of its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.conftest import example_body
from tests.db.test_audit_log import AUDIT
from tests.livesite import LiveSite, is_postgres

pytestmark = pytest.mark.live


# --- what an entry holds ----------------------------------------------------------------------


# --- GET /api/audit-logs ---------------------------------------------------------------------


# --- append-only --------------------------------------------------------------------------


# --- retention ------------------------------------------------------------------------------


# --- the admin --------------------------------------------------------------------------------


# --- on a live site: SQLite, or PostgreSQL with DATABASE_URL ----------------------------------


class Raw:
    """The live site's database, spoken to directly as anyone with its credentials could."""

    def __init__(self, site: LiveSite) -> None:
        self.url = site.database_url

    def run(self, sql: str) -> list[tuple[Any, ...]]:
        if is_postgres(self.url):
            import psycopg

            with psycopg.connect(self.url) as db, db.cursor() as cursor:
                cursor.execute(sql)  # type: ignore[arg-type]
                return list(cursor.fetchall()) if cursor.description else []
        path = self.url.removeprefix("sqlite:///")
        lite = sqlite3.connect(path, timeout=30)
        try:
            with lite:
                return list(lite.execute(sql).fetchall())
        finally:
            lite.close()


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=3, env={"AUDIT_LOG_DAYS": "30"}) as live:
        yield live


def live_entries(site: LiveSite, **params: Any) -> list[dict[str, Any]]:
    answer = site.get(f"{AUDIT}?{urlencode(params)}", key=site.api_key)
    assert answer.status == 200, answer
    found: list[dict[str, Any]] = answer.json()["entries"]
    return found


@pytest.mark.live
def test_live_a_stored_receipt_and_a_refused_one_are_logged(site: LiveSite) -> None:
    stored = site.post("/api/receipts", example_body(idempotency_key="live-1"),
                       headers={"X-Request-ID": "live-stored"})
    assert stored.status == 201, stored
    receipt_id = stored.json()["id"]
    [entry] = live_entries(site, request_id="live-stored")
    assert (entry["route"], entry["status"], entry["receipt_ids"]) == (
        "POST /api/receipts", 201, [receipt_id])
    assert live_entries(site, receipt_id=receipt_id) == [entry]
    before = len(site.get("/api/receipts?limit=200", key=site.api_key).json()["receipts"])
    refused = site.post("/api/receipts", example_body(outcome="maybe"),
                        headers={"X-Request-ID": "live-refused"})
    assert refused.status == 422
    [entry] = live_entries(site, request_id="live-refused")
    assert (entry["status"], entry["problem_type"]) == (422, refused.json()["type"])
    assert entry["receipt_ids"] == []
    after = len(site.get("/api/receipts?limit=200", key=site.api_key).json()["receipts"])
    assert after == before
    # Nothing in the log holds the key, an Authorization header or a capability path.
    assert site.get(f"/api/receipts/{receipt_id}", key=site.api_key).status == 200
    text = json.dumps(Raw(site).run("SELECT * FROM audit_auditentry"), default=str)
    assert site.api_key not in text and "Bearer" not in text
    assert f"/api/receipts/{receipt_id}" not in text and "/run/" not in text


@pytest.mark.live
def test_live_concurrent_requests_each_get_exactly_one_entry(site: LiveSite) -> None:
    def one(i: int) -> int:
        rid = f"concurrent-{i}"
        if i % 3 == 0:
            return site.get("/api/receipts?limit=5", key=site.api_key,
                            headers={"X-Request-ID": rid}).status
        body = example_body(idempotency_key=f"c-{i}") if i % 3 == 1 else example_body(
            phase="sideways")
        return site.post("/api/receipts", body, headers={"X-Request-ID": rid}).status

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = list(pool.map(one, range(60)))
    assert statuses.count(201) == 20 and statuses.count(422) == 20
    assert statuses.count(200) == 20
    rows = Raw(site).run(
        "SELECT request_id, COUNT(*) FROM audit_auditentry "
        "WHERE request_id LIKE 'concurrent-%' GROUP BY request_id"
    )
    assert sorted(rows) == sorted((f"concurrent-{i}", 1) for i in range(60))


@pytest.mark.live
def test_live_only_the_prune_command_removes_old_entries(site: LiveSite) -> None:
    raw = Raw(site)
    site.post("/api/receipts", example_body(idempotency_key="prune-me"),
              headers={"X-Request-ID": "prune-template"})
    postgres = is_postgres(raw.url)
    old_at = "now() - interval '31 days'" if postgres else \
        "strftime('%Y-%m-%d %H:%M:%f', 'now', '-31 days')"
    kept_at = "now() - interval '29 days'" if postgres else \
        "strftime('%Y-%m-%d %H:%M:%f', 'now', '-29 days')"
    columns = "tenant_id, key_prefix, method, route, status, problem_type, receipt_ids, " \
              "duration_ms"
    for name, at in (("old", old_at), ("kept", kept_at)):
        raw.run(f"INSERT INTO audit_auditentry (at, request_id, {columns}) "
                f"SELECT {at}, 'prune-{name}', {columns} FROM audit_auditentry "
                f"WHERE request_id = 'prune-template'")
    count = "SELECT COUNT(*) FROM audit_auditentry"
    total = raw.run(count)[0][0]
    # Anyone else: refused, on both databases, and nothing changed.
    for sql in ("DELETE FROM audit_auditentry WHERE request_id = 'prune-old'",
                "UPDATE audit_auditentry SET status = 200 WHERE request_id = 'prune-old'",
                "DELETE FROM audit_auditentry"):
        with pytest.raises(Exception, match="append-only"):
            raw.run(sql)
    assert raw.run(count)[0][0] == total
    output = site.manage("pruneauditlog")
    assert "Removed 1 API audit-log entries" in output
    left = {r[0] for r in raw.run("SELECT request_id FROM audit_auditentry")}
    assert "prune-old" not in left and {"prune-kept", "prune-template"} <= left
    assert raw.run(count)[0][0] == total - 1
    # The permit it left is closed: it lets nothing else go.
    with pytest.raises(Exception, match="append-only"):
        raw.run("DELETE FROM audit_auditentry WHERE request_id = 'prune-kept'")
    with pytest.raises(Exception, match="refused"):
        raw.run("DELETE FROM audit_prunepermit")

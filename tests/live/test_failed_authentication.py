"""Failed authentications on a live gunicorn with several workers: the client address's `auth`
limit is counted once across all of them (in the database, or in Redis with REDIS_URL), a
valid key from that address is still served, every failure within the limit is recorded
without the key, the logs hold no key either, and the admin shows the records to an auditor.
On PostgreSQL, the site's own role may insert the records and nothing more.

The suite's database decides SQLite or PostgreSQL (DATABASE_URL), as for every live test.
"""

from __future__ import annotations

import http.cookiejar
import re
import secrets
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from receiptsite.receipts.models import ApiKey
from tests.conftest import example_body, flush_redis
from tests.live.test_audit_log import Raw
from tests.livesite import LiveSite, admin_connect, is_postgres, suite_database_url

pytestmark = pytest.mark.live

BURST = 6
TRIES = 20
LOG_DEADLINE = 15  # seconds for gunicorn to write the access lines of answers already given


def prefix_of(key: str) -> str:
    return key[: ApiKey.PREFIX_LENGTH]


def secret_of(key: str) -> str:
    return key[ApiKey.PREFIX_LENGTH + 1 :]


def wrong_secret(key: str) -> str:
    """`key`'s public prefix with a secret of the same shape that is not its own."""
    return f"{prefix_of(key)}_{secrets.token_urlsafe(32)}"


def sign_in(site: LiveSite, username: str, password: str) -> urllib.request.OpenerDirector:
    """An admin session of `username`, through the login form as a browser signs in."""
    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    form = browser.open(site.url + "/admin/login/?next=/admin/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    body = urllib.parse.urlencode({
        "csrfmiddlewaretoken": token.group(1), "username": username, "password": password,
        "next": "/admin/",
    }).encode()
    browser.open(urllib.request.Request(site.url + "/admin/login/?next=/admin/", data=body),
                 timeout=30).read()
    return browser


def wait_for_access_lines(site: LiveSite, count: int) -> str:
    """The logs, once gunicorn has written at least `count` access lines of /api/receipts."""
    deadline = time.monotonic() + LOG_DEADLINE
    while True:
        logs = site.logs()
        if logs.count('"path": "/api/receipts"') >= count or time.monotonic() > deadline:
            return logs
        time.sleep(0.1)


@pytest.mark.parametrize("backend", ["database", "redis"])
def test_live_bad_keys_get_401_then_429_across_workers_and_leave_no_key_behind(
    backend: str, request: pytest.FixtureRequest
) -> None:
    env = {"RATE_LIMITS": f"auth={BURST}/0.001"}
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        flush_redis(url)
        env["REDIS_URL"] = url
    with LiveSite(workers=3, env=env) as site:
        bad = wrong_secret(site.api_key)
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda _: site.get("/api/receipts", key=bad), range(TRIES)))
        statuses = [answer.status for answer in answers]
        assert statuses.count(401) == BURST, statuses
        assert statuses.count(429) == TRIES - BURST, statuses
        refusal = next(answer for answer in answers if answer.status == 429)
        assert refusal.content_type == "application/problem+json"
        assert refusal.json()["type"].endswith("/problems/rate-limited")
        assert int(refusal.headers["Retry-After"]) >= 1
        # A missing key from the same address is refused by the same spent limit...
        assert site.get("/api/receipts").status == 429
        # ...while the valid key is limited by its own scope, and served.
        assert site.get("/api/receipts", key=site.api_key).status == 200
        stored = site.post("/api/receipts", example_body())
        assert stored.status == 201, stored

        rows = Raw(site).run("SELECT * FROM audit_failedauthentication")
        assert len(rows) == BURST
        reasons = Raw(site).run(
            "SELECT reason, key_prefix, client_address, method, path "
            "FROM audit_failedauthentication"
        )
        prefix = prefix_of(site.api_key)
        assert set(reasons) == {("unknown", prefix, "127.0.0.1", "GET", "/api/receipts")}
        logs = wait_for_access_lines(site, TRIES + 3)
        for secret in (secret_of(bad), secret_of(site.api_key)):
            assert not [row for row in rows if secret in " ".join(map(str, row))]
            assert secret not in logs

        password = secrets.token_urlsafe(16)
        site.base_env["DJANGO_AUDITOR_PASSWORD"] = password
        try:
            site.manage("createauditor", "--noinput", "auditor")
        finally:
            del site.base_env["DJANGO_AUDITOR_PASSWORD"]
        browser = sign_in(site, "auditor", password)
        listing = browser.open(site.url + "/admin/audit/failedauthentication/",
                               timeout=30).read().decode()
        assert listing.count(prefix) == BURST, listing
        assert "127.0.0.1" in listing and secret_of(bad) not in listing


# --- the site's own role (PostgreSQL) ---------------------------------------------------------


@pytest.fixture
def site_role() -> Iterator[str]:
    server = suite_database_url()
    if not is_postgres(server):
        pytest.skip("database roles are PostgreSQL's (run with DATABASE_URL=postgres://...)")
    role = f"receiptsite_site_{secrets.token_hex(5)}"
    with admin_connect(server) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
    try:
        yield role
    finally:
        with admin_connect(server) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_live_the_site_role_records_failures_and_can_neither_change_nor_remove_them(
    site_role: str,
) -> None:
    import psycopg

    from tests.live.test_row_level_security import RoleSite, as_role

    env = {"DATABASE_SITE_ROLE": site_role, "RATE_LIMITS": "auth=3/0.001"}
    with RoleSite(workers=2, role=site_role, env=env) as site:
        statuses = [site.get("/api/receipts", key=wrong_secret(site.api_key)).status
                    for _ in range(4)]
        assert statuses == [401, 401, 401, 429]
        assert site.get("/api/receipts", key=site.api_key).status == 200
        with psycopg.connect(as_role(site.database_url, site_role), autocommit=True) as conn:
            granted: Any = conn.execute(
                "SELECT has_table_privilege(current_user, 'audit_failedauthentication', p) "
                "FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) p"
            ).fetchall()
            assert [g[0] for g in granted] == [True, True, False, False, False]
            assert conn.execute(
                "SELECT count(*) FROM audit_failedauthentication").fetchone() == (3,)
            for sql in ("UPDATE audit_failedauthentication SET reason = 'missing'",
                        "DELETE FROM audit_failedauthentication"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql)

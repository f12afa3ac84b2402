"""The monitors check who they run as (receipts/rowsecurity.refuse_hidden_rows): run as the site
role, which row-level security hides rows from (not the tables' owner, no superuser, no
BYPASSRLS), `checklog`, `checkdecisions` and `checkwithdrawals` exit 2 with one line naming the
owner to run as, instead of reporting as tampering the rows they cannot see; run as the owner
they check the record.

A real site role on the suite's PostgreSQL server, made here under a name of its own and
dropped at the end, granted what `migrate` grants it; receipts stored through gunicorn running
as it. SQLite has no row-level security: the module is skipped there.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import example_body
from tests.live.test_row_level_security import RoleSite, as_role
from tests.livesite import PYTHON, REPO, admin_connect, is_postgres, suite_database_url

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not is_postgres(suite_database_url()),
        reason="row-level security is PostgreSQL's; SQLite has none (run with DATABASE_URL)",
    ),
]

MONITORS = ["checklog", "checkdecisions", "checkwithdrawals"]
# The other commands of the owner's that check who they run as, and why they must.
OWNERS = {
    **dict.fromkeys(MONITORS, "it would report as tampering what it cannot see"),
    "scrubwithdrawn": "it would scrub nothing (PostgreSQL vacuums a table for its owner)",
    "continuelog": "it may not write the end of a log",
}


@pytest.fixture(scope="module")
def site() -> Iterator[RoleSite]:
    server = suite_database_url()
    role = f"receiptsite_site_{secrets.token_hex(5)}"
    with admin_connect(server) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
    try:
        live = RoleSite(workers=1, role=role, env={"DATABASE_SITE_ROLE": role})
        with live:
            for i in range(3):
                answer = live.post("/api/receipts", example_body(idempotency_key=f"r-{i}"))
                assert answer.status == 201, answer
            yield live
    finally:
        with admin_connect(server) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def run(site: RoleSite, command: str, database_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PYTHON), "manage.py", command], cwd=REPO,
        env={**site.base_env, "DATABASE_URL": database_url},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def owner_of_the_tables(site: RoleSite) -> str:
    import psycopg

    with psycopg.connect(site.database_url, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'receipts_receipt'"
        ).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("command", OWNERS)
def test_run_as_the_site_role_a_monitor_refuses_naming_the_owner(
    site: RoleSite, command: str
) -> None:
    done = run(site, command, as_role(site.database_url, site.role))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""  # no verdict on a record it cannot see
    (line,) = done.stderr.strip().splitlines()
    owner = owner_of_the_tables(site)
    assert line.startswith(
        f"CommandError: {command} must run as the tables' owner, {owner} (or a superuser): "
        f"it runs as {site.role}, from which row-level security hides rows of "
        f"receipts_receipt, audit_auditentry, receipts_withdrawal, so {OWNERS[command]}; "
    ), line
    assert f"run it with DATABASE_URL naming {owner}" in line


@pytest.mark.parametrize("command", [*MONITORS, "scrubwithdrawn"])
def test_run_as_the_owner_a_monitor_checks_the_record(site: RoleSite, command: str) -> None:
    done = run(site, command, site.database_url)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.startswith("OK: ")
    if command == "checklog":
        assert "OK: 3 leaves recomputed" in done.stdout  # every receipt, none hidden

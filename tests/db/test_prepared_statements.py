"""On PostgreSQL the site binds parameters on the server and prepares a statement a connection
runs more than five times (settings.DATABASE_PREPARED_STATEMENTS, on by default), so that the
server plans each of the hot reads once per connection instead of on every run.

What these tests hold: the statements really are prepared; a prepared statement keeps
row-level security (a plan made while one receipt was in scope shows no other, to the site's
role); and `DATABASE_PREPARED_STATEMENTS=false` gives Django's default, client-side binding and
nothing prepared. SQLite has no server: the module is skipped there.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest
from django.db import connection

from receiptsite.receipts.models import Receipt, Tenant
from receiptsite.receipts.rowsecurity import receipt_scope
from tests.conftest import Producer
from tests.db.test_site_role import acting_as, site_role  # noqa: F401 (a fixture)
from tests.livesite import PYTHON, REPO, is_postgres, suite_database_url

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(
        not is_postgres(suite_database_url()),
        reason="prepared statements are the PostgreSQL server's (run with DATABASE_URL)",
    ),
]


def prepared(fragment: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_read_run_a_sixth_time_is_prepared(producer: Producer) -> None:
    public_id = producer.publish()["id"]
    for _ in range(5):
        assert Receipt.objects.verifiable(public_id) is not None
    assert prepared("WHERE r.public_id = $1") == [], "prepared before its sixth run"
    assert Receipt.objects.verifiable(public_id) is not None
    statements = prepared("WHERE r.public_id = $1")
    assert len(statements) == 1, statements


def test_a_prepared_read_keeps_row_level_security(
    producer: Producer,
    site_role: str,  # noqa: F811 (the fixture imported above)
) -> None:
    mine = producer.publish()["id"]
    other = producer.publish(idempotency_key=str(uuid.uuid4()))["id"]
    with acting_as(site_role) as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == site_role
        # The ingest's tenant (SET LOCAL) lasts as long as the test's one transaction: cleared,
        # as it is for the next request on a real connection.
        cursor.execute("SELECT set_config('app.tenant_id', '', true)")
        # Prepared (and run past PostgreSQL's five custom plans) while `mine` is in scope.
        for _ in range(8):
            with receipt_scope(mine):
                assert Receipt.objects.verifiable(mine) is not None
        assert prepared("WHERE r.public_id = $1"), "the read was never prepared"
        with receipt_scope(other):
            assert Receipt.objects.verifiable(mine) is None
            assert Receipt.objects.verifiable(other) is not None
        assert Receipt.objects.verifiable(mine) is None  # out of every scope


def test_false_keeps_client_side_binding_and_prepares_nothing() -> None:
    script = (
        "import django; django.setup()\n"
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    for _ in range(7): c.execute('SELECT %s::int + 1', [1])\n"
        "    c.execute('SELECT count(*) FROM pg_prepared_statements')\n"
        "    print(type(c.cursor).__name__, connection.connection.prepare_threshold,"
        " c.fetchone()[0])\n"
    )
    seen = {}
    for value in ("false", "true"):
        done = subprocess.run(
            [str(PYTHON), "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
            env={"DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": suite_database_url(),
                 "DATABASE_PREPARED_STATEMENTS": value, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen[value] = done.stdout.split()
    assert seen["false"] == ["Cursor", "None", "0"]
    assert seen["true"] == ["ServerBindingCursor", "5", "1"]


def test_the_look_up_of_idempotency_keys_is_one_statement_whatever_the_keys(
    tenant: Tenant,
) -> None:
    """Each list is one array parameter, so that a batch's look-up and a single post's are
    one statement, which psycopg parses once and prepares (models._stored_under_sql): eight
    look-ups of eight sizes prepare it, as eight runs of one statement would."""
    for size in range(1, 9):
        keys = [f"k-{n}" for n in range(size)]
        assert Receipt.objects.stored_under(tenant.pk, keys, [key * 2 for key in keys]) == []
    assert len(prepared('"idempotency_key" = ANY(')) == 1

"""The site's PostgreSQL role can shadow nothing: after `migrate` with DATABASE_SITE_ROLE it can
make no temporary table and no object of any kind, it owns nothing (and `migrate` grants
nothing to a role that does), and the site's functions name their tables with their schema
and fix their search_path, so that a temporary table of a table's name, even in the owner's
session, stands in for nothing.

The role is made inside each test's transaction (rolled back with it) and the SQL runs as it
through SET ROLE, which checks every privilege as that role's. SQLite has no roles, and its
triggers already read the tables of their own schema only: the module is skipped there.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import Error, connection, transaction

from receiptsite.audit.models import AuditEntry
from receiptsite.receipts.models import Receipt
from tests.conftest import Producer
from tests.db.test_immutability import snapshot
from tests.db.test_withdrawal import erase_sql
from tests.livesite import is_postgres, suite_database_url

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(
        not is_postgres(suite_database_url()),
        reason="database roles and search paths are PostgreSQL's (run with DATABASE_URL)",
    ),
]


def new_role() -> str:
    role = f"receiptsite_site_{secrets.token_hex(5)}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
    return role


def migrate_granting(settings: Any, role: str) -> None:
    """A deploy's `migrate` (nothing to apply) naming the site role."""
    settings.DATABASE_SITE_ROLE = role
    call_command("migrate", verbosity=0)


@pytest.fixture
def site_role(db: None, settings: Any) -> str:
    role = new_role()
    migrate_granting(settings, role)
    return role


@contextmanager
def acting_as(role: str) -> Iterator[Any]:
    """A cursor whose statements run as `role`, in a savepoint: an error rolls the role back
    with everything else."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {role}")
        yield cursor
        cursor.execute("RESET ROLE")


def first(sql: str, *params: Any) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


# --- the site role -----------------------------------------------------------------------------

# A temporary table of the name each guard reads, what the role would put in it, and what it
# would then try.
SHADOWS = {
    "receipts_withdrawal": (
        "CREATE TEMP TABLE receipts_withdrawal (receipt_id bigint, tenant_id bigint)",
        "INSERT INTO receipts_withdrawal VALUES ({receipt}, {tenant})",
        "SELECT receiptsite_erase_withdrawn({receipt})",
    ),
    "audit_prunepermit": (
        "CREATE TEMP TABLE audit_prunepermit (id bigint, cutoff timestamptz, "
        "issued_at timestamptz, txid bigint, closed_at timestamptz, removed integer)",
        "INSERT INTO audit_prunepermit (id, cutoff, issued_at, txid) "
        "VALUES (1, now() + interval '1 day', now(), txid_current())",
        "DELETE FROM audit_auditentry",
    ),
}


@pytest.mark.parametrize("table", SHADOWS)
def test_the_site_role_cannot_make_a_temporary_table_to_stand_in_for_a_guards(
    producer: Producer, site_role: str, table: str
) -> None:
    receipt = Receipt.objects.get(public_id=producer.publish()["id"])
    assert AuditEntry.objects.exists()
    before = snapshot("receipts_receipt"), snapshot("audit_auditentry")
    # PostgreSQL checks the right when a session makes its temporary schema, so this one
    # must not have one yet (a test's rolled back with its transaction).
    assert first("SELECT pg_my_temp_schema()::bigint") == 0
    create, fill, attack = SHADOWS[table]
    with (
        pytest.raises(Error, match="permission denied to create temporary tables"),
        acting_as(site_role) as cursor,
    ):
        cursor.execute(create)
        cursor.execute(fill.format(receipt=receipt.pk, tenant=receipt.tenant_id))
        cursor.execute(f"GRANT ALL ON {table} TO PUBLIC")
        cursor.execute(attack.format(receipt=receipt.pk))
    assert (snapshot("receipts_receipt"), snapshot("audit_auditentry")) == before


def test_after_migrate_the_site_role_owns_nothing_and_may_create_nothing(
    site_role: str,
) -> None:
    owned = first(
        """
        SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid)
             + (SELECT count(*) FROM pg_proc WHERE proowner = r.oid)
             + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid)
             + (SELECT count(*) FROM pg_database WHERE datdba = r.oid)
        FROM pg_roles r WHERE rolname = %s
        """,
        site_role,
    )
    assert owned == 0
    may = first(
        "SELECT ARRAY[has_database_privilege(%s, current_database(), 'TEMPORARY'), "
        "has_database_privilege(%s, current_database(), 'CREATE'), "
        "has_schema_privilege(%s, 'public', 'CREATE')]",
        site_role, site_role, site_role,
    )
    assert may == [False, False, False]
    # Nor through PUBLIC, for any other role of the server.
    assert first(
        "SELECT has_database_privilege('public', current_database(), 'TEMPORARY')"
    ) is False


# What an operator's database may let everyone do before `migrate` takes it back: a schema
# public made before PostgreSQL 15 (or upgraded from one) lets PUBLIC create in it, and a
# database may have been opened up to the site role by hand.
LOOSE = [
    "GRANT CREATE ON SCHEMA public TO PUBLIC",
    "GRANT ALL ON DATABASE {database} TO PUBLIC",
    "GRANT ALL ON DATABASE {database} TO {role}",
    "GRANT CREATE ON SCHEMA public TO {role}",
]
CREATIONS = [
    "CREATE TABLE public.receipts_withdrawal_copy (receipt_id bigint, tenant_id bigint)",
    "CREATE FUNCTION public.receiptsite_stand_in() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE SCHEMA receiptsite_stand_in",
    "CREATE TEMP TABLE receipts_withdrawal (receipt_id bigint, tenant_id bigint)",
]


@pytest.mark.parametrize("statement", CREATIONS)
def test_migrate_takes_back_every_right_to_create_even_one_given_before(
    db: None, settings: Any, statement: str
) -> None:
    role = new_role()
    database = connection.ops.quote_name(first("SELECT current_database()"))
    with connection.cursor() as cursor:
        for loose in LOOSE:
            cursor.execute(loose.format(database=database, role=role))
    migrate_granting(settings, role)
    with pytest.raises(Error, match="permission denied"), acting_as(role) as cursor:
        cursor.execute(statement)


# What a site role may hold that `migrate` refuses to grant to: it would change the guards,
# or make itself a member of the owner.
HOLDINGS = {
    "a table": ("ALTER TABLE receipts_ratebucket OWNER TO {role}", "relation receipts_ratebucket"),
    "a function": (
        "ALTER FUNCTION receiptsite_refuse_change() OWNER TO {role}",
        "function receiptsite_refuse_change()",
    ),
    "the schema": ("ALTER SCHEMA public OWNER TO {role}", "schema public"),
    "CREATEROLE": ("ALTER ROLE {role} CREATEROLE", "CREATEROLE"),
}


@pytest.mark.parametrize("holding", HOLDINGS)
def test_migrate_grants_nothing_to_a_site_role_that_owns_anything(
    db: None, settings: Any, holding: str
) -> None:
    role = new_role()
    make, named = HOLDINGS[holding]
    with connection.cursor() as cursor:
        cursor.execute(make.format(role=role))
    with pytest.raises(CommandError, match=f"DATABASE_SITE_ROLE {role} must own nothing") as e:
        migrate_granting(settings, role)
    assert named in str(e.value)
    # Nothing was granted or taken: the role reads no receipt, and PUBLIC keeps TEMPORARY.
    assert first("SELECT has_table_privilege(%s, 'receipts_receipt', 'SELECT')", role) is False
    assert first(
        "SELECT has_database_privilege('public', current_database(), 'TEMPORARY')"
    ) is True


# --- the functions, whoever calls them ---------------------------------------------------------


def test_every_function_of_the_site_fixes_its_search_path_temporary_schema_last(
    db: None,
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
        )
        functions = dict(cursor.fetchall())
    assert "receiptsite_erase_withdrawn(bigint)" in functions
    assert "receiptsite_audit_entry_delete()" in functions
    for name, config in functions.items():
        assert config == ["search_path=pg_catalog, public, pg_temp"], name


def test_a_temporary_withdrawal_in_the_owners_session_lets_no_erasure_through(
    producer: Producer,
) -> None:
    receipt = Receipt.objects.get(public_id=producer.publish()["id"])
    with connection.cursor() as cursor:
        cursor.execute(SHADOWS["receipts_withdrawal"][0])
        cursor.execute(
            "INSERT INTO receipts_withdrawal VALUES (%s, %s)", [receipt.pk, receipt.tenant_id]
        )
    before = snapshot("receipts_receipt")
    # Through the erase function (SECURITY DEFINER), and by the owner's own UPDATE.
    for sql in (f"SELECT receiptsite_erase_withdrawn({receipt.pk})", erase_sql(receipt)):
        with (
            pytest.raises(Error, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql)
        assert snapshot("receipts_receipt") == before, sql


def test_a_temporary_permit_in_the_owners_session_lets_no_entry_go(
    producer: Producer,
) -> None:
    producer.publish()
    before = snapshot("audit_auditentry")
    assert before
    create, fill, attack = SHADOWS["audit_prunepermit"]
    with connection.cursor() as cursor:
        cursor.execute(create)
        cursor.execute(fill)
    with (
        pytest.raises(Error, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(attack)
    assert snapshot("audit_auditentry") == before


def test_the_site_role_may_read_the_end_of_a_log_but_never_write_one(
    site_role: str, producer: Producer
) -> None:
    # Holding the site's role (and even its key), a process cannot end its log to cover a
    # rollback: `continuelog` is the owner's. It may read what the owner wrote.
    producer.publish()
    with acting_as(site_role) as cursor:
        cursor.execute("SELECT count(*) FROM receipts_logcontinuation")
        assert cursor.fetchone()[0] == 0
    with pytest.raises(Error, match="permission denied"), acting_as(site_role) as cursor:
        cursor.execute(
            "INSERT INTO receipts_logcontinuation (old_origin, signed_size, signed_root, "
            "tree_size, root_hash, new_origin, statement, signing_key_id, recorded_at) "
            "SELECT 'a', 1, '\\x00', 0, '\\x00', 'b', 'x', id, now() FROM receipts_signingkey"
        )

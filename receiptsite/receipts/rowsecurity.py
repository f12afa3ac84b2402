"""Tenant isolation enforced by PostgreSQL too: row-level security on the tenant-scoped tables.

The code scopes every query by tenant; these policies make a query that forgot to do so return
nothing instead of another tenant's rows. They bind a role that does not own the tables:

- The owner (the role `migrate` runs as) owns every table, so it bypasses row-level security
  (tables do not FORCE it): `migrate`, `createtenant`, `createapikey`, `checklog` and the other
  commands see every row. A superuser always bypasses it, which is why the default (one
  DATABASE_URL, the quickstart's and the test suite's) works unchanged: the policies exist
  there too and bind nobody.
- The site role (the DATABASE_URL gunicorn runs with) owns nothing, is no superuser and has no
  BYPASSRLS. `migrate` run with DATABASE_SITE_ROLE=<role> grants it exactly what `grants()`
  says: SELECT and INSERT on the append-only tables (the ones 0002's trigger guards), SELECT on
  django_migrations, SELECT/INSERT/UPDATE/DELETE on the rest, nothing on the audit log's prune
  permits (only `pruneauditlog`, run as the owner, writes them); no TRUNCATE, no DDL. It may
  create nothing, not even a temporary table (one of a table's name would come first on the
  search path): `migrate` takes TEMPORARY and CREATE on the database, and CREATE on schema
  public, from it and from PUBLIC (through which every role holds TEMPORARY), and if the role
  still owns or may create anything there (holdings()), it grants nothing and says what. The
  site's functions name their tables with their schema and fix their search_path too
  (migration 0012, which writes them out), so no session, the owner's included, can stand in
  for a table.

What the site role may see of a scoped table is the union of these policies, each of which
matches nothing while its setting is unset:

- `receiptsite_tenant`: rows of the tenant in `app.tenant_id`, for reads and writes (an INSERT
  for another tenant is refused). A tenant API request runs in one transaction whose first
  statement sets it with `set_config(..., true)`, i.e. SET LOCAL: it ends with the transaction
  (tenant_transaction, used by http.api_route). The request's API audit entry is written in
  that transaction too, so the audit table is scoped like the receipts. The rate limit's token
  is taken before it opens, so that the bucket's row is not locked for the whole request.
- `receiptsite_public`: reads of the rows whose public id is in `app.receipt_ids`. A public
  route with a receipt id in its path (the page, its hand-off text, the verification JSON)
  names that one id (receipt_scope, used by http.capability and http.api_route), and the page
  adds the receipts the document itself links to (reveal). A query there cannot list: it sees
  the receipts it named by id and no other. This scope is a session setting, set before the
  view and cleared after it, rather than a transaction: it only ever shows rows that are public
  to anyone holding their id, and the view's own writes (a rate-limit bucket, an auditor's
  decision) keep their short transactions.
- `receiptsite_auditor`: reads of every row while `app.auditor` is `on`, set with SET LOCAL by
  AuditorScopeMiddleware for a signed-in staff user's admin request: auditors review every
  tenant.

Tenants and API keys are not row-scoped: a key is found by its public prefix before any tenant
is known, and neither table holds evidence (a key is stored as its prefix and a digest). The
log's tables are public by design.

The settings guard against a query the code forgot to scope, not against code that runs SQL
of its choice as the site role: such code could set them too (as it could read the signing
key). On SQLite there is no row-level security; nothing here runs there, and no read is put in
a transaction (BEGIN IMMEDIATE would take the write lock for nothing).

SCOPED is the one list: adding a tenant-scoped table is one line there (its name, its tenant
column, and the public id column if receipts of it are read by id), and the next `migrate`
installs its policies (post_migrate re-applies the list, so a table created after 0008 is
covered too). The policies' SQL is receipts/guards_v1.py's, the one that migration 0008
installed them with.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from receiptsite.receipts import guards_v1
from receiptsite.receipts.guards_v1 import AUDITOR, PUBLIC, TENANT, Scoped

SCOPED: list[Scoped] = [
    Scoped("receipts_receipt", "tenant_id", public_column="public_id"),
    Scoped("audit_auditentry", "tenant_id"),
    # A public read of a withdrawn receipt reads its withdrawal by the receipt's public id.
    Scoped("receipts_withdrawal", "tenant_id", public_column="receipt_public_id"),
]

# The append-only tables are those the immutability trigger guards (migrations 0002): the
# database says which, so the grants follow every table that gets the trigger.
_APPEND_ONLY = f"""
SELECT DISTINCT c.relname FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
WHERE p.proname = '{guards_v1.REFUSE_CHANGE}' AND NOT t.tgisinternal
"""
# Read by the site, written only by the owner: the migrations' record, and the end of a log
# (`continuelog`, models.LogContinuation).
READ_ONLY_TABLES = ("django_migrations", "receipts_logcontinuation")
# Erases a withdrawn receipt's content (withdrawal/withdrawals.py), as the tables' owner: the
# function migration 0009 installs.
ERASE_FUNCTION = "receiptsite_erase_withdrawn(bigint)"
# Written by commands run as the owner, never by the site: the permit to prune the audit log.
OWNER_ONLY_TABLES = ("audit_prunepermit",)
# What the site role must not hold once granted: a table, function, schema or the database
# of its own (directly or through a role it is a member of), a right to create a temporary
# table or any other object, or an attribute that goes around all of it.
_SCHEMAS = "n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema'"
_HOLDS = f"""
SELECT what FROM (
    SELECT 'the database ' || quote_ident(datname) AS what, datdba AS owner
    FROM pg_database WHERE datname = current_database()
    UNION ALL SELECT 'schema ' || quote_ident(n.nspname), n.nspowner
    FROM pg_namespace n WHERE {_SCHEMAS}
    UNION ALL SELECT 'relation ' || c.oid::regclass::text, c.relowner
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_SCHEMAS}
    UNION ALL SELECT 'function ' || p.oid::regprocedure::text, p.proowner
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_SCHEMAS}
) owned WHERE pg_has_role(%(role)s, owner, 'MEMBER')
UNION ALL SELECT privilege || ' on the database' FROM unnest(ARRAY['TEMPORARY', 'CREATE'])
    AS privilege WHERE has_database_privilege(%(role)s, current_database(), privilege)
UNION ALL SELECT 'CREATE on schema ' || quote_ident(n.nspname) FROM pg_namespace n
    WHERE {_SCHEMAS} AND has_schema_privilege(%(role)s, n.oid, 'CREATE')
UNION ALL SELECT attribute FROM pg_roles, LATERAL (VALUES ('SUPERUSER', rolsuper),
    ('BYPASSRLS', rolbypassrls), ('CREATEROLE', rolcreaterole)) AS a (attribute, held)
    WHERE rolname = %(role)s AND held
"""


def install(db: BaseDatabaseWrapper) -> None:
    """Install the policies of every listed table that exists and lacks them (PostgreSQL;
    nothing elsewhere)."""
    guards_v1.install_policies(db, SCOPED)


def grants(db: BaseDatabaseWrapper, role: str) -> list[str]:
    """The statements that give the site role what it needs and nothing more."""
    role = db.ops.quote_name(role)
    with db.cursor() as cursor:
        cursor.execute(_APPEND_ONLY)
        append_only = {name for (name,) in cursor.fetchall()}
        cursor.execute("SELECT current_database()")
        database = db.ops.quote_name(cursor.fetchone()[0])
    statements = [
        # No temporary table, nor any object, that a name could be looked up in: every role
        # holds TEMPORARY on a database through PUBLIC unless it is taken from PUBLIC too.
        f"REVOKE TEMPORARY, CREATE ON DATABASE {database} FROM PUBLIC, {role}",
        f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}",
        f"GRANT USAGE ON SCHEMA public TO {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
    ]
    for table in sorted(guards_v1.tables(db) - set(OWNER_ONLY_TABLES)):
        if table in READ_ONLY_TABLES:  # whether append-only or not
            privileges = "SELECT"
        elif table in append_only:
            privileges = "SELECT, INSERT"
        else:
            privileges = "SELECT, INSERT, UPDATE, DELETE"
        statements.append(f"GRANT {privileges} ON {table} TO {role}")
    # A withdrawal erases a receipt's content through the one function that may (migration
    # 0009; the receipts' trigger lets it through only once the row's withdrawal exists): the
    # site role itself may not UPDATE a receipt.
    statements.append(f"GRANT EXECUTE ON FUNCTION {ERASE_FUNCTION} TO {role}")
    return statements


def holdings(db: BaseDatabaseWrapper, role: str) -> list[str]:
    """What `role` owns or may create in this database, and the attributes that would let it
    around the grants: nothing, for a site role."""
    with db.cursor() as cursor:
        cursor.execute(_HOLDS, {"role": role})
        return [what for (what,) in cursor.fetchall()]


def grant(db: BaseDatabaseWrapper, role: str) -> None:
    """Grant the site role what grants() says, or, if it still holds anything of its own
    after that (holdings()), change nothing and say what."""
    with transaction.atomic(using=db.alias), db.cursor() as cursor:
        for statement in grants(db, role):
            cursor.execute(statement)
        held = holdings(db, role)
        if held:
            raise CommandError(
                f"DATABASE_SITE_ROLE {role} must own nothing and be able to create nothing in "
                f"this database, and it holds: {'; '.join(held)}. Run migrate as the "
                "database's owner, and make the site role no superuser, no BYPASSRLS, no "
                "CREATEROLE, owner of nothing and member of no role that owns anything here "
                "(README, \"Database roles\"); nothing was granted."
            )


# For each tenant-scoped table that exists: its owner, and whether row-level security filters
# it for the role this session runs as (PostgreSQL's own answer: not for the owner, a
# superuser or a BYPASSRLS role).
_HIDDEN = """
SELECT c.relname, pg_get_userbyid(c.relowner), current_user, row_security_active(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relname = ANY(%s)
ORDER BY array_position(%s, c.relname::text)
"""


def refuse_hidden_rows(
    command: str, consequence: str = "it would report as tampering what it cannot see"
) -> None:
    """For the monitors (`checklog`, `checkdecisions`, `checkwithdrawals`), first: on
    PostgreSQL, a CommandError with exit status 2, in one line naming the owner to run as, when
    row-level security hides rows from this session's role (the site role: it sees no
    receipt, decision or withdrawal outside a request's scope). Run as that role, a monitor
    would report as tampering the rows it cannot see. Nothing on SQLite."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        tables = [scoped.table for scoped in SCOPED]
        cursor.execute(_HIDDEN, [tables, tables])
        rows = cursor.fetchall()
    hidden = [(table, owner, role) for table, owner, role, active in rows if active]
    if hidden:
        tables = [table for table, _, _ in hidden]
        _, owner, role = hidden[0]
        raise CommandError(
            f"{command} must run as the tables' owner, {owner} (or a superuser): it runs as "
            f"{role}, from which row-level security hides rows of {', '.join(tables)}, so "
            f"{consequence}; run it with DATABASE_URL naming "
            f"{owner} (README, \"Database roles\")",
            returncode=2,
        )


def after_migrate(*, using: str, **kwargs: Any) -> None:
    """post_migrate: the policies of every listed table (one added after 0008 included), and
    the site role's grants when DATABASE_SITE_ROLE names it."""
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    db = connections[using]
    if db.vendor != "postgresql":
        return
    if ("receipts", "0008_row_level_security") not in MigrationRecorder(db).applied_migrations():
        return  # migrated back before the policies: leave them off
    install(db)
    if settings.DATABASE_SITE_ROLE:
        grant(db, settings.DATABASE_SITE_ROLE)


# --- the scopes of a request ------------------------------------------------------------------


def _set(name: str, value: str, *, local: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, %s)", [name, value, local])


@contextmanager
def tenant_transaction(tenant_id: int) -> Iterator[None]:
    """On PostgreSQL, one transaction whose first statement sets the tenant (SET LOCAL); the
    block's queries see that tenant's rows only. On SQLite, nothing: the block's own writes
    take their transactions as before."""
    if connection.vendor != "postgresql":
        yield
        return
    escaped: Exception | None = None
    with transaction.atomic():
        _set(TENANT, str(tenant_id), local=True)
        try:
            yield
        except DatabaseError:
            raise
        except Exception as error:
            # A fault of the site (a 500) keeps what was written before it, as it would
            # without this transaction (the view's own atomic blocks have rolled theirs
            # back): the 500's audit entry, for one.
            escaped = error
    if escaped is not None:
        raise escaped


_public_scope: ContextVar[bool] = ContextVar("receiptsite_public_scope", default=False)


@contextmanager
def receipt_scope(receipt_id: uuid.UUID | str) -> Iterator[None]:
    """On PostgreSQL, the block may read the receipt with this public id (and those reveal()
    adds), and no other: set before, cleared after."""
    if connection.vendor != "postgresql":
        yield
        return
    _set(PUBLIC, str(uuid.UUID(str(receipt_id))), local=False)
    token = _public_scope.set(True)
    try:
        yield
    finally:
        _public_scope.reset(token)
        try:
            _set(PUBLIC, "", local=False)
        except DatabaseError:
            connection.close()  # a connection that cannot forget the scope is not reused


def reveal(receipt_ids: Iterable[str]) -> None:
    """Inside receipt_scope: the receipts the scoped one's own document links to become
    readable too (by id: still no listing). Elsewhere nothing: a tenant sees its own."""
    ids = [str(uuid.UUID(str(i))) for i in receipt_ids]
    if not ids or connection.vendor != "postgresql" or not _public_scope.get():
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT set_config(%s, concat_ws(',', {guards_v1.setting(PUBLIC)}, %s::text), false)",
            [PUBLIC, ",".join(ids)],
        )


@functools.cache
def _admin_prefix() -> str:
    return reverse("admin:index")


class AuditorScopeMiddleware:
    """The admin's requests of a signed-in staff user read every tenant's rows (PostgreSQL):
    one transaction with `app.auditor` set (SET LOCAL). After AuthenticationMiddleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if connection.vendor != "postgresql" or not request.path.startswith(_admin_prefix()):
            return self.get_response(request)
        user = getattr(request, "user", None)
        if user is None or not (user.is_active and user.is_staff):
            return self.get_response(request)
        with transaction.atomic():
            _set(AUDITOR, "on", local=True)
            return self.get_response(request)

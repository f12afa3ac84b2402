"""The database's guards, version 1: what migrations install so that the database itself holds
the site's invariants, whatever code runs against it.

- The append-only triggers: on PostgreSQL a row trigger (no UPDATE, no DELETE) and a statement
  trigger (no TRUNCATE) calling one function; on SQLite a trigger each for UPDATE and DELETE,
  and one more against an insert that meets an existing row on any unique key (INSERT OR
  REPLACE would remove that row without firing the DELETE trigger).
- The row-level security policies of a tenant-scoped table (PostgreSQL).
- The grant of the Auditors group's permissions.

Frozen. A migration installed its guards with this module, and a fresh `migrate` must build
exactly what it built the day that migration was written: a change of a guard is a new module
(guards_v2) and a new migration that installs it, never an edit of this one. So it imports
nothing of the application, only the standard library and Django's migration-safe APIs, and
its callers name what they guard (tables, unique keys, columns) with literals of their own.
receipts/rowsecurity.py calls it too, for the tables it scopes after the migrations have run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# --- append-only tables ----------------------------------------------------------------------

# A unique key of a table: its columns.
Key = tuple[str, ...]

# The PostgreSQL function every append-only table's triggers call.
REFUSE_CHANGE = "receiptsite_refuse_change"
REFUSE_CHANGE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {REFUSE_CHANGE}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
"""


def postgres_triggers(table: str) -> list[str]:
    """No UPDATE or DELETE of a row, no TRUNCATE (REFUSE_CHANGE_FUNCTION must exist)."""
    return [
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {REFUSE_CHANGE}();",
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {REFUSE_CHANGE}();",
    ]


def sqlite_triggers(table: str) -> list[str]:
    """No UPDATE, no DELETE (SQLite has no TRUNCATE: its truncation is a DELETE)."""
    return [
        f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} BEGIN "
        f"SELECT RAISE(ABORT, 'receiptsite: {op} on {table} is refused: "
        f"the table is append-only'); END;"
        for op in ("UPDATE", "DELETE")
    ]


def no_replace_trigger_name(table: str) -> str:
    return f"{table}_no_replace"


def sqlite_no_replace_trigger(table: str, keys: Sequence[Key]) -> str:
    """No insert that meets an existing row on any of `keys`, every unique key of the table.
    Each key is an indexed lookup. A NULL in NEW makes its comparison NULL, not true, which is
    how the unique indexes treat NULLs (and a partial index of nullable values)."""
    meets = " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} WHERE "
        + " AND ".join(f'"{column}" = NEW."{column}"' for column in key)
        + ")"
        for key in keys
    )
    return (
        f"CREATE TRIGGER {no_replace_trigger_name(table)} BEFORE INSERT ON {table} WHEN {meets} "
        f"BEGIN SELECT RAISE(ABORT, 'receiptsite: an INSERT meeting an existing row of {table} "
        f"is refused: the table is append-only'); END;"
    )


def append_only_drops(vendor: str, table: str, *, no_replace: bool) -> list[str]:
    """The statements that drop the append-only triggers of `table` (`no_replace`: SQLite's
    trigger against a replacing insert too)."""
    if vendor == "postgresql":
        return [
            f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};",
            f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};",
        ]
    names = [f"{table}_no_update", f"{table}_no_delete"]
    if no_replace:
        names.append(no_replace_trigger_name(table))
    return [f"DROP TRIGGER IF EXISTS {name};" for name in names]


def install_append_only(
    schema_editor: BaseDatabaseSchemaEditor, table: str, keys: Sequence[Key] | None = None
) -> None:
    """Make `table` append-only. `keys`: every unique key of the table, for SQLite's trigger
    against a replacing insert (None: that trigger is left to the caller)."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = postgres_triggers(table)
    elif vendor == "sqlite":
        statements = sqlite_triggers(table)
        if keys is not None:
            statements.append(sqlite_no_replace_trigger(table, keys))
    else:
        raise RuntimeError(f"no immutability triggers for {vendor}")
    for statement in statements:
        schema_editor.execute(statement)


def remove_append_only(
    schema_editor: BaseDatabaseSchemaEditor, table: str, *, no_replace: bool
) -> None:
    """What install_append_only installed on `table`, dropped (`no_replace`: it was given
    the table's keys)."""
    for statement in append_only_drops(
        schema_editor.connection.vendor, table, no_replace=no_replace
    ):
        schema_editor.execute(statement)


# --- row-level security (PostgreSQL) -----------------------------------------------------------

# The settings a request sets (receipts/rowsecurity.py): its tenant, the public receipt ids it
# may read, whether it is an auditor's.
TENANT = "app.tenant_id"
PUBLIC = "app.receipt_ids"
AUDITOR = "app.auditor"

POLICIES = ("receiptsite_tenant", "receiptsite_public", "receiptsite_auditor")


@dataclass(frozen=True)
class Scoped:
    """A tenant-scoped table: its name, its tenant column, and the column of the public id a
    public route reads one row by (None: no public reads)."""

    table: str
    tenant_column: str
    public_column: str | None = None


def setting(name: str) -> str:
    """A custom setting in SQL. Unset, and after a SET LOCAL ended, it reads NULL or '': both
    match nothing."""
    return f"nullif(current_setting('{name}', true), '')"


def policies(scoped: Scoped) -> list[str]:
    """The statements that (re)install the policies of one table."""
    table = scoped.table
    tenant = f"{scoped.tenant_column} = {setting(TENANT)}::bigint"
    statements = [f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY"]
    statements += [f"DROP POLICY IF EXISTS {name} ON {table}" for name in POLICIES]
    statements += [
        f"CREATE POLICY receiptsite_tenant ON {table} USING ({tenant}) WITH CHECK ({tenant})",
        f"CREATE POLICY receiptsite_auditor ON {table} FOR SELECT "
        f"USING (current_setting('{AUDITOR}', true) = 'on')",
    ]
    if scoped.public_column:
        statements.append(
            f"CREATE POLICY receiptsite_public ON {table} FOR SELECT USING "
            f"({scoped.public_column} = ANY (string_to_array({setting(PUBLIC)}, ',')::uuid[]))"
        )
    return statements


_TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname = 'public'
"""
_INSTALLED = """
SELECT c.relname, c.relrowsecurity, coalesce(array_agg(p.polname) FILTER (WHERE p.polname IS
NOT NULL), '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_policy p ON p.polrelid = c.oid
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') GROUP BY c.relname, c.relrowsecurity
"""


def tables(db: BaseDatabaseWrapper) -> set[str]:
    """The tables of the public schema (PostgreSQL)."""
    with db.cursor() as cursor:
        cursor.execute(_TABLES)
        return {name for (name,) in cursor.fetchall()}


def _expected(scoped: Scoped) -> set[str]:
    names = set(POLICIES)
    return names if scoped.public_column else names - {"receiptsite_public"}


def install_policies(db: BaseDatabaseWrapper, scoped: Iterable[Scoped]) -> None:
    """Install the policies of every table of `scoped` that exists and lacks them (PostgreSQL;
    nothing elsewhere). A table whose policies are in place is left alone: no DDL, which a
    transaction with pending deferred checks (a test's) would refuse."""
    if db.vendor != "postgresql":
        return
    with db.cursor() as cursor:
        cursor.execute(_INSTALLED)
        installed = {name: (enabled, set(names)) for name, enabled, names in cursor.fetchall()}
    missing = [
        each for each in scoped
        if each.table in installed and installed[each.table] != (True, _expected(each))
    ]
    if not missing:
        return
    with transaction.atomic(using=db.alias), db.cursor() as cursor:
        for each in missing:
            for statement in policies(each):
                cursor.execute(statement)


def remove_policies(db: BaseDatabaseWrapper, scoped: Iterable[Scoped]) -> None:
    """The policies of every table of `scoped` that exists, dropped, and row-level security
    off (PostgreSQL; nothing elsewhere)."""
    if db.vendor != "postgresql":
        return
    existing = tables(db)
    with transaction.atomic(using=db.alias), db.cursor() as cursor:
        for each in scoped:
            if each.table in existing:
                for name in POLICIES:
                    cursor.execute(f"DROP POLICY IF EXISTS {name} ON {each.table}")
                cursor.execute(f"ALTER TABLE {each.table} DISABLE ROW LEVEL SECURITY")


# --- the Auditors group ------------------------------------------------------------------------

AUDITORS = "Auditors"


def auditors_grant(
    apps: Any, app_label: str, codenames: Sequence[str], *, only: bool = False
) -> None:
    """Give the Auditors group (made if it is missing) these permissions of one app; `only`:
    these and no others. Each must exist: a permission missing is an error, not a grant of
    less."""
    # Permissions are normally made after migrations run; make them now so the group can hold
    # them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=AUDITORS)
    permissions = [
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
        for codename in codenames
    ]
    if only:
        group.permissions.set(permissions)
    else:
        group.permissions.add(*permissions)


def auditors_revoke(apps: Any, app_label: str, codenames: Sequence[str]) -> None:
    """Take these permissions of one app from the Auditors group, if there is one."""
    Permission = apps.get_model("auth", "Permission")
    group = apps.get_model("auth", "Group").objects.filter(name=AUDITORS).first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
        )

"""No insert may replace a row of an append-only table either.

On SQLite, `INSERT OR REPLACE` (and `REPLACE INTO`) removes the row it conflicts with without
firing the DELETE triggers of 0002 (SQLite fires them only under `PRAGMA recursive_triggers`,
a setting of each connection, not of the database). So every append-only table gets one more
trigger, BEFORE INSERT, that refuses an insert meeting an existing row on any of the table's
unique keys, whatever conflict clause the statement carries. A plain duplicate insert is
refused by it too (before its unique constraint would), and so is `INSERT OR IGNORE`, which
would change nothing anyway; the site's own code never inserts over a row. An upsert
(`INSERT ... ON CONFLICT DO UPDATE`) meets this trigger first and the UPDATE trigger after.

On PostgreSQL there is nothing to add: it has no replacing insert, and `INSERT ... ON CONFLICT
DO UPDATE` and `MERGE` fire the row triggers of 0002 (`ON CONFLICT DO NOTHING` changes nothing).

UNIQUE_KEYS lists every unique key of each table (tests/test_immutability.py checks the list
against the database's own), so a key added later without its line here fails the suite.
Lifting the guard for tests (tests/conftest.py) needs nothing more: tests change rows, they do
not insert over them.
"""

from __future__ import annotations

import importlib

from django.db import migrations

immutability = importlib.import_module("receiptsite.receipts.migrations.0002_immutability")

UNIQUE_KEYS: dict[str, list[tuple[str, ...]]] = {
    "receipts_receipt": [("id",), ("public_id",), ("tenant_id", "idempotency_key")],
    "receipts_logentry": [("index",), ("receipt_id",)],
    "receipts_lognode": [("key",)],
    "receipts_checkpoint": [("tree_size",)],
    "receipts_signedcheckpoint": [("id",)],
    "receipts_reviewdecision": [("id",), ("supersedes_id",)],
}


def trigger_name(table: str) -> str:
    return f"{table}_no_replace"


def sqlite_trigger(table: str, keys: list[tuple[str, ...]] | None = None) -> str:
    # `keys`: the table's unique keys, for a table added after this migration (default: its
    # line in UNIQUE_KEYS). Each key is an indexed lookup. A NULL in NEW makes its comparison NULL, not true, which
    # is how the unique indexes treat NULLs (and the partial index of idempotency keys).
    meets = " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} WHERE "
        + " AND ".join(f'"{column}" = NEW."{column}"' for column in key)
        + ")"
        for key in (keys if keys is not None else UNIQUE_KEYS[table])
    )
    return (
        f"CREATE TRIGGER {trigger_name(table)} BEFORE INSERT ON {table} WHEN {meets} BEGIN "
        f"SELECT RAISE(ABORT, 'receiptsite: an INSERT meeting an existing row of {table} is "
        f"refused: the table is append-only'); END;"
    )


def install_append_only(schema_editor, table: str, keys: list[tuple[str, ...]]) -> None:
    """For an append-only table added by a later migration: the triggers of 0002 and, on
    SQLite, this migration's (`keys`: every unique key of the table)."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = immutability.postgres_triggers(table)
    elif vendor == "sqlite":
        statements = [*immutability.sqlite_triggers(table), sqlite_trigger(table, keys)]
    else:
        raise RuntimeError(f"no immutability triggers for {vendor}")
    for statement in statements:
        schema_editor.execute(statement)


def remove_append_only(schema_editor, table: str) -> None:
    """What install_append_only installed on `table`, dropped."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};")
    else:
        for name in (f"{table}_no_update", f"{table}_no_delete", trigger_name(table)):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};")


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for table in UNIQUE_KEYS:
            schema_editor.execute(sqlite_trigger(table))
    elif vendor != "postgresql":
        raise RuntimeError(f"no immutability triggers for {vendor}")


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for table in UNIQUE_KEYS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {trigger_name(table)};")


class Migration(migrations.Migration):
    dependencies = [("receipts", "0004_signedcheckpoint")]
    operations = [migrations.RunPython(install, remove)]

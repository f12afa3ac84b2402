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

from django.db import migrations

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


def sqlite_trigger(table: str) -> str:
    # Each key is an indexed lookup. A NULL in NEW makes its comparison NULL, not true, which
    # is how the unique indexes treat NULLs (and the partial index of idempotency keys).
    meets = " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} WHERE "
        + " AND ".join(f'"{column}" = NEW."{column}"' for column in key)
        + ")"
        for key in UNIQUE_KEYS[table]
    )
    return (
        f"CREATE TRIGGER {trigger_name(table)} BEFORE INSERT ON {table} WHEN {meets} BEGIN "
        f"SELECT RAISE(ABORT, 'receiptsite: an INSERT meeting an existing row of {table} is "
        f"refused: the table is append-only'); END;"
    )


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

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

UNIQUE_KEYS lists every unique key of each table (tests/db/test_immutability.py checks the list
against the database's own), so a key added later without its line here fails the suite; an
append-only table added by a later migration gets the same trigger from
guards_v1.install_append_only, with its own keys. Lifting the guard for tests
(tests/conftest.py) needs nothing more: tests change rows, they do not insert over them.
"""

from __future__ import annotations

from django.db import migrations

from receiptsite.receipts import guards_v1

UNIQUE_KEYS: dict[str, list[tuple[str, ...]]] = {
    "receipts_receipt": [("id",), ("public_id",), ("tenant_id", "idempotency_key")],
    "receipts_logentry": [("index",), ("receipt_id",)],
    "receipts_lognode": [("key",)],
    "receipts_checkpoint": [("tree_size",)],
    "receipts_signedcheckpoint": [("id",)],
    "receipts_reviewdecision": [("id",), ("supersedes_id",)],
}


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for table, keys in UNIQUE_KEYS.items():
            schema_editor.execute(guards_v1.sqlite_no_replace_trigger(table, keys))
    elif vendor != "postgresql":
        raise RuntimeError(f"no immutability triggers for {vendor}")


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for table in UNIQUE_KEYS:
            name = guards_v1.no_replace_trigger_name(table)
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};")


class Migration(migrations.Migration):
    dependencies = [("receipts", "0004_signedcheckpoint")]
    operations = [migrations.RunPython(install, remove)]

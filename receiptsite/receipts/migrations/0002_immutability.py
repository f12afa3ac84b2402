"""The database itself refuses UPDATE, DELETE and TRUNCATE of receipts, the log's tables and
review decisions. The site's own code has no way around these triggers (receipts/guards_v1.py
holds their SQL).

The one maintenance path (for tests that must empty tables, never for the site): on PostgreSQL
`SET session_replication_role = replica`, which only a superuser may set; on SQLite, dropping
and recreating the triggers (see tests/conftest.py).
"""

from __future__ import annotations

from django.db import migrations

from receiptsite.receipts import guards_v1

APPEND_ONLY_TABLES = [
    "receipts_receipt",
    "receipts_logentry",
    "receipts_lognode",
    "receipts_checkpoint",
    "receipts_reviewdecision",
]


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(guards_v1.REFUSE_CHANGE_FUNCTION, params=None)
    for table in APPEND_ONLY_TABLES:
        guards_v1.install_append_only(schema_editor, table)


def remove(apps, schema_editor):
    for table in APPEND_ONLY_TABLES:
        guards_v1.remove_append_only(schema_editor, table, no_replace=False)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {guards_v1.REFUSE_CHANGE}();")


class Migration(migrations.Migration):
    dependencies = [("receipts", "0001_initial")]
    operations = [migrations.RunPython(install, remove)]

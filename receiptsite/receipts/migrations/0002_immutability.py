"""The database itself refuses UPDATE, DELETE and TRUNCATE of receipts, the log's tables and
review decisions. The site's own code has no way around these triggers.

The one maintenance path (for tests that must empty tables, never for the site): on PostgreSQL
`SET session_replication_role = replica`, which only a superuser may set; on SQLite, dropping
and recreating the triggers (see tests/conftest.py).
"""

from __future__ import annotations

from django.db import migrations

APPEND_ONLY_TABLES = [
    "receipts_receipt",
    "receipts_logentry",
    "receipts_lognode",
    "receipts_checkpoint",
    "receipts_reviewdecision",
]

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION receiptsite_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
"""


def sqlite_triggers(table: str) -> list[str]:
    return [
        f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} BEGIN "
        f"SELECT RAISE(ABORT, 'receiptsite: {op} on {table} is refused: "
        f"the table is append-only'); END;"
        for op in ("UPDATE", "DELETE")
    ]


def postgres_triggers(table: str) -> list[str]:
    return [
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION receiptsite_refuse_change();",
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION receiptsite_refuse_change();",
    ]


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        statements = [s for t in APPEND_ONLY_TABLES for s in postgres_triggers(t)]
    elif vendor == "sqlite":
        statements = [s for t in APPEND_ONLY_TABLES for s in sqlite_triggers(t)]
    else:
        raise RuntimeError(f"no immutability triggers for {vendor}")
    for statement in statements:
        schema_editor.execute(statement)


def remove(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in APPEND_ONLY_TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};")
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};")
        else:
            for op in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op};")
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS receiptsite_refuse_change();")


class Migration(migrations.Migration):
    dependencies = [("receipts", "0001_initial")]
    operations = [migrations.RunPython(install, remove)]

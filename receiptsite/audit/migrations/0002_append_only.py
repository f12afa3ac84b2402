"""The database refuses to change an API audit-log entry, and lets one go only to
`manage.py pruneauditlog`.

An entry may be deleted only while a prune permit is open, and only when it is older than the
permit's cutoff. The command writes the permit, deletes, and closes the permit (recording how
many entries went) in one transaction, so no permit is ever open outside it:

- a permit can be written only open, alone (no other open permit), and with a cutoff at least
  a day in the past, so that no permit can reach the entries of the last day;
- it can be changed only once, from open to closed, and never deleted (nor truncated): every
  prune leaves its record;
- on PostgreSQL the permit also carries the id of the transaction that wrote it, set by the
  database, and counts in that transaction only; only that transaction may close it, and a
  transaction that leaves it open is refused at COMMIT (a deferred constraint trigger). On
  SQLite, whose transactions have no id, a permit counts while it is open, and one is open
  only inside the command's own transaction (SQLite holds the single write lock until then).

Nothing else may delete: an UPDATE, a TRUNCATE, a replacing insert and an upsert are refused
as for receipts (receipts/migrations/0002 and 0005). The site's own code never writes a permit;
only the command does (tests/db/test_audit_log.py checks that no other module names it). As for
receipts, a superuser can still lift the guard (`SET session_replication_role = replica`);
the site's database role must not be one.
"""

from __future__ import annotations

from django.db import migrations

ENTRIES = "audit_auditentry"
PERMITS = "audit_prunepermit"

REFUSED = "receiptsite: {op} on {table} is refused: the table is append-only"
ENTRY_DELETE_REFUSED = (
    f"receiptsite: DELETE on {ENTRIES} is refused: the table is append-only "
    "(manage.py pruneauditlog removes entries older than AUDIT_LOG_DAYS)"
)
PERMIT_REFUSED = (
    f"receiptsite: this change of {PERMITS} is refused: a permit is written open, alone and "
    "with a cutoff at least a day old, closed once by its own transaction, and kept"
)

# --- SQLite ----------------------------------------------------------------------------------

_OPEN_PERMIT = f"SELECT 1 FROM {PERMITS} WHERE closed_at IS NULL"
# Django stores a datetime on SQLite as text, 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC, which
# compares as text with what strftime() makes.
_A_DAY_AGO = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 day')"

SQLITE = [
    f"CREATE TRIGGER {ENTRIES}_no_update BEFORE UPDATE ON {ENTRIES} BEGIN "
    f"SELECT RAISE(ABORT, '{REFUSED.format(op='UPDATE', table=ENTRIES)}'); END;",
    f"CREATE TRIGGER {ENTRIES}_no_delete BEFORE DELETE ON {ENTRIES} "
    f'WHEN NOT EXISTS ({_OPEN_PERMIT} AND OLD."at" < cutoff) BEGIN '
    f"SELECT RAISE(ABORT, '{ENTRY_DELETE_REFUSED}'); END;",
    # INSERT OR REPLACE removes the row it meets without firing DELETE triggers.
    f"CREATE TRIGGER {ENTRIES}_no_replace BEFORE INSERT ON {ENTRIES} "
    f"WHEN EXISTS (SELECT 1 FROM {ENTRIES} WHERE id = NEW.id) BEGIN "
    f"SELECT RAISE(ABORT, 'receiptsite: an INSERT meeting an existing row of {ENTRIES} is "
    f"refused: the table is append-only'); END;",
    f"CREATE TRIGGER {PERMITS}_on_insert BEFORE INSERT ON {PERMITS} "
    f"WHEN NEW.closed_at IS NOT NULL OR NEW.removed IS NOT NULL OR NEW.txid IS NOT NULL "
    f"OR NEW.cutoff > {_A_DAY_AGO} OR EXISTS ({_OPEN_PERMIT}) "
    f"OR EXISTS (SELECT 1 FROM {PERMITS} WHERE id = NEW.id) BEGIN "
    f"SELECT RAISE(ABORT, '{PERMIT_REFUSED}'); END;",
    f"CREATE TRIGGER {PERMITS}_on_update BEFORE UPDATE ON {PERMITS} "
    f"WHEN OLD.closed_at IS NOT NULL OR NEW.closed_at IS NULL OR NEW.removed IS NULL "
    f"OR NEW.id IS NOT OLD.id OR NEW.cutoff IS NOT OLD.cutoff "
    f"OR NEW.issued_at IS NOT OLD.issued_at OR NEW.txid IS NOT OLD.txid BEGIN "
    f"SELECT RAISE(ABORT, '{PERMIT_REFUSED}'); END;",
    f"CREATE TRIGGER {PERMITS}_no_delete BEFORE DELETE ON {PERMITS} BEGIN "
    f"SELECT RAISE(ABORT, '{REFUSED.format(op='DELETE', table=PERMITS)}'); END;",
]
SQLITE_TRIGGERS = [
    f"{ENTRIES}_no_update", f"{ENTRIES}_no_delete", f"{ENTRIES}_no_replace",
    f"{PERMITS}_on_insert", f"{PERMITS}_on_update", f"{PERMITS}_no_delete",
]

# --- PostgreSQL ------------------------------------------------------------------------------

POSTGRES = [
    f"""
CREATE FUNCTION receiptsite_audit_entry_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {PERMITS} WHERE txid = txid_current() AND closed_at IS NULL
               AND OLD."at" < cutoff) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '{ENTRY_DELETE_REFUSED}' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    f"""
CREATE FUNCTION receiptsite_audit_permit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.txid := txid_current();
        IF NEW.closed_at IS NULL AND NEW.removed IS NULL
           AND NEW.cutoff <= now() - interval '1 day'
           AND NOT EXISTS (SELECT 1 FROM {PERMITS} WHERE closed_at IS NULL) THEN
            RETURN NEW;
        END IF;
    ELSIF TG_OP = 'UPDATE' THEN
        IF OLD.closed_at IS NULL AND OLD.txid = txid_current()
           AND NEW.closed_at IS NOT NULL AND NEW.removed IS NOT NULL
           AND NEW.id = OLD.id AND NEW.cutoff = OLD.cutoff
           AND NEW.issued_at = OLD.issued_at AND NEW.txid = OLD.txid THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION '{PERMIT_REFUSED}' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    f"""
CREATE FUNCTION receiptsite_audit_permit_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {PERMITS} WHERE id = NEW.id AND closed_at IS NULL) THEN
        RAISE EXCEPTION 'receiptsite: a prune permit must be closed before its transaction '
            'commits' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END
$$;
""",
    # receiptsite_refuse_change() is receipts/migrations/0002's.
    f"CREATE TRIGGER {ENTRIES}_no_update BEFORE UPDATE ON {ENTRIES} "
    f"FOR EACH ROW EXECUTE FUNCTION receiptsite_refuse_change();",
    f"CREATE TRIGGER {ENTRIES}_no_delete BEFORE DELETE ON {ENTRIES} "
    f"FOR EACH ROW EXECUTE FUNCTION receiptsite_audit_entry_delete();",
    f"CREATE TRIGGER {ENTRIES}_no_truncate BEFORE TRUNCATE ON {ENTRIES} "
    f"FOR EACH STATEMENT EXECUTE FUNCTION receiptsite_refuse_change();",
    f"CREATE TRIGGER {PERMITS}_on_change BEFORE INSERT OR UPDATE ON {PERMITS} "
    f"FOR EACH ROW EXECUTE FUNCTION receiptsite_audit_permit_change();",
    f"CREATE TRIGGER {PERMITS}_no_delete BEFORE DELETE ON {PERMITS} "
    f"FOR EACH ROW EXECUTE FUNCTION receiptsite_refuse_change();",
    f"CREATE TRIGGER {PERMITS}_no_truncate BEFORE TRUNCATE ON {PERMITS} "
    f"FOR EACH STATEMENT EXECUTE FUNCTION receiptsite_refuse_change();",
    f"CREATE CONSTRAINT TRIGGER {PERMITS}_closed_at_commit AFTER INSERT ON {PERMITS} "
    f"DEFERRABLE INITIALLY DEFERRED "
    f"FOR EACH ROW EXECUTE FUNCTION receiptsite_audit_permit_closed();",
    # GET /api/audit-logs?receipt_id= and the admin's jump from a receipt: jsonb containment.
    f"CREATE INDEX audit_receipt_ids ON {ENTRIES} USING gin (receipt_ids jsonb_path_ops);",
]
POSTGRES_TRIGGERS = {
    ENTRIES: ["no_update", "no_delete", "no_truncate"],
    PERMITS: ["on_change", "no_delete", "no_truncate", "closed_at_commit"],
}


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = POSTGRES
    elif vendor == "sqlite":
        statements = SQLITE
    else:
        raise RuntimeError(f"no append-only triggers for {vendor}")
    for statement in statements:
        schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table, names in POSTGRES_TRIGGERS.items():
            for name in names:
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_{name} ON {table};")
        schema_editor.execute("DROP INDEX IF EXISTS audit_receipt_ids;")
        for function in ("entry_delete", "permit_change", "permit_closed"):
            schema_editor.execute(f"DROP FUNCTION IF EXISTS receiptsite_audit_{function}();")
    else:
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};")


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial"), ("receipts", "0002_immutability")]
    operations = [migrations.RunPython(install, remove)]

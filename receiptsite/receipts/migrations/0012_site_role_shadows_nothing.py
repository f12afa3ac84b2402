"""No table of the site can be stood in for: every PostgreSQL function the site installed names
its tables with their schema and runs with a fixed `search_path`.

The functions re-created here, under their names (the triggers that call them, and the site
role's EXECUTE on the erase function, stay as they are):

- receiptsite_refuse_change() (0002), which names no table, gets the fixed path too;
- receiptsite_receipt_change() and receiptsite_erase_withdrawn(bigint) (0009): the withdrawal
  the receipts' trigger looks for is `public.receipts_withdrawal`, and the erasure updates
  `public.receipts_receipt`. Before, a session's temporary table `receipts_withdrawal` holding a
  receipt's id and tenant let the erase function (whose path, `public`, left the temporary
  schema searched first) erase a receipt that had no withdrawal;
- the audit log's receiptsite_audit_entry_delete(), receiptsite_audit_permit_change() and
  receiptsite_audit_permit_closed() (audit 0002): the permits they read are
  `public.audit_prunepermit`, so a temporary `audit_prunepermit` holding an open permit lets no
  entry go.

What they decide is unchanged: the columns, values and messages are those of 0009 and audit
0002. The statements are written out below, frozen, in both directions (no migration imports
another or the application), and going back re-creates exactly what 0002, 0009 and audit 0002
installed. The site role cannot make a temporary table or any object at all any more
(receipts/rowsecurity.py's grants); this holds for the owner's sessions too.

SQLite needs nothing: an unqualified table name in a trigger that is not itself TEMP always
means the table of the trigger's own schema (`main`), whatever a TEMP table is called.
"""

# ruff: noqa: E501 (the statements are frozen as the builders wrote them, long lines included)

from __future__ import annotations

from django.db import migrations

# What this migration installs: every function with its tables named by schema and a fixed
# search_path.
FORWARDS = [
    """CREATE OR REPLACE FUNCTION receiptsite_refuse_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_receipt_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND EXISTS (SELECT 1 FROM public.receipts_withdrawal WHERE receipt_id = OLD.id AND tenant_id = OLD.tenant_id) AND NEW."id" IS NOT DISTINCT FROM OLD."id" AND NEW."public_id" IS NOT DISTINCT FROM OLD."public_id" AND NEW."tenant_id" IS NOT DISTINCT FROM OLD."tenant_id" AND NEW."api_key_id" IS NOT DISTINCT FROM OLD."api_key_id" AND NEW."recorded_at" IS NOT DISTINCT FROM OLD."recorded_at" AND NEW."output_hash" IS NOT DISTINCT FROM OLD."output_hash" AND NEW."signature" IS NOT DISTINCT FROM OLD."signature" AND NEW."signing_key_id" IS NOT DISTINCT FROM OLD."signing_key_id" AND NEW."workflow_id" = '' AND NEW."session_id" = '' AND NEW."phase" = '' AND NEW."subject_name" = '' AND NEW."outcome" IS NULL AND NEW."idempotency_key" IS NULL AND NEW."framework_name" = '' AND NEW."trace_id" = '' AND NEW."request_hash" = '' AND NEW."canonical_bytes" = ''::bytea THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'receiptsite: UPDATE on receipts_receipt is refused: the table is append-only (only the content of a withdrawn receipt may be erased)' USING ERRCODE = 'restrict_violation';
    END IF;
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_erase_withdrawn(bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
UPDATE public.receipts_receipt SET "workflow_id" = '', "session_id" = '', "phase" = '', "subject_name" = '', "outcome" = NULL, "idempotency_key" = NULL, "framework_name" = '', "trace_id" = '', "request_hash" = '', "canonical_bytes" = ''::bytea WHERE id = $1;
$$;
""",
    """REVOKE ALL ON FUNCTION receiptsite_erase_withdrawn(bigint) FROM PUBLIC;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_audit_entry_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.audit_prunepermit WHERE txid = txid_current() AND closed_at IS NULL
               AND OLD."at" < cutoff) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'receiptsite: DELETE on audit_auditentry is refused: the table is append-only (manage.py pruneauditlog removes entries older than AUDIT_LOG_DAYS)' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_audit_permit_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.txid := txid_current();
        IF NEW.closed_at IS NULL AND NEW.removed IS NULL
           AND NEW.cutoff <= now() - interval '1 day'
           AND NOT EXISTS (SELECT 1 FROM public.audit_prunepermit WHERE closed_at IS NULL) THEN
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
    RAISE EXCEPTION 'receiptsite: this change of audit_prunepermit is refused: a permit is written open, alone and with a cutoff at least a day old, closed once by its own transaction, and kept' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_audit_permit_closed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.audit_prunepermit WHERE id = NEW.id AND closed_at IS NULL) THEN
        RAISE EXCEPTION 'receiptsite: a prune permit must be closed before its transaction '
            'commits' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END
$$;
""",
]

# What going back restores: the definitions of 0002, 0009 and audit 0002 as they made them
# (CREATE OR REPLACE, which drops the fixed path too; audit 0002 created its functions
# without OR REPLACE).
BACKWARDS = [
    """CREATE OR REPLACE FUNCTION receiptsite_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_receipt_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND EXISTS (SELECT 1 FROM receipts_withdrawal WHERE receipt_id = OLD.id AND tenant_id = OLD.tenant_id) AND NEW."id" IS NOT DISTINCT FROM OLD."id" AND NEW."public_id" IS NOT DISTINCT FROM OLD."public_id" AND NEW."tenant_id" IS NOT DISTINCT FROM OLD."tenant_id" AND NEW."api_key_id" IS NOT DISTINCT FROM OLD."api_key_id" AND NEW."recorded_at" IS NOT DISTINCT FROM OLD."recorded_at" AND NEW."output_hash" IS NOT DISTINCT FROM OLD."output_hash" AND NEW."signature" IS NOT DISTINCT FROM OLD."signature" AND NEW."signing_key_id" IS NOT DISTINCT FROM OLD."signing_key_id" AND NEW."workflow_id" = '' AND NEW."session_id" = '' AND NEW."phase" = '' AND NEW."subject_name" = '' AND NEW."outcome" IS NULL AND NEW."idempotency_key" IS NULL AND NEW."framework_name" = '' AND NEW."trace_id" = '' AND NEW."request_hash" = '' AND NEW."canonical_bytes" = ''::bytea THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'receiptsite: UPDATE on receipts_receipt is refused: the table is append-only (only the content of a withdrawn receipt may be erased)' USING ERRCODE = 'restrict_violation';
    END IF;
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_erase_withdrawn(bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
    UPDATE receipts_receipt SET "workflow_id" = '', "session_id" = '', "phase" = '', "subject_name" = '', "outcome" = NULL, "idempotency_key" = NULL, "framework_name" = '', "trace_id" = '', "request_hash" = '', "canonical_bytes" = ''::bytea WHERE id = $1;
$$;
""",
    """REVOKE ALL ON FUNCTION receiptsite_erase_withdrawn(bigint) FROM PUBLIC;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_audit_entry_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM audit_prunepermit WHERE txid = txid_current() AND closed_at IS NULL
               AND OLD."at" < cutoff) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'receiptsite: DELETE on audit_auditentry is refused: the table is append-only (manage.py pruneauditlog removes entries older than AUDIT_LOG_DAYS)' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_audit_permit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.txid := txid_current();
        IF NEW.closed_at IS NULL AND NEW.removed IS NULL
           AND NEW.cutoff <= now() - interval '1 day'
           AND NOT EXISTS (SELECT 1 FROM audit_prunepermit WHERE closed_at IS NULL) THEN
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
    RAISE EXCEPTION 'receiptsite: this change of audit_prunepermit is refused: a permit is written open, alone and with a cutoff at least a day old, closed once by its own transaction, and kept' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    """CREATE OR REPLACE FUNCTION receiptsite_audit_permit_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM audit_prunepermit WHERE id = NEW.id AND closed_at IS NULL) THEN
        RAISE EXCEPTION 'receiptsite: a prune permit must be closed before its transaction '
            'commits' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END
$$;
""",
]


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in FORWARDS:
            schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in BACKWARDS:
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0011_decision_chain"),
        ("audit", "0003_auditors_see_the_audit_log"),
    ]

    operations = [migrations.RunPython(install, remove)]

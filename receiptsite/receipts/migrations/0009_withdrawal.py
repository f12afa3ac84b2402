"""Withdrawal: an append-only record per withdrawn receipt, and the one change of a receipt row
the database permits, erasing its content, only when that record exists.

- receipts_withdrawal is append-only as the tables of 0002 are (no UPDATE, DELETE, TRUNCATE,
  replacing insert or upsert), and holds at most one withdrawal per receipt.
- receipts_receipt's UPDATE trigger is replaced by one that lets an UPDATE through only when a
  withdrawal of the row exists, every column of KEPT is unchanged, and every column of ERASED
  holds its erased value (empty bytes, NULL, or ''); everything else is refused as before. The
  trigger names stay those of 0002, so that the tests' maintenance path
  (tests/conftest.lift_guard) is unchanged; DELETE and TRUNCATE stay refused.

KEPT and ERASED are every column of the receipt as it stands at this migration, as
withdrawal/withdrawals.py kept and erased them when it was written; they are literals here, so
that a later change of that code cannot change what this migration installs. A later migration
that adds a receipt column, or changes what a withdrawal keeps, installs this trigger again
(the tests check that it names every column, and that a withdrawal's erasure passes it).
"""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

from receiptsite.receipts import guards_v1

RECEIPTS = "receipts_receipt"
WITHDRAWALS = "receipts_withdrawal"
REFUSED = (
    f"receiptsite: UPDATE on {RECEIPTS} is refused: the table is append-only (only the "
    "content of a withdrawn receipt may be erased)"
)
AUDITOR_PERMISSIONS = ["add_withdrawal", "view_withdrawal"]
# The one function that erases a receipt's content (receipts/rowsecurity.py grants it).
ERASE = "receiptsite_erase_withdrawn(bigint)"
# The receipt's columns a withdrawal keeps, and those it erases with what each then holds.
KEPT = [
    "id",
    "public_id",
    "tenant_id",
    "api_key_id",
    "recorded_at",
    "output_hash",
    "signature",
    "signing_key_id",
]
ERASED: dict[str, str | bytes | None] = {
    "workflow_id": "",
    "session_id": "",
    "phase": "",
    "subject_name": "",
    "outcome": None,
    "idempotency_key": None,
    "framework_name": "",
    "trace_id": "",
    "request_hash": "",
    "canonical_bytes": b"",
}


def _erasure(vendor: str) -> str:
    """The condition under which an UPDATE of a receipt row is the permitted erasure."""
    kept = [f'NEW."{column}" IS NOT DISTINCT FROM OLD."{column}"' for column in KEPT]
    erased = []
    for name, value in ERASED.items():
        column = f'NEW."{name}"'
        if value is None:
            erased.append(f"{column} IS NULL")
        elif isinstance(value, bytes):
            erased.append(f"{column} = " + ("X''" if vendor == "sqlite" else "''::bytea"))
        else:
            erased.append(f"{column} = ''")
    exists = (
        f"EXISTS (SELECT 1 FROM {WITHDRAWALS} "
        f"WHERE receipt_id = OLD.id AND tenant_id = OLD.tenant_id)"
    )
    if vendor == "sqlite":
        # SQLite's IS compares as = does, and a NULL makes it false, not NULL: a WHEN that
        # came out NULL would not fire the refusal.
        kept = [k.replace("IS NOT DISTINCT FROM", "IS") for k in kept]
        erased = [e.replace(" = ", " IS ") for e in erased]
    return " AND ".join([exists, *kept, *erased])


def _postgres_function(condition: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION receiptsite_receipt_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND {condition} THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION '{REFUSED}' USING ERRCODE = 'restrict_violation';
    END IF;
    RAISE EXCEPTION 'receiptsite: % on % is refused: the table is append-only',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
"""


def _postgres_erase_function() -> list[str]:
    """The one way the site's database role erases a receipt: as the owner (SECURITY
    DEFINER), so that the role itself holds no UPDATE on receipts; the trigger above still
    decides. Owner only by default: rowsecurity.grants() lets the site role EXECUTE it."""
    sets = []
    for name, value in ERASED.items():
        literal = "NULL" if value is None else "''::bytea" if isinstance(value, bytes) else "''"
        sets.append(f'"{name}" = {literal}')
    return [
        f"""
CREATE OR REPLACE FUNCTION {ERASE} RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
    UPDATE {RECEIPTS} SET {", ".join(sets)} WHERE id = $1;
$$;
""",
        f"REVOKE ALL ON FUNCTION {ERASE} FROM PUBLIC;",
    ]


def _sqlite_update_trigger(condition: str) -> str:
    return (
        f"CREATE TRIGGER {RECEIPTS}_no_update BEFORE UPDATE ON {RECEIPTS} "
        f"WHEN NOT ({condition}) BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END;"
    )


def _sqlite_withdrawal_triggers() -> list[str]:
    return [
        *guards_v1.sqlite_triggers(WITHDRAWALS),
        f"CREATE TRIGGER {WITHDRAWALS}_no_replace BEFORE INSERT ON {WITHDRAWALS} WHEN "
        f"EXISTS (SELECT 1 FROM {WITHDRAWALS} WHERE id = NEW.id) "
        f"OR EXISTS (SELECT 1 FROM {WITHDRAWALS} WHERE receipt_id = NEW.receipt_id) "
        f"OR EXISTS (SELECT 1 FROM {WITHDRAWALS} WHERE receipt_public_id = NEW.receipt_public_id) "
        f"BEGIN SELECT RAISE(ABORT, 'receiptsite: an INSERT meeting an existing row of "
        f"{WITHDRAWALS} is refused: the table is append-only'); END;",
    ]


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # receiptsite_refuse_change() (0002) guards the withdrawals as every append-only table;
        # the receipts' row trigger gets a function of its own, the TRUNCATE trigger stays.
        statements = [
            *guards_v1.postgres_triggers(WITHDRAWALS),
            _postgres_function(_erasure(vendor)),
            f"DROP TRIGGER {RECEIPTS}_append_only ON {RECEIPTS};",
            f"CREATE TRIGGER {RECEIPTS}_append_only BEFORE UPDATE OR DELETE ON {RECEIPTS} "
            f"FOR EACH ROW EXECUTE FUNCTION receiptsite_receipt_change();",
            *_postgres_erase_function(),
        ]
    elif vendor == "sqlite":
        statements = [
            *_sqlite_withdrawal_triggers(),
            f"DROP TRIGGER {RECEIPTS}_no_update;",
            _sqlite_update_trigger(_erasure(vendor)),
        ]
    else:
        raise RuntimeError(f"no immutability triggers for {vendor}")
    for statement in statements:
        schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = [
            *guards_v1.append_only_drops(vendor, WITHDRAWALS, no_replace=True),
            f"DROP TRIGGER {RECEIPTS}_append_only ON {RECEIPTS};",
            *guards_v1.postgres_triggers(RECEIPTS)[:1],
            "DROP FUNCTION IF EXISTS receiptsite_receipt_change();",
            f"DROP FUNCTION IF EXISTS {ERASE};",
        ]
    else:
        statements = [
            *guards_v1.append_only_drops(vendor, WITHDRAWALS, no_replace=True),
            f"DROP TRIGGER {RECEIPTS}_no_update;",
            guards_v1.sqlite_triggers(RECEIPTS)[0],
        ]
    for statement in statements:
        schema_editor.execute(statement, params=None)


def grant_auditors(apps, schema_editor):
    """Auditors may withdraw a receipt from the admin, and see the withdrawals."""
    guards_v1.auditors_grant(apps, "receipts", AUDITOR_PERMISSIONS)


def revoke_auditors(apps, schema_editor):
    guards_v1.auditors_revoke(apps, "receipts", AUDITOR_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0008_row_level_security"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Withdrawal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("receipt_public_id", models.UUIDField(unique=True)),
                ("withdrawn_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("personal_data", "personal data"),
                            ("secret", "a secret"),
                            ("legal", "a legal reason"),
                            ("other", "another reason"),
                        ],
                        max_length=20,
                    ),
                ),
                ("note", models.CharField(blank=True, max_length=500)),
                (
                    "withdrawn_by",
                    models.CharField(
                        choices=[("publisher", "the publisher"), ("auditor", "an auditor")],
                        max_length=10,
                    ),
                ),
                (
                    "api_key",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="receipts.apikey",
                    ),
                ),
                (
                    "auditor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "receipt",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="withdrawal",
                        to="receipts.receipt",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="receipts.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("api_key__isnull", False),
                                ("auditor__isnull", True),
                                ("withdrawn_by", "publisher"),
                            ),
                            models.Q(
                                ("api_key__isnull", True),
                                ("auditor__isnull", False),
                                ("withdrawn_by", "auditor"),
                            ),
                            _connector="OR",
                        ),
                        name="withdrawal_by_publisher_or_auditor",
                    )
                ],
            },
        ),
        migrations.RunPython(install, remove),
        migrations.RunPython(grant_auditors, revoke_auditors),
    ]

"""Failed authentications of tenant routes, recorded without the key: append-only as the API
audit log is (0002), pruned with it by `manage.py pruneauditlog` under the same permit, and
readable by auditors in the admin.

The database refuses an UPDATE, a TRUNCATE and an insert that replaces a row, and lets a row
go only inside the transaction of an open prune permit whose cutoff it is older than (0002's
rule, for this table). On PostgreSQL the UPDATE and TRUNCATE triggers call
receiptsite_refuse_change(), so the site role's grants (receipts/rowsecurity.py, which finds
the append-only tables by that function) give it SELECT and INSERT only; the DELETE trigger's
function names its table with its schema and runs with a fixed search_path, as every function
of the site does since receipts 0012, so that no temporary table can stand in for a permit.
"""

from __future__ import annotations

from django.db import migrations, models

from receiptsite.receipts import guards_v1

TABLE = "audit_failedauthentication"
PERMITS = "audit_prunepermit"
PERMISSIONS = ["view_failedauthentication"]

DELETE_REFUSED = (
    f"receiptsite: DELETE on {TABLE} is refused: the table is append-only "
    "(manage.py pruneauditlog removes rows older than AUDIT_LOG_DAYS)"
)

# --- SQLite ----------------------------------------------------------------------------------

SQLITE = [
    f"CREATE TRIGGER {TABLE}_no_update BEFORE UPDATE ON {TABLE} BEGIN "
    f"SELECT RAISE(ABORT, 'receiptsite: UPDATE on {TABLE} is refused: the table is "
    f"append-only'); END;",
    f"CREATE TRIGGER {TABLE}_no_delete BEFORE DELETE ON {TABLE} "
    f"WHEN NOT EXISTS (SELECT 1 FROM {PERMITS} WHERE closed_at IS NULL "
    f'AND OLD."at" < cutoff) BEGIN '
    f"SELECT RAISE(ABORT, '{DELETE_REFUSED}'); END;",
    # INSERT OR REPLACE removes the row it meets without firing DELETE triggers.
    f"CREATE TRIGGER {TABLE}_no_replace BEFORE INSERT ON {TABLE} "
    f"WHEN EXISTS (SELECT 1 FROM {TABLE} WHERE id = NEW.id) BEGIN "
    f"SELECT RAISE(ABORT, 'receiptsite: an INSERT meeting an existing row of {TABLE} is "
    f"refused: the table is append-only'); END;",
]
SQLITE_TRIGGERS = [f"{TABLE}_no_update", f"{TABLE}_no_delete", f"{TABLE}_no_replace"]

# --- PostgreSQL ------------------------------------------------------------------------------

DELETE_FUNCTION = "receiptsite_failed_authentication_delete()"

POSTGRES = [
    f"""
CREATE FUNCTION {DELETE_FUNCTION} RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.{PERMITS} WHERE txid = txid_current()
               AND closed_at IS NULL AND OLD."at" < cutoff) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '{DELETE_REFUSED}' USING ERRCODE = 'restrict_violation';
END
$$;
""",
    f"CREATE TRIGGER {TABLE}_no_update BEFORE UPDATE ON {TABLE} "
    f"FOR EACH ROW EXECUTE FUNCTION {guards_v1.REFUSE_CHANGE}();",
    f"CREATE TRIGGER {TABLE}_no_delete BEFORE DELETE ON {TABLE} "
    f"FOR EACH ROW EXECUTE FUNCTION {DELETE_FUNCTION};",
    f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {guards_v1.REFUSE_CHANGE}();",
]
POSTGRES_TRIGGERS = ["no_update", "no_delete", "no_truncate"]


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
        for name in POSTGRES_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_{name} ON {TABLE};")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {DELETE_FUNCTION};")
    else:
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};")


def grant(apps, schema_editor):
    guards_v1.auditors_grant(apps, "audit", PERMISSIONS)


def revoke(apps, schema_editor):
    guards_v1.auditors_revoke(apps, "audit", PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_auditors_see_the_audit_log")]

    operations = [
        migrations.CreateModel(
            name="FailedAuthentication",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "at",
                    models.DateTimeField(help_text="When the request reached the route (UTC)."),
                ),
                (
                    "request_id",
                    models.CharField(help_text="The request's X-Request-ID.", max_length=128),
                ),
                (
                    "client_address",
                    models.CharField(
                        help_text="The client's address, as the rate limits see it.",
                        max_length=100,
                    ),
                ),
                ("method", models.CharField(max_length=10)),
                (
                    "path",
                    models.CharField(
                        help_text="The path, any receipt id cut short.", max_length=200
                    ),
                ),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("missing", "no key"),
                            ("malformed", "not a bearer API key"),
                            ("unknown", "no such key, or not its secret"),
                            ("revoked", "a revoked key"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "key_prefix",
                    models.CharField(
                        blank=True,
                        help_text=(
                            "The public prefix of the stored key the request named, if it "
                            "named one."
                        ),
                        max_length=32,
                    ),
                ),
            ],
            options={
                "verbose_name": "failed authentication",
                "indexes": [
                    models.Index(fields=["at"], name="failedauth_at"),
                    models.Index(fields=["client_address", "at"], name="failedauth_address"),
                ],
            },
        ),
        migrations.RunPython(install, remove),
        migrations.RunPython(grant, revoke),
    ]

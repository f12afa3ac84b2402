"""Decisions survive a key compromise: the vouches of the key that takes over (issue 17, item 7).

`compromisekey` has the new key sign again the canonical bytes of every decision of the
auditors' record whose standing rested on the compromised key and that still checks out
(review/chain.py, `vouch`). Each such signature is a DecisionVouch row, append-only like the
record itself: 0002's triggers (no UPDATE, DELETE, TRUNCATE) and, on SQLite, 0005's kind of
trigger against an insert that replaces a row, from the frozen guards_v1. Its `signed_at` is
the database's clock, as 0013 made it for the receipts' appended signatures: on PostgreSQL
0013's trigger function (`receiptsite_stamp_signed_at`, with its fixed search_path) stamps it;
on SQLite a trigger refuses a row whose `signed_at` is not the DEFAULT. The stamp's trigger is
made before the append-only guards, so that SQLite fires the guards first (it fires the trigger
made last first), as 0013 does.

The table is not tenant-scoped; the site role's grants follow from its being append-only
(receipts/rowsecurity.py: SELECT and INSERT). The admin shows vouches only inside a decision's
record entry, so the Auditors group needs no permission of its own for them.
"""

from __future__ import annotations

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from receiptsite.receipts import guards_v1

TABLE = "receipts_decisionvouch"
UNIQUE_KEYS: list[tuple[str, ...]] = [("id",)]
# 0013's trigger function on PostgreSQL, and what Django's Now() is on SQLite.
STAMP = "receiptsite_stamp_signed_at"
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
STAMP_TRIGGER = f"{TABLE}_stamp_signed_at"


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(
            f"CREATE TRIGGER {STAMP_TRIGGER} BEFORE INSERT ON public.{TABLE} "
            f"FOR EACH ROW EXECUTE FUNCTION public.{STAMP}();",
            params=None,
        )
    elif vendor == "sqlite":
        schema_editor.execute(
            f"CREATE TRIGGER {STAMP_TRIGGER} BEFORE INSERT ON {TABLE} "
            f"WHEN NEW.signed_at IS NOT {SQLITE_NOW} "
            f"BEGIN SELECT RAISE(ABORT, 'receiptsite: an INSERT into {TABLE} with a signed_at "
            f"of its own is refused: the database stamps the time'); END;",
            params=None,
        )
    else:
        raise RuntimeError(f"no signing-time stamp for {vendor}")
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)


def remove(apps, schema_editor):
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)
    on = f" ON public.{TABLE}" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {STAMP_TRIGGER}{on};", params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0016_key_history"),
    ]

    operations = [
        migrations.CreateModel(
            name="DecisionVouch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("signature", models.BinaryField(max_length=64)),
                (
                    "signed_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
                (
                    "link",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="vouches",
                        to="receipts.decisionlink",
                    ),
                ),
                (
                    "signing_key",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="receipts.signingkey",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["link", "id"], name="decisionvouch_link")],
            },
        ),
        migrations.RunPython(install, remove),
    ]

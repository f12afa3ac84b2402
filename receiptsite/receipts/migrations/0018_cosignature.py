"""Witnesses' cosignatures of checkpoints (issue 18): one row per cosignature line a witness
answered, stored once it verified under the policy's key (ledger/witnesses.py). Append-only
like the log: 0002's triggers (no UPDATE, DELETE, TRUNCATE) and, on SQLite, 0005's kind of
trigger against an insert that replaces a row, from the frozen guards_v1. Not tenant-scoped
(the log is public); the site role's grants follow from its being append-only
(receipts/rowsecurity.py: SELECT and INSERT)."""

from __future__ import annotations

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from receiptsite.receipts import guards_v1

TABLE = "receipts_cosignature"
UNIQUE_KEYS: list[tuple[str, ...]] = [("id",)]


def install(apps, schema_editor):
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)


def remove(apps, schema_editor):
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0017_decisions_survive_compromise"),
    ]

    operations = [
        migrations.CreateModel(
            name="Cosignature",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tree_size", models.BigIntegerField()),
                ("witness_key", models.CharField(max_length=255)),
                ("line", models.TextField()),
                ("cosigned_at", models.DateTimeField()),
                (
                    "received_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
                (
                    "checkpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="receipts.signedcheckpoint",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["tree_size", "id"], name="cosignature_size")],
            },
        ),
        migrations.RunPython(install, remove),
    ]

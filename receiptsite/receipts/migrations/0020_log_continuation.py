"""The end of a log and its continuation under a new origin (issue 22): one row per
`manage.py continuelog`, with its signed statement (models.LogContinuation). Append-only like
the log: 0002's triggers and, on SQLite, 0005's kind of trigger against an insert that
replaces a row, from the frozen guards_v1. The site role may only read it
(receipts/rowsecurity.py, READ_ONLY_TABLES): the owner runs `continuelog`."""

from __future__ import annotations

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from receiptsite.receipts import guards_v1

TABLE = "receipts_logcontinuation"
UNIQUE_KEYS: list[tuple[str, ...]] = [("id",)]


def install(apps, schema_editor):
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)


def remove(apps, schema_editor):
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0019_review_queue"),
    ]

    operations = [
        migrations.CreateModel(
            name="LogContinuation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("old_origin", models.CharField(max_length=255)),
                ("signed_size", models.BigIntegerField()),
                ("signed_root", models.BinaryField(max_length=32)),
                ("tree_size", models.BigIntegerField()),
                ("root_hash", models.BinaryField(max_length=32)),
                ("new_origin", models.CharField(max_length=255)),
                ("statement", models.TextField()),
                (
                    "recorded_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
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
        ),
        migrations.RunPython(install, remove),
    ]

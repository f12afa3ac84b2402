"""Key compromise (`manage.py compromisekey`): when a signing key was compromised, and the
signatures the key that replaced it appended to the receipts provably logged before then.

The appended signatures are append-only like the log: the triggers of 0002 (no UPDATE,
DELETE, TRUNCATE) and, on SQLite, the one of 0005 (no insert that replaces a row). A key
marked compromised before this migration (by the old `signingkeys --mark-compromised`) counts
as compromised since it was retired: nothing it signed is shown to predate that.
"""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from receiptsite.receipts import guards_v1

TABLE = "receipts_appendedsignature"
UNIQUE_KEYS = [("id",)]


def install(apps, schema_editor):
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)


def remove(apps, schema_editor):
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)


def date_old_compromises(apps, schema_editor):
    SigningKey = apps.get_model("receipts", "SigningKey")
    for key in SigningKey.objects.filter(status="compromised", compromised_at__isnull=True):
        key.compromised_at = key.retired_at or key.created_at
        key.save(update_fields=["compromised_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0009_withdrawal"),
    ]

    operations = [
        migrations.AddField(
            model_name="signingkey",
            name="compromised_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(date_old_compromises, migrations.RunPython.noop),
        migrations.CreateModel(
            name="AppendedSignature",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("signature", models.BinaryField(max_length=64)),
                ("signed_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "evidence",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="receipts.signedcheckpoint",
                    ),
                ),
                (
                    "receipt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="receipts.receipt",
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
                "indexes": [
                    models.Index(fields=["receipt", "id"], name="appendedsignature_receipt")
                ],
            },
        ),
        migrations.RunPython(install, remove),
    ]

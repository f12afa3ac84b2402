"""The signed checkpoints, stored when a write path signs a tree head (log.sign_head): reads
serve the latest and never sign. Append-only like the log's other tables, with the same
triggers (see 0002_immutability)."""

import importlib

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

immutability = importlib.import_module("receiptsite.receipts.migrations.0002_immutability")

TABLE = "receipts_signedcheckpoint"


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = immutability.postgres_triggers(TABLE)
    elif vendor == "sqlite":
        statements = immutability.sqlite_triggers(TABLE)
    else:
        raise RuntimeError(f"no immutability triggers for {vendor}")
    for statement in statements:
        schema_editor.execute(statement)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE};")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};")
    else:
        for op in ("update", "delete"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_{op};")


class Migration(migrations.Migration):

    dependencies = [
        ('receipts', '0003_auditors_group'),
    ]

    operations = [
        migrations.CreateModel(
            name='SignedCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('tree_size', models.BigIntegerField()),
                ('note', models.TextField()),
                ('signed_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('signing_key', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='receipts.signingkey')),
            ],
            options={
                'indexes': [models.Index(fields=['tree_size', 'id'], name='signedcheckpoint_latest')],
            },
        ),
        migrations.RunPython(install, remove),
    ]

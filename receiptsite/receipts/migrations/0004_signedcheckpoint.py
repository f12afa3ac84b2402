"""The signed checkpoints, stored when a write path signs a tree head (log.sign_head): reads
serve the latest and never sign. Append-only like the log's other tables, with the same
triggers (see 0002_immutability)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from receiptsite.receipts import guards_v1

TABLE = "receipts_signedcheckpoint"


def install(apps, schema_editor):
    # Its trigger against a replacing insert on SQLite came with 0005.
    guards_v1.install_append_only(schema_editor, TABLE)


def remove(apps, schema_editor):
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=False)


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

"""The API audit log's tables; 0002 makes them append-only."""

import django.db.models.deletion
from django.db import migrations, models

import receiptsite.audit.models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("receipts", "0008_row_level_security"),
    ]

    operations = [
        migrations.CreateModel(
            name="PrunePermit",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("cutoff", models.DateTimeField()),
                ("issued_at", models.DateTimeField()),
                ("txid", models.BigIntegerField(blank=True, editable=False, null=True)),
                ("closed_at", models.DateTimeField(blank=True, null=True)),
                ("removed", models.PositiveIntegerField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "audit-log prune",
            },
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(help_text="When the request reached the route (UTC).")),
                (
                    "request_id",
                    models.CharField(help_text="The request's X-Request-ID.", max_length=128),
                ),
                (
                    "key_prefix",
                    models.CharField(help_text="The API key's public prefix.", max_length=32),
                ),
                ("method", models.CharField(max_length=10)),
                ("route", models.CharField(max_length=200)),
                ("status", models.PositiveSmallIntegerField()),
                ("problem_type", models.CharField(blank=True, max_length=300, null=True)),
                ("receipt_ids", receiptsite.audit.models.ReceiptIdsField(blank=True, default=list)),
                ("duration_ms", models.PositiveIntegerField()),
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
                "verbose_name": "API audit-log entry",
                "verbose_name_plural": "API audit log",
                "indexes": [
                    models.Index(fields=["tenant", "-id"], name="audit_tenant_newest"),
                    models.Index(fields=["tenant", "request_id"], name="audit_tenant_request"),
                    models.Index(fields=["at"], name="audit_at"),
                ],
            },
        ),
    ]

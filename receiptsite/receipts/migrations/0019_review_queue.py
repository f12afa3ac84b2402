"""The auditors' review queue (issue 19): one row per receipt that an auditor was assigned or
claimed, with whom it is assigned to and who holds it for review until when
(models.ReviewAssignment, review/queue.py).

Workflow state, not evidence, so unlike the decisions it is not append-only: a claim, its
renewal and its release rewrite the row, and no trigger guards it. The site role's grants
follow from that (receipts/rowsecurity.py: SELECT, INSERT, UPDATE, DELETE). Not tenant-scoped:
only auditors read it, and they read every tenant. The Auditors group may view the queue and
change its rows (claim, release, assign)."""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from receiptsite.receipts import guards_v1

AUDITOR_PERMISSIONS = ["view_reviewassignment", "change_reviewassignment"]


def grant_auditors(apps, schema_editor):
    guards_v1.auditors_grant(apps, "receipts", AUDITOR_PERMISSIONS)


def revoke_auditors(apps, schema_editor):
    guards_v1.auditors_revoke(apps, "receipts", AUDITOR_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0018_cosignature"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ReviewAssignment",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("assigned_at", models.DateTimeField(blank=True, null=True)),
                ("held_since", models.DateTimeField(blank=True, null=True)),
                ("held_until", models.DateTimeField(blank=True, null=True)),
                (
                    "assigned_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "assigned_to",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "held_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "receipt",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="assignment",
                        to="receipts.receipt",
                    ),
                ),
            ],
            options={
                "verbose_name": "review queue",
                "verbose_name_plural": "review queue",
            },
        ),
        migrations.RunPython(grant_auditors, revoke_auditors),
    ]

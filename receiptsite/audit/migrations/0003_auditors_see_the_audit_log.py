"""Auditors read the API audit log (and the record of each prune) in the admin; nobody may
change or delete either there (the database refuses it anyway)."""

from __future__ import annotations

from django.db import migrations

from receiptsite.receipts import guards_v1

PERMISSIONS = ["view_auditentry", "view_prunepermit"]


def grant(apps, schema_editor):
    guards_v1.auditors_grant(apps, "audit", PERMISSIONS)


def revoke(apps, schema_editor):
    guards_v1.auditors_revoke(apps, "audit", PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only"), ("receipts", "0003_auditors_group")]
    operations = [migrations.RunPython(grant, revoke)]

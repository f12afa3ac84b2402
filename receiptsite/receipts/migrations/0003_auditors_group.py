"""The "Auditors" group, with exactly what auditors need: read receipts and decisions, and
add decisions. Nobody gets change or delete on either (the database refuses them anyway)."""

from __future__ import annotations

from django.db import migrations

from receiptsite.receipts import guards_v1

AUDITOR_PERMISSIONS = [
    "view_receipt",
    "view_reviewdecision",
    "add_reviewdecision",
    "view_tenant",
]


def create_group(apps, schema_editor):
    guards_v1.auditors_grant(apps, "receipts", AUDITOR_PERMISSIONS, only=True)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=guards_v1.AUDITORS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0002_immutability"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_group, remove_group)]

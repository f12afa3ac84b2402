"""The "Auditors" group, with exactly what auditors need: read receipts and decisions, and
add decisions. Nobody gets change or delete on either (the database refuses them anyway)."""

from __future__ import annotations

from django.contrib.auth.management import create_permissions
from django.db import migrations

AUDITOR_PERMISSIONS = [
    ("receipts", "view_receipt"),
    ("receipts", "view_reviewdecision"),
    ("receipts", "add_reviewdecision"),
    ("receipts", "view_tenant"),
]


def create_group(apps, schema_editor):
    # Permissions are normally made after migrations run; make them now so the group can
    # hold them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="Auditors")
    group.permissions.set(
        [
            Permission.objects.get(content_type__app_label=app, codename=codename)
            for app, codename in AUDITOR_PERMISSIONS
        ]
    )


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="Auditors").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0002_immutability"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_group, remove_group)]

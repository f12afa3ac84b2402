"""Auditors read the API audit log (and the record of each prune) in the admin; nobody may
change or delete either there (the database refuses it anyway)."""

from __future__ import annotations

from django.contrib.auth.management import create_permissions
from django.db import migrations

PERMISSIONS = [("audit", "view_auditentry"), ("audit", "view_prunepermit")]


def grant(apps, schema_editor):
    # Permissions are normally made after migrations run; make them now, as
    # receipts/migrations/0003 does, so the group can hold them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="Auditors")
    group.permissions.add(
        *(
            Permission.objects.get(content_type__app_label=app, codename=codename)
            for app, codename in PERMISSIONS
        )
    )


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    group = apps.get_model("auth", "Group").objects.filter(name="Auditors").first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.filter(
                content_type__app_label="audit",
                codename__in=[codename for _, codename in PERMISSIONS],
            )
        )


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only"), ("receipts", "0003_auditors_group")]
    operations = [migrations.RunPython(grant, revoke)]

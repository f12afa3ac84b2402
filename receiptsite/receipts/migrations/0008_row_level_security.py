"""PostgreSQL row-level security: tenant isolation enforced by the database too.

This migration installs the policies (receipts/guards_v1.py holds their SQL) on the one
tenant-scoped table there is at this point. receiptsite/receipts/rowsecurity.py lists every
scoped table (SCOPED) and `migrate` re-applies that list afterwards (post_migrate), so a table
created later, or added to the list later, is covered by the next `migrate`. The policies bind
only a role that neither owns the tables nor is a superuser (README, "Database roles"); nothing
changes on SQLite, which has no row-level security.
"""

from __future__ import annotations

from django.db import migrations

from receiptsite.receipts import guards_v1

SCOPED = [guards_v1.Scoped("receipts_receipt", "tenant_id", public_column="public_id")]


def install(apps, schema_editor):
    guards_v1.install_policies(schema_editor.connection, SCOPED)


def remove(apps, schema_editor):
    guards_v1.remove_policies(schema_editor.connection, SCOPED)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0007_listing"),
    ]

    operations = [migrations.RunPython(install, remove)]

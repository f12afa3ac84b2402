"""PostgreSQL row-level security: tenant isolation enforced by the database too.

The policies are declared once, in receiptsite/receipts/rowsecurity.py (SCOPED, and what each
policy matches); this migration installs them on the tables listed there, and `migrate`
re-applies the list afterwards (post_migrate), so a table added to it later is covered by the
next `migrate`. They bind only a role that neither owns the tables nor is a superuser (README,
"Database roles"); nothing changes on SQLite, which has no row-level security.
"""

from __future__ import annotations

from django.db import migrations

from receiptsite.receipts import rowsecurity


def install(apps, schema_editor):
    rowsecurity.install(schema_editor.connection)


def remove(apps, schema_editor):
    rowsecurity.remove(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0007_listing"),
    ]

    operations = [migrations.RunPython(install, remove)]

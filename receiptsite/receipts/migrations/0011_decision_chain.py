"""Placeholder, filled by the work on issue 10 (kept so that the migration numbers are fixed)."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0010_key_compromise"),
    ]

    operations: list[migrations.operations.base.Operation] = []

"""Placeholder, filled by the work on issue 10 (kept so that the migration numbers are fixed)."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0008_row_level_security"),
    ]

    operations: list[migrations.operations.base.Operation] = []

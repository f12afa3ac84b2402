from __future__ import annotations

from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receiptsite.receipts"
    label = "receipts"
    verbose_name = "Receipts"

from __future__ import annotations

from django.apps import AppConfig


class WithdrawalConfig(AppConfig):
    """Withdrawal of a receipt: an app for its admin; withdrawals are models of the receipts
    app."""

    name = "receiptsite.withdrawal"
    label = "withdrawal"
    verbose_name = "Withdrawal"

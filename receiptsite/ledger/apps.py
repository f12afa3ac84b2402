from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    """The transparency log, the signing keys and what holds the site to them: an app for its
    management commands (checklog, compromisekey, signcheckpoint, signingkeys); its records
    are models of the receipts app."""

    name = "receiptsite.ledger"
    label = "ledger"
    verbose_name = "Ledger"

"""Sign the current tree head: after a key rotation, or to bring the checkpoint up to date."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from receiptsite.ledger import keyring, log
from receiptsite.problems import Problem


class Command(BaseCommand):
    help = (
        "Record the key in SIGNING_KEY_FILE as the active signing key (retiring the old one) "
        "and sign the current tree head with it, unless the latest checkpoint already is that. "
        "Run it after rotating the key and restarting; `migrate` does the same. A retired key "
        "is never made active again: with SIGNING_KEY_FILE naming one, it refuses and names "
        "the active key."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # First, and a read: a key that may not sign (retired, compromised) is refused in
            # one line before anything is written or logged.
            keyring.check_usable()
            log.sign_head()
            signed = log.published()
            kid = keyring.active_key().kid
        except Problem as error:
            raise CommandError(error.detail) from None
        self.stdout.write(
            f"The latest checkpoint is for the tree of {signed.size} leaves, signed by {kid}."
        )

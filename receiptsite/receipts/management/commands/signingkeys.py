from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from receiptsite.problems import Problem
from receiptsite.receipts import keyring, log
from receiptsite.receipts.models import SigningKey, format_timestamp


class Command(BaseCommand):
    help = (
        "List the site's signing keys and their status, as recorded. Rotating is pointing "
        "SIGNING_KEY_FILE at a new key, restarting, and running `signcheckpoint` (which "
        "records it as active and retires the old one)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--mark-compromised",
            metavar="KID",
            help="mark a retired key compromised: what it signed no longer verifies",
        )

    def handle(self, *args: Any, mark_compromised: str | None = None, **options: Any) -> None:
        if mark_compromised:
            self.mark_compromised(mark_compromised)
        for key in SigningKey.objects.order_by("created_at", "pk"):
            retired = f" retired {format_timestamp(key.retired_at)}" if key.retired_at else ""
            self.stdout.write(
                f"{key.kid}  {key.status:<11} created {format_timestamp(key.created_at)}{retired}"
            )

    def mark_compromised(self, kid: str) -> None:
        key = SigningKey.objects.filter(kid=kid).first()
        if key is None:
            raise CommandError(f"no signing key has the id {kid!r}")
        try:
            if key.kid == keyring.configured().kid:
                raise CommandError(
                    "that key is the one in SIGNING_KEY_FILE: point SIGNING_KEY_FILE at a new "
                    "key and restart first"
                )
            # First the configured key takes over (recorded as active, the current tree head
            # signed by it), so that the latest checkpoint is never one by the compromised key.
            log.sign_head()
        except Problem as error:
            raise CommandError(error.detail) from None
        key.refresh_from_db()
        key.status = SigningKey.COMPROMISED
        key.retired_at = key.retired_at or timezone.now()
        key.save(update_fields=["status", "retired_at"])
        self.stdout.write(f"Marked {key.kid} compromised.")

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from receiptsite.receipts import signing
from receiptsite.receipts.models import SigningKey, format_timestamp


class Command(BaseCommand):
    help = (
        "List the site's signing keys and their status. Rotating is pointing SIGNING_KEY_FILE "
        "at a new key: the first use records it as active and retires the old one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--mark-compromised",
            metavar="KID",
            help="mark a retired key compromised: what it signed no longer verifies",
        )

    def handle(self, *args: Any, mark_compromised: str | None = None, **options: Any) -> None:
        active = signing.active_key()
        if mark_compromised:
            key = SigningKey.objects.filter(kid=mark_compromised).first()
            if key is None:
                raise CommandError(f"no signing key has the id {mark_compromised!r}")
            if key.kid == active.kid:
                raise CommandError(
                    "that key is the active one: point SIGNING_KEY_FILE at a new key first"
                )
            key.status = SigningKey.COMPROMISED
            key.retired_at = key.retired_at or timezone.now()
            key.save(update_fields=["status", "retired_at"])
            self.stdout.write(f"Marked {key.kid} compromised.")
        for key in SigningKey.objects.order_by("created_at", "pk"):
            retired = f" retired {format_timestamp(key.retired_at)}" if key.retired_at else ""
            self.stdout.write(
                f"{key.kid}  {key.status:<11} created {format_timestamp(key.created_at)}{retired}"
            )

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from receiptsite.receipts.models import SigningKey, format_timestamp


class Command(BaseCommand):
    help = (
        "List the site's signing keys and their status, as recorded. Rotating is pointing "
        "SIGNING_KEY_FILE at a new key, restarting, and running `signcheckpoint` (which "
        "records it as active and retires the old one); a key that leaked is marked with "
        "`compromisekey <kid> --at <time>`."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for key in SigningKey.objects.order_by("created_at", "pk"):
            retired = f" retired {format_timestamp(key.retired_at)}" if key.retired_at else ""
            compromised = (
                f" compromised as of {format_timestamp(key.compromised_at)}"
                if key.compromised_at
                else ""
            )
            self.stdout.write(
                f"{key.kid}  {key.status:<11} created {format_timestamp(key.created_at)}"
                f"{retired}{compromised}"
            )

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from receiptsite.receipts.models import ApiKey


class Command(BaseCommand):
    help = "Revoke an API key by its prefix (rk_ and 12 hex digits). Receipts it published stay."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        key = ApiKey.objects.filter(prefix=prefix[: ApiKey.PREFIX_LENGTH]).first()
        if key is None:
            raise CommandError(f"no API key has the prefix {prefix!r}")
        if key.revoked_at is not None:
            when = f"{key.revoked_at:%Y-%m-%d %H:%M}"
            self.stdout.write(f"{key.prefix} was already revoked at {when}.")
            return
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        self.stdout.write(f"Revoked {key.prefix} ({key.tenant.slug}).")

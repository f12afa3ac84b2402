from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from receiptsite.receipts.models import ApiKey, Tenant


class Command(BaseCommand):
    help = (
        "Issue an API key for a tenant. The key is printed once, alone on the last line; "
        "only its prefix and a digest are stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the tenant's slug")

    def handle(self, *args: Any, slug: str, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"there is no tenant {slug!r} (create it with createtenant)")
        key, raw = ApiKey.issue(tenant)
        self.stdout.write(
            f"API key for {tenant.slug}, prefix {key.prefix}. It is shown only now: "
            "store it as a secret."
        )
        self.stdout.write(raw)

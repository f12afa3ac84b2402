from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from receiptsite.receipts.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant: an organisation that publishes receipts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="short lowercase name, e.g. acme")
        parser.add_argument("--name", required=True, help='display name, e.g. "Acme Corp"')

    def handle(self, *args: Any, slug: str, name: str, **options: Any) -> None:
        try:
            validate_slug(slug)
        except ValidationError:
            raise CommandError("the slug may hold only letters, digits, - and _") from None
        max_length = Tenant._meta.get_field("slug").max_length or 50
        if len(slug) > max_length:
            raise CommandError(f"the slug must be at most {max_length} characters")
        if not name.strip() or len(name) > 200:
            raise CommandError("--name must be 1 to 200 characters")
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"a tenant {slug!r} exists already")
        Tenant.objects.create(slug=slug, name=name.strip())
        self.stdout.write(f"Created tenant {slug} ({name.strip()}).")

"""Set up the embedded default with demo receipts, print the links, and serve the site."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from receiptsite.receipts.demo import demo_receipts
from receiptsite.receipts.models import ApiKey, Tenant
from receiptsite.receipts.services import receipt_ingest


class Command(BaseCommand):
    help = (
        "Prepare the embedded SQLite default (keys in var/), migrate, collect static files, "
        "create a demo tenant with demo receipts, print their links and the demo API key, "
        "then serve the site."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-serve", action="store_true", help="set up, print, and stop")
        parser.add_argument(
            "--addrport",
            default=os.environ.get("QUICKSTART_ADDRPORT", "127.0.0.1:8000"),
            help="where to serve (default 127.0.0.1:8000, matching SITE_URL's default)",
        )

    def handle(self, *args: Any, no_serve: bool = False, addrport: str, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        key_file = Path(settings.VAR_DIR) / "demo-api-key"
        tenant = Tenant.objects.filter(slug="demo").first()
        if tenant is None:
            tenant = Tenant.objects.create(slug="demo", name="Demo Agency")
            api_key, raw = ApiKey.issue(tenant)
            key_file.write_text(raw + "\n")
            key_file.chmod(0o600)
            receipts = [
                receipt_ingest(api_key=api_key, payload=payload).receipt
                for payload in demo_receipts()
            ]
        else:
            raw = key_file.read_text().strip() if key_file.exists() else "(see var/demo-api-key)"
            receipts = list(tenant.receipts.order_by("pk"))

        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("receiptsite is ready, with demo receipts:"))
        for receipt in receipts:
            self.stdout.write(f"  {receipt.phase:<12} {receipt.subject_name:<22} {receipt.url}")
        self.stdout.write("")
        self.stdout.write(f"Open this one first: {receipts[-1].url}")
        self.stdout.write(f"Its verification:     {receipts[-1].verify_url}")
        self.stdout.write(f"Demo API key (tenant demo), for curl: {raw}")
        self.stdout.write("")
        if not no_serve:
            call_command("runserver", addrport, use_reloader=False)

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from receiptsite.audit.models import AuditEntry, FailedAuthentication, PrunePermit
from receiptsite.receipts.models import format_timestamp


class Command(BaseCommand):
    help = (
        "Remove the API audit-log entries and the failed authentications older than "
        "AUDIT_LOG_DAYS (default 400): the one path the database lets delete them. Run it "
        "daily, from cron."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        cutoff = now - timedelta(days=settings.AUDIT_LOG_DAYS)
        # One transaction: the permit (which the database checks: open, alone, a cutoff at
        # least a day old), the rows older than its cutoff, and the permit closed with the
        # count of both, so that no permit is ever open outside it (migrations/0002 and 0004).
        with transaction.atomic():
            permit = PrunePermit.objects.create(cutoff=cutoff, issued_at=now)
            entries, _ = AuditEntry.objects.filter(at__lt=cutoff).delete()
            failures, _ = FailedAuthentication.objects.filter(at__lt=cutoff).delete()
            PrunePermit.objects.filter(pk=permit.pk).update(
                closed_at=timezone.now(), removed=entries + failures
            )
        self.stdout.write(
            f"Removed {entries} API audit-log entries and {failures} failed authentications "
            f"from before {format_timestamp(cutoff)} (AUDIT_LOG_DAYS={settings.AUDIT_LOG_DAYS})."
        )

"""The API audit log in the auditor's desk: read-only, filtered, searched by request id, key
prefix or receipt id; from an entry to the receipts it names, and from a receipt (its admin
page) to the request that stored it. The failed authentications beside it, read-only too."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from receiptsite.audit.models import AuditEntry, FailedAuthentication, PrunePermit
from receiptsite.lib.admin import ReadOnlyAdmin
from receiptsite.receipts.models import Receipt


def _receipt_id(text: str) -> str | None:
    try:
        return str(uuid.UUID(text.strip())) if len(text.strip()) == 36 else None
    except ValueError:
        return None


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "tenant", "route", "status", "key_prefix", "request_id", "duration_ms"]
    list_filter = ["tenant", "status", "method", "route", "at"]
    search_fields = ["=request_id", "=key_prefix"]
    search_help_text = "A request id, a key prefix (rk_...) or a receipt id, exactly."
    date_hierarchy = "at"
    list_select_related = ["tenant"]
    fields = readonly_fields = ("at", "tenant", "request_id", "key_prefix", "method", "route",
                                "status", "problem_type", "receipts", "duration_ms")
    show_full_result_count = False  # the log is long: no COUNT(*) of all of it per page

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        # A receipt id finds the requests that stored or read that receipt.
        receipt_id = _receipt_id(search_term)
        if receipt_id is not None:
            return queryset.filter(receipt_ids__holds=receipt_id), False
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="Receipts")
    def receipts(self, obj: AuditEntry) -> str:
        found = dict(
            Receipt.objects.filter(public_id__in=obj.receipt_ids).values_list("public_id", "pk")
        )
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (reverse("admin:receipts_receipt_change", args=[found[uuid.UUID(i)]]), i)
                for i in obj.receipt_ids
                if uuid.UUID(i) in found
            ),
        ) or "none"


@admin.register(FailedAuthentication)
class FailedAuthenticationAdmin(ReadOnlyAdmin):
    """Requests to tenant routes that no key authenticated (401), never the key itself."""

    list_display = ["at", "client_address", "reason", "key_prefix", "method", "path",
                    "request_id"]
    list_filter = ["reason", "method", "at"]
    search_fields = ["=client_address", "=key_prefix", "=request_id"]
    search_help_text = "A client address, a key prefix (rk_...) or a request id, exactly."
    date_hierarchy = "at"
    fields = readonly_fields = ("at", "client_address", "reason", "key_prefix", "method",
                                "path", "request_id")
    show_full_result_count = False


@admin.register(PrunePermit)
class PrunePermitAdmin(ReadOnlyAdmin):
    """The record `pruneauditlog` leaves of each run."""

    list_display = ["issued_at", "cutoff", "removed", "closed_at"]
    exclude = ["txid"]


@admin.display(description="Stored by request")
def request_that_stored(obj: Receipt) -> str:
    """For the receipt's admin page: the audit-log entry of the request that stored it, and
    every request that named it since."""
    receipt_id = str(obj.public_id)
    entry = (
        AuditEntry.objects.filter(tenant_id=obj.tenant_id, method="POST",
                                  receipt_ids__holds=receipt_id)
        .order_by("pk")
        .first()
    )
    every = reverse("admin:audit_auditentry_changelist") + f"?q={receipt_id}"
    if entry is None:
        return format_html('none recorded (<a href="{}">every request naming it</a>)', every)
    return format_html(
        '<a href="{}">{} {} ({})</a> · <a href="{}">every request naming it</a>',
        reverse("admin:audit_auditentry_change", args=[entry.pk]),
        entry.route, entry.status, entry.request_id, every,
    )

"""The auditors' desk for the stored records: tenants, their API keys, the signing keys and
the receipts, all read-only here (review decisions: review/admin.py; withdrawals:
withdrawal/admin.py; the API audit log: audit/admin.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html

from receiptsite.audit.admin import request_that_stored
from receiptsite.ledger.verification import verification_json
from receiptsite.lib.admin import ReadOnlyAdmin
from receiptsite.pages.presentation import page_context
from receiptsite.receipts.models import (
    ApiKey,
    Receipt,
    SigningKey,
    Tenant,
)
from receiptsite.review.admin import DecisionInline
from receiptsite.withdrawal.admin import may_withdraw, withdraw_receipts
from receiptsite.withdrawal.withdrawals import withdrawn


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Every receipt's document holds the slug, and verification compares it with the
        # tenant's: a renamed slug would turn all of the tenant's receipts invalid.
        return ["slug"] if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys are issued and revoked by management commands, which show the secret once."""

    list_display = ["prefix", "tenant", "created_at", "revoked_at"]
    list_filter = ["tenant"]
    search_fields = ["prefix", "tenant__slug"]
    exclude = ["digest"]


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnlyAdmin):
    list_display = ["kid", "status", "created_at", "retired_at", "compromised_at"]
    exclude = ["public_key"]


class ReviewedFilter(admin.SimpleListFilter):
    title = "reviewed"
    parameter_name = "reviewed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Reviewed"), ("no", "Not reviewed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(decisions__isnull=False).distinct()
        if self.value() == "no":
            return queryset.filter(decisions__isnull=True)
        return queryset


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "tenant", "phase", "subject_name", "outcome", "workflow_id",
                    "recorded_at"]
    list_filter = ["tenant", "phase", "outcome", "framework_name", ReviewedFilter,
                   "recorded_at"]
    search_fields = ["=public_id", "workflow_id", "subject_name", "trace_id",
                     "idempotency_key", "session_id"]
    date_hierarchy = "recorded_at"
    list_select_related = ["tenant"]
    fields = readonly_fields = ("plain_summary", "public_link", "public_id", "tenant",
                                "recorded_at", "workflow_id", "phase", "subject_name",
                                "outcome", "idempotency_key", "output_hash",
                                "request_that_stored")
    inlines = [DecisionInline]
    request_that_stored = staticmethod(request_that_stored)  # from the API audit log
    actions = [withdraw_receipts]  # withdrawal/admin.py

    def has_withdraw_permission(self, request: HttpRequest) -> bool:
        return may_withdraw(request)

    @admin.display(description="Summary")
    def plain_summary(self, obj: Receipt) -> str:
        """The same plain summary as the public page, with the server's verification."""
        if (found := withdrawn(obj)) is not None:  # the content is erased: say so, as the page
            return render_to_string(
                "receipts/_withdrawn.html",
                {"withdrawal": found.withdrawal, "withdrawn_at": found.withdrawn_at},
            )
        context = page_context(obj, verification_json(obj), show_follow_up=True)
        return render_to_string("admin/receipts/summary.html", context)

    @admin.display(description="Public page")
    def public_link(self, obj: Receipt) -> str:
        return format_html('<a href="/run/{}" rel="noopener">Open the receipt page</a>',
                           obj.public_id)

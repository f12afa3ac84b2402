"""The auditors' desk for the stored records: tenants, their API keys, the signing keys and
the receipts, all read-only here (review decisions and the review queue: review/admin.py;
withdrawals: withdrawal/admin.py; the API audit log: audit/admin.py).

The receipt list shows each receipt's verification state, recomputed for the rows shown
(review/states.py), and never shows what a receipt that does not verify says as fact: its
outcome is "what the altered record now says", flagged."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
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
from receiptsite.review import lookup, states
from receiptsite.review.admin import DecisionInline, search_by_receipt
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


def _state(obj: Receipt) -> states.State:
    """The receipt's state, worked out once per row shown (each column asks for it)."""
    found: states.State | None = obj.__dict__.get("_desk_state")
    if found is None:
        found = obj.__dict__["_desk_state"] = states.state_of(obj)
    return found


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    # Columns that fit at 1280 px beside the filters (static/css/admin-desk.css).
    list_display = ["short_id", "tenant", "subject", "shown_outcome", "verification",
                    "workflow_id", "recorded_on"]
    list_filter = ["tenant", "phase", "outcome", "framework_name", ReviewedFilter,
                   "recorded_at"]
    search_fields = ["workflow_id", "subject_name", "trace_id", "idempotency_key",
                     "session_id"]
    search_help_text = (
        "A receipt's id, its 8-character short id or a link to it; or words of a workflow, "
        "subject, trace, session or idempotency key."
    )
    change_list_template = "admin/receipts/receipt/change_list.html"
    date_hierarchy = "recorded_at"
    # What verifying each row needs, fetched with the page (review/states.py).
    list_select_related = states.STATE_RELATED
    fields = readonly_fields = ("plain_summary", "public_link", "public_id", "tenant",
                                "recorded_at", "workflow_id", "phase", "subject_name",
                                "outcome", "idempotency_key", "output_hash",
                                "request_that_stored")
    inlines = [DecisionInline]
    request_that_stored = staticmethod(request_that_stored)  # from the API audit log
    actions = [withdraw_receipts]  # withdrawal/admin.py

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return search_by_receipt(self, request, queryset, search_term, "public_id")

    @admin.display(description="Receipt", ordering="public_id")
    def short_id(self, obj: Receipt) -> str:
        return format_html('<code title="{}">{}</code>', obj.uuid, lookup.short_id(obj.public_id))

    @admin.display(description="Subject", ordering="subject_name")
    def subject(self, obj: Receipt) -> str:
        return f"{obj.phase} {obj.subject_name}"

    @admin.display(description="Recorded (UTC)", ordering="recorded_at")
    def recorded_on(self, obj: Receipt) -> str:
        return f"{obj.recorded_at:%Y-%m-%d %H:%M}"

    @admin.display(description="Checks out?")
    def verification(self, obj: Receipt) -> str:
        state = _state(obj)
        if state.name == states.INVALID:
            return format_html(
                '<strong class="state-invalid" title="{}">⚠ invalid: does not verify</strong>',
                state.reason,
            )
        return format_html('<span class="state-{}" title="{}">{}</span>', state.name,
                           state.label, state.name)

    @admin.display(description="Outcome", ordering="outcome")
    def shown_outcome(self, obj: Receipt) -> str:
        state = _state(obj)
        if state.name == states.WITHDRAWN:
            return "— (erased)"
        outcome = obj.outcome or "—"
        if state.name != states.INVALID:
            return outcome
        if state.failed == ("signature",) and obj.signing_key.status == SigningKey.COMPROMISED:
            # The bytes are as stored; the key that vouched for them no longer counts.
            said = "What the record says, its signature no longer counting: {}"
        else:
            said = "What the altered record now says: {}"
        return format_html('<span class="state-invalid">' + said + "</span>", outcome)

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
        context["record_decision"] = (
            reverse("admin:receipts_reviewdecision_add") + f"?receipt={obj.uuid}"
        )
        return render_to_string("admin/receipts/summary.html", context)

    @admin.display(description="Public page")
    def public_link(self, obj: Receipt) -> str:
        return format_html('<a href="/run/{}" rel="noopener">Open the receipt page</a>',
                           obj.public_id)

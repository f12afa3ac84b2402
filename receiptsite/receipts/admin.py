"""The auditor's desk. Receipts are read-only; review decisions are append-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from receiptsite.receipts.models import ApiKey, Receipt, ReviewDecision, SigningKey, Tenant
from receiptsite.receipts.presentation import page_context
from receiptsite.receipts.services import decision_record


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nothing here can be added, changed or deleted through the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]

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
    list_display = ["kid", "status", "created_at", "retired_at"]
    exclude = ["public_key"]


class DecisionInline(admin.TabularInline):
    model = ReviewDecision
    extra = 0
    fields = readonly_fields = ("reviewed_at", "reviewer", "conclusion", "exception_note",
                                "follow_up", "output_hash", "supersedes")
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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
    list_filter = ["tenant", "phase", "outcome", ReviewedFilter, "recorded_at"]
    search_fields = ["=public_id", "workflow_id", "subject_name", "idempotency_key",
                     "session_id"]
    date_hierarchy = "recorded_at"
    list_select_related = ["tenant"]
    fields = readonly_fields = ("plain_summary", "public_link", "public_id", "tenant",
                                "recorded_at", "workflow_id", "phase", "subject_name",
                                "outcome", "idempotency_key", "output_hash")
    inlines = [DecisionInline]

    @admin.display(description="Summary")
    def plain_summary(self, obj: Receipt) -> str:
        context = page_context(obj, None, show_follow_up=True)
        return format_html(
            "<p><strong>{}</strong></p><p>Outcome: {} {}</p>",
            context["sentence"], context["outcome_icon"], context["outcome_label"],
        )

    @admin.display(description="Public page")
    def public_link(self, obj: Receipt) -> str:
        return format_html('<a href="/run/{}" rel="noopener">Open the receipt page</a>',
                           obj.public_id)


@admin.register(ReviewDecision)
class ReviewDecisionAdmin(admin.ModelAdmin):
    """Add-only. The reviewer and the reviewed hash are set by the site, not typed in."""

    list_display = ["receipt", "conclusion", "reviewer", "reviewed_at", "supersedes"]
    list_filter = ["conclusion", "reviewed_at"]
    search_fields = ["=receipt__public_id", "receipt__workflow_id", "follow_up"]
    raw_id_fields = ["receipt", "supersedes"]
    list_select_related = ["receipt", "reviewer"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["receipt", "conclusion", "exception_note", "follow_up", "supersedes"]
        return ["receipt", "reviewer", "reviewed_at", "conclusion", "exception_note",
                "follow_up", "output_hash", "supersedes"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj) if obj is not None else []

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing an existing decision is allowed; nothing on it can be saved.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(
        self, request: HttpRequest, obj: ReviewDecision, form: Any, change: bool
    ) -> None:
        if change:
            raise PermissionError("review decisions are append-only")
        saved = decision_record(
            receipt=obj.receipt,
            reviewer=request.user,  # type: ignore[arg-type]
            conclusion=obj.conclusion,
            exception_note=obj.exception_note,
            follow_up=obj.follow_up,
            supersedes=obj.supersedes,
        )
        # The admin goes on to log the addition with `obj`: give it the stored values.
        obj.pk, obj.reviewer, obj.reviewed_at, obj.output_hash = (
            saved.pk, saved.reviewer, saved.reviewed_at, saved.output_hash
        )

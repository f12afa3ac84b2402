"""The auditors' desk for review decisions: add-only, listed with whether the whole signed
record checks out (review/chain.py), exported as CSV for the audit file; and the decisions
inline on a receipt's admin page."""

from __future__ import annotations

import csv
from datetime import date
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import path

from receiptsite.integrity.encoding import b64
from receiptsite.receipts.models import (
    DecisionLink,
    DecisionVouch,
    ReviewDecision,
    format_timestamp,
)
from receiptsite.review import chain
from receiptsite.review.forms import DecisionForm
from receiptsite.review.services import decision_record


def _cell(text: str) -> str:
    """Keep spreadsheet programs from running text that starts like a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class DecisionInline(admin.TabularInline):
    model = ReviewDecision
    extra = 0
    fields = readonly_fields = ("reviewed_at", "reviewer", "conclusion", "exception_note",
                                "follow_up", "output_hash", "supersedes")
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# The CSV export's columns of the auditors' record (review/chain.py), after the
# decision's own: enough to check each row with nothing but the site's published keys (for a
# decision signed by a key since compromised, the vouch of the key that took over: its
# signature over the same signed document).
RECORD_COLUMNS = ["position", "previous_decision_id", "previous_hash", "decision_hash",
                  "signature", "signing_key", "chained_at", "chained_by", "signed_document",
                  "vouch_signature", "vouch_signing_key", "vouched_at", "record_check"]


def _signature(link: DecisionLink | None) -> str:
    return "" if link is None else b64(bytes(link.signature))


def _record_cells(link: DecisionLink | None, vouch: DecisionVouch | None) -> list[Any]:
    """RECORD_COLUMNS but the last, for one decision (blank where it has no link, or no vouch
    counts for it)."""
    if link is None:
        return [""] * (len(RECORD_COLUMNS) - 1)
    vouched = ["", "", ""] if vouch is None else [
        b64(bytes(vouch.signature)), vouch.signing_key.kid, format_timestamp(vouch.signed_at)
    ]
    return [link.position, link.previous_decision_id or "", link.previous_hash,
            link.decision_hash, _signature(link), link.signing_key.kid,
            format_timestamp(link.chained_at), link.chained_by,
            bytes(link.canonical_bytes).decode(), *vouched]


@admin.register(ReviewDecision)
class ReviewDecisionAdmin(admin.ModelAdmin):
    """Add-only. The reviewer and the reviewed hash are set by the site, not typed in."""

    form = DecisionForm

    list_display = ["receipt", "conclusion", "reviewer", "reviewed_at", "supersedes"]
    change_list_template = "admin/receipts/reviewdecision/change_list.html"
    list_filter = ["conclusion", "reviewed_at"]
    search_fields = ["=receipt__public_id", "receipt__workflow_id", "follow_up"]
    raw_id_fields = ["receipt", "supersedes"]
    list_select_related = ["receipt", "reviewer"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            # The auditor confirms the hash they reviewed (the form checks it is the receipt's).
            return ["receipt", "output_hash", "conclusion", "exception_note", "follow_up",
                    "supersedes"]
        return ["receipt", "reviewer", "reviewed_at", "conclusion", "exception_note",
                "follow_up", "output_hash", "supersedes", "record_entry"]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Whether the whole record checks out, above the list (review/chain.py).
        record = chain.check()
        context = {**(extra_context or {}), "decision_record": record,
                   "decision_findings": record.findings[:10]}
        return super().changelist_view(request, extra_context=context)

    @admin.display(description="In the record")
    def record_entry(self, obj: ReviewDecision) -> str:
        """The decision's place in the auditors' record, its hash and signature, and whether
        it checks out."""
        record = chain.check()
        vouch = record.vouched.get(obj.pk)
        return render_to_string("admin/receipts/reviewdecision/record_entry.html", {
            "link": record.links.get(obj.pk), "verdict": record.verdict(obj.pk),
            "signature": _signature(record.links.get(obj.pk)), "vouch": vouch,
            "vouch_signature": "" if vouch is None else b64(bytes(vouch.signature)),
        })

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj) if obj is not None else []

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing an existing decision is allowed; nothing on it can be saved.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        export = self.admin_site.admin_view(self.export_csv)
        return [path("export.csv", export, name="receipts_reviewdecision_export"),
                *super().get_urls()]

    def export_csv(self, request: HttpRequest) -> HttpResponse:
        """Decisions reviewed in [from, to] (dates, UTC, both inclusive), for the audit file."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            start = date.fromisoformat(request.GET.get("from", "") or "2000-01-01")
            end = date.fromisoformat(request.GET.get("to", "") or "9999-12-30")
        except ValueError:
            return HttpResponse("from and to must be dates (YYYY-MM-DD)\n", status=400,
                                content_type="text/plain; charset=utf-8")
        decisions = ReviewDecision.objects.filter(
            reviewed_at__date__gte=start, reviewed_at__date__lte=end
        ).select_related("receipt", "receipt__tenant", "reviewer").order_by("reviewed_at", "pk")
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="review-decisions-{start}-{end}.csv"'
        )
        writer = csv.writer(response)
        writer.writerow(["decision_id", "reviewed_at", "reviewer", "conclusion",
                         "exception_note", "follow_up", "supersedes", "receipt_id", "tenant",
                         "workflow_id", "subject", "reviewed_output_hash",
                         "current_output_hash", *RECORD_COLUMNS])
        record = chain.check()
        for d in decisions:
            link = record.links.get(d.pk)
            writer.writerow([d.pk, format_timestamp(d.reviewed_at), d.reviewer.get_username(),
                             d.conclusion, _cell(d.exception_note), _cell(d.follow_up),
                             d.supersedes_id or "", d.receipt.uuid, d.receipt.tenant.slug,
                             _cell(d.receipt.workflow_id), _cell(d.receipt.subject_name),
                             d.output_hash, d.receipt.output_hash,
                             *_record_cells(link, record.vouched.get(d.pk)),
                             record.verdict(d.pk)])
        return response

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

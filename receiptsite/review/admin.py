"""The auditors' desk in the admin: the review queue (review/queue.py), the review decisions
(add-only, listed with whether the whole signed record checks out, review/chain.py, in words an
auditor can act on, review/explain.py), their export as CSV and JSON (review/export.py), and
the decisions inline on a receipt's admin page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme

from receiptsite.evidence.declaration import OUTCOMES
from receiptsite.integrity.encoding import b64
from receiptsite.receipts.models import (
    DecisionLink,
    Receipt,
    ReviewAssignment,
    ReviewDecision,
    Tenant,
)
from receiptsite.review import chain, explain, export, lookup, queue, states
from receiptsite.review.forms import DecisionForm
from receiptsite.review.services import decision_record

QUEUE = "admin:receipts_reviewassignment_changelist"


def search_by_receipt(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, found: QuerySet[Any], term: str,
    field: str,
) -> tuple[QuerySet[Any], bool]:
    """A list's search: a receipt's id, short id or link (review/lookup.py) finds its rows, by
    the receipts' unique index; anything else goes to the list's search_fields."""
    named = lookup.named(term)
    searched, duplicates = admin.ModelAdmin.get_search_results(model_admin, request, found, term)
    if named is None:
        return searched, duplicates
    return found.filter(named.q(field)) | searched, duplicates


def receipt_link(receipt: Receipt) -> str:
    """A receipt as the desk names it: its short id, linked to its admin page, the whole id
    in the title."""
    return format_html(
        '<a href="{}" title="{}"><code>{}</code></a>',
        reverse("admin:receipts_receipt_change", args=[receipt.pk]),
        receipt.uuid,
        lookup.short_id(receipt.public_id),
    )


def auditors() -> QuerySet[User]:
    """Who may review: active staff in the Auditors group or allowed to record decisions."""
    return (
        User.objects.filter(is_active=True, is_staff=True)
        .filter(
            Q(groups__name="Auditors")
            | Q(is_superuser=True)
            | Q(user_permissions__codename="add_reviewdecision")
        )
        .distinct()
        .order_by("username")
    )


class DecisionInline(admin.TabularInline):
    model = ReviewDecision
    extra = 0
    fields = readonly_fields = ("reviewed_at", "reviewer", "conclusion", "exception_note",
                                "follow_up", "output_hash", "supersedes")
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- review decisions ---------------------------------------------------------------------


@admin.register(ReviewDecision)
class ReviewDecisionAdmin(admin.ModelAdmin):
    """Add-only. The reviewer and the reviewed hash are set by the site, not typed in."""

    form = DecisionForm

    # Columns that fit at 1280 px beside the filters (static/css/admin-desk.css).
    list_display = ["decision", "receipt_short", "conclusion", "reviewer", "reviewed_on",
                    "corrects", "in_the_record"]
    list_display_links = ["decision"]
    change_list_template = "admin/receipts/reviewdecision/change_list.html"
    change_form_template = "admin/receipts/reviewdecision/change_form.html"
    list_filter = ["conclusion", "reviewed_at", ("reviewer", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["receipt__workflow_id", "follow_up", "exception_note"]
    search_help_text = (
        "A receipt's id, its 8-character short id or a link to it; or words of a workflow id, "
        "an exception or a follow-up."
    )
    raw_id_fields = ["supersedes"]
    list_select_related = ["receipt", "reviewer"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            # The auditor confirms the hash they reviewed (the form checks it is the receipt's).
            return ["receipt", "output_hash", "conclusion", "exception_note", "follow_up",
                    "supersedes"]
        return ["receipt", "reviewer", "reviewed_at", "conclusion", "exception_note",
                "follow_up", "output_hash", "supersedes", "record_entry"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # The reviewer is the signed-in auditor: the form refuses a receipt another one holds.
        return type(form.__name__, (form,), {"reviewer": request.user})

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return search_by_receipt(self, request, queryset, search_term, "receipt__public_id")

    # The list's columns ------------------------------------------------------------------

    @admin.display(description="Decision", ordering="id")
    def decision(self, obj: ReviewDecision) -> str:
        return f"#{obj.pk}"

    @admin.display(description="Receipt", ordering="receipt__public_id")
    def receipt_short(self, obj: ReviewDecision) -> str:
        return receipt_link(obj.receipt)

    @admin.display(description="Date (UTC)", ordering="reviewed_at")
    def reviewed_on(self, obj: ReviewDecision) -> str:
        return f"{obj.reviewed_at:%Y-%m-%d %H:%M}"

    @admin.display(description="Corrects", ordering="supersedes")
    def corrects(self, obj: ReviewDecision) -> str:
        return f"#{obj.supersedes_id}" if obj.supersedes_id else "—"

    @admin.display(description="In the record")
    def in_the_record(self, obj: ReviewDecision) -> str:
        said = getattr(obj, "desk_said", None)
        if said is None:
            return ""
        short = {
            "sound": "sound",
            "vouched": "counts on a vouch",
            "compromised": "key compromised, no vouch yet",
        }.get(said.kind, f"{said.kind}: does not count")
        return format_html('<span class="record-{}" title="{}">{}</span>', said.kind,
                           said.happened, short)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        record = getattr(request, "decision_record", None) or chain.check()
        for obj in changelist.result_list:
            obj.desk_said = explain.entry(record, obj.pk)
        return changelist

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Whether the whole record checks out, above the list, in an auditor's words.
        record = chain.check()
        request.decision_record = record  # type: ignore[attr-defined]
        said = [explain.finding(record, finding) for finding in record.findings]
        vouched = [s for s in (explain.vouched(record, d) for d in record.vouched) if s]
        context = {
            **(extra_context or {}),
            "decision_record": record,
            "record_headline": explain.headline(record),
            "record_said": said[:20],
            "record_more": max(0, len(said) - 20),
            "record_vouched": vouched[:5],
            "record_vouched_more": max(0, len(vouched) - 5),
            "operator": explain.OPERATOR,
            "reviewers": User.objects.filter(review_decisions__isnull=False)
            .distinct()
            .order_by("username"),
        }
        return super().changelist_view(request, extra_context=context)

    # One decision's page -----------------------------------------------------------------

    @admin.display(description="In the record")
    def record_entry(self, obj: ReviewDecision) -> str:
        """The decision's place in the auditors' record, its hash and signature, whether it
        checks out, and what that means for an auditor."""
        record = chain.check()
        vouch = record.vouched.get(obj.pk)
        return render_to_string("admin/receipts/reviewdecision/record_entry.html", {
            "link": record.links.get(obj.pk), "verdict": record.verdict(obj.pk),
            "signature": _signature(record.links.get(obj.pk)), "vouch": vouch,
            "vouch_signature": "" if vouch is None else b64(bytes(vouch.signature)),
            "said": explain.entry(record, obj.pk),
        })

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj) if obj is not None else []

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing an existing decision is allowed; nothing on it can be saved.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # The add form ---------------------------------------------------------------------------

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """From the queue (?receipt=<id>): the receipt, and the output hash the panel above
        the form shows of it, which the auditor confirms by saving."""
        initial = {k: v for k, v in super().get_changeform_initial_data(request).items()
                   if k in ("receipt", "supersedes")}
        receipt = _named_receipt(request.GET.get("receipt", ""))
        if receipt is not None:
            initial.update(receipt=receipt.uuid, output_hash=receipt.output_hash)
        return initial

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        named = request.POST.get("receipt") if request.method == "POST" else None
        receipt = _named_receipt(named if named is not None else request.GET.get("receipt", ""))
        context: dict[str, Any] = {**(extra_context or {})}
        if receipt is not None:
            context["desk_receipt"] = receipt
            context["desk_state"] = states.state_of(receipt)
            context["desk_short"] = lookup.short_id(receipt.public_id)
            hold = queue.hold_of(receipt)
            context["desk_hold"] = hold if hold.held() else None
            context["desk_hold_until"] = queue.when(hold.until) if hold.until else ""
        return super().add_view(request, form_url, extra_context=context)

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: Any = None
                     ) -> HttpResponse:
        if request.GET.get("from") == "queue" and "_addanother" not in request.POST:
            self.message_user(
                request,
                f"Recorded your decision on {lookup.short_id(obj.receipt.public_id)}: "
                f"{obj.get_conclusion_display()}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse(QUEUE))
        return super().response_add(request, obj, post_url_continue)

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

    # The export -----------------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        return [
            path("export.csv", self.admin_site.admin_view(self.export_csv),
                 name="receipts_reviewdecision_export"),
            path("export.json", self.admin_site.admin_view(self.export_json),
                 name="receipts_reviewdecision_export_json"),
            *super().get_urls(),
        ]

    def _export(self, request: HttpRequest, kind: str) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            wanted = export.read_filter(request.GET)
        except export.BadFilter as error:
            return HttpResponse(f"{error}\n", status=400,
                                content_type="text/plain; charset=utf-8")
        record = chain.check()
        made = export.rows(wanted, record)
        if kind == "csv":
            response = HttpResponse(export.as_csv(made), content_type="text/csv; charset=utf-8")
        else:
            response = HttpResponse(export.as_json(made, wanted, record),
                                    content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="{wanted.name()}.{kind}"'
        return response

    def export_csv(self, request: HttpRequest) -> HttpResponse:
        """Every decision, or those reviewed in [from, to] (UTC dates, both inclusive, either
        open), or one reviewer's (export.py)."""
        return self._export(request, "csv")

    def export_json(self, request: HttpRequest) -> HttpResponse:
        return self._export(request, "json")


def _signature(link: DecisionLink | None) -> str:
    return "" if link is None else b64(bytes(link.signature))


def _named_receipt(text: str) -> Receipt | None:
    """The one receipt a pasted id, short id or link names, fetched to be verified."""
    named = lookup.named(text or "")
    if named is None:
        return None
    found = list(Receipt.objects.select_related(*states.STATE_RELATED).filter(named.q())[:2])
    return found[0] if len(found) == 1 else None


# --- the review queue -----------------------------------------------------------------------


def _filters(request: HttpRequest) -> queue.Filters:
    """The queue's filters from the request; a value the queue does not know filters nothing."""
    get = request.GET
    outcome = get.get("outcome", "")
    state = get.get("state", "")
    assigned = get.get("assigned", "")
    return queue.Filters(
        tenant=get.get("tenant", "").strip(),
        workflow=get.get("workflow", "").strip(),
        outcome=outcome if outcome in (*OUTCOMES, "none") else "",
        state=state if state in (states.VALID, states.INVALID, states.PENDING) else "",
        assigned=assigned if assigned in ("me", "nobody") else "",
    )


def _back(request: HttpRequest) -> HttpResponseRedirect:
    """Back to the queue as the auditor left it (its filters), never to another site."""
    back = request.POST.get("next", "")
    if not back or not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse(QUEUE)
    return HttpResponseRedirect(back)


@admin.register(ReviewAssignment)
class ReviewQueueAdmin(admin.ModelAdmin):
    """The review queue: its list is the receipts awaiting a decision, not the rows of the
    model, which hold each receipt's assignment and reservation (review/queue.py). Claims,
    releases and assignments are POSTs of their own; nothing here is a form over the rows."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.queue_view), name="receipts_reviewassignment_changelist"),
            path("<uuid:receipt_id>/hold/", view(self.hold_view),
                 name="receipts_reviewassignment_hold"),
            path("assign/", view(self.assign_view), name="receipts_reviewassignment_assign"),
        ]

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        filters = _filters(request)
        after = request.GET.get("after", "")
        user: User = request.user  # type: ignore[assignment]
        found = queue.filtered(queue.awaiting(), filters, user)
        shown = queue.page(found, state=filters.state, after=int(after) if after.isdigit() else 0)
        rows = []
        for receipt, state in shown.rows:
            try:
                row: ReviewAssignment | None = receipt.assignment
            except ReviewAssignment.DoesNotExist:
                row = None
            hold = queue.Hold(row.held_by, row.held_until) if row else queue.Hold(None, None)
            rows.append({
                "receipt": receipt,
                "short": lookup.short_id(receipt.public_id),
                "state": state,
                "assigned_to": row.assigned_to if row else None,
                "hold": hold if hold.held() else None,
                "hold_until": queue.when(hold.until) if hold.held() and hold.until else "",
                "mine": hold.held() and hold.by is not None and hold.by.pk == user.pk,
                "latest": receipt.latest_conclusion,  # type: ignore[attr-defined]
                "latest_follow_up": receipt.latest_follow_up,  # type: ignore[attr-defined]
            })
        query = request.GET.copy()
        query.pop("after", None)
        first_page = "?" + query.urlencode() if after else ""
        next_page = ""
        if shown.next_after is not None:
            query["after"] = str(shown.next_after)
            next_page = "?" + query.urlencode()
        context = {
            **self.admin_site.each_context(request),
            "title": "Review queue",
            "opts": self.model._meta,
            "filters": filters,
            "tenants": Tenant.objects.order_by("slug").values_list("slug", flat=True),
            "outcomes": [*OUTCOMES, "none"],
            "states": [s for s in states.STATES if s[0] != states.WITHDRAWN],
            "rows": rows,
            "page": shown,
            "scan": queue.SCAN,
            "next_page": next_page,
            "first_page": first_page,
            "here": request.get_full_path(),
            "may_change": self.has_change_permission(request),
            "may_decide": request.user.has_perm("receipts.add_reviewdecision"),
            "auditors": auditors() if self.has_change_permission(request) else [],
            "hold_minutes": int(queue.HOLD.total_seconds() // 60),
            "filtered": any(vars(filters).values()),
        }
        return TemplateResponse(request, "admin/receipts/reviewassignment/queue.html", context)

    def _refused(self, request: HttpRequest) -> HttpResponse | None:
        """A claim, release or assignment is a POST by an auditor who may change the queue."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        return None

    def hold_view(self, request: HttpRequest, receipt_id: Any) -> HttpResponse:
        """Claim, renew or release a receipt's hold."""
        if (refused := self._refused(request)) is not None:
            return refused
        receipt = Receipt.objects.filter(public_id=receipt_id).first()
        if receipt is None:
            raise Http404("no receipt has this id")
        user: User = request.user  # type: ignore[assignment]
        short = lookup.short_id(receipt.public_id)
        if request.POST.get("action") == "release":
            if queue.release(receipt, user):
                self.message_user(request, f"Released {short}: another auditor may claim it.",
                                  messages.SUCCESS)
            else:
                self.message_user(request, f"Not released: you did not hold {short}.",
                              messages.WARNING)
            return _back(request)
        claimed = queue.claim(receipt, user)
        hold = claimed.hold
        until = queue.when(hold.until) if hold.until else ""
        if claimed.won:
            self.message_user(
                request,
                f"You hold {short} for review until {until}. Renew it if you need longer; "
                "recording a decision releases it.",
                messages.SUCCESS,
            )
        else:
            holder = hold.by.get_username() if hold.by else "another auditor"
            self.message_user(
                request,
                f"Already held: {holder} holds {short} for review until {until}. Choose "
                "another receipt, or ask them.",
                messages.WARNING,
            )
        return _back(request)

    def assign_view(self, request: HttpRequest) -> HttpResponse:
        """Assign the chosen receipts to an auditor, or to nobody."""
        if (refused := self._refused(request)) is not None:
            return refused
        ids = []
        for text in request.POST.getlist("receipt"):
            named = lookup.named(text)
            if named is not None and named.id is not None:
                ids.append(named.id)
        receipts = list(Receipt.objects.filter(public_id__in=ids))
        username = request.POST.get("auditor", "")
        to = auditors().filter(username=username).first() if username else None
        if not receipts or (username and to is None):
            self.message_user(request, "Choose receipts, and an auditor or nobody.",
                              messages.WARNING)
            return _back(request)
        count = queue.assign(receipts, to, by=request.user)  # type: ignore[arg-type]
        whom = to.get_username() if to else "nobody"
        self.message_user(request, f"Assigned {count} receipt(s) to {whom}.", messages.SUCCESS)
        return _back(request)


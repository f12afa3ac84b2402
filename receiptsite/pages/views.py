"""The pages people read: the receipt page, its hand-off text, and the error pages."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csp import get_nonce
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.translation import pgettext
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_POST, require_safe

from receiptsite.api.ratelimit import rate_limited
from receiptsite.api.views import conditional
from receiptsite.capability import capability, receipt_not_found
from receiptsite.integrity.encoding import b64
from receiptsite.ledger.verification import (
    verifiable,
    verification_and_key,
    verification_json,
)
from receiptsite.middleware import cross_origin, path_kind
from receiptsite.pages import bundle
from receiptsite.pages.check_commands import withdrawn_copy_commands
from receiptsite.pages.presentation import page_context, receipt_handoff, when_html
from receiptsite.problems import Problem, problem
from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review.forms import DecisionForm
from receiptsite.withdrawal.withdrawals import Withdrawn, withdrawn


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on pages that name no icon (the admin's)."""
    return redirect(static("favicon.svg"), permanent=True)


def _is_auditor(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("receipts.view_reviewdecision"))


def _receipt(receipt_id: uuid.UUID) -> Receipt | None:
    # With the log's latest checkpoint, in one statement: every route of it verifies.
    return verifiable(receipt_id)


def _can_review(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("receipts.add_reviewdecision"))


# Every answer under /run/<id> is no-store (capability.set_capability_headers): its ETag is
# for a verifier that keeps its own copy and asks again, never for a cache in between.
NO_STORE = "no-store"


def _render_page(
    request: HttpRequest, receipt: Receipt, *, form: DecisionForm | None = None,
    partial: str = "", status: int = 200, revalidate: bool = False,
) -> HttpResponse:
    """The page (or one of its fragments), every check run again; with `revalidate` (a GET),
    with its ETag, or the 304 of an If-None-Match that names it (_conditional_page)."""
    verification, key = verification_and_key(receipt)
    context = page_context(
        receipt, verification, show_follow_up=_is_auditor(request), key=key
    )
    if _is_auditor(request):
        # Decisions are internal: only signed-in auditors ever see them.
        context["decisions"] = list(
            ReviewDecision.objects.filter(receipt=receipt).select_related(
                "reviewer", "supersedes", "superseded_by"
            )
        )
        if _can_review(request):
            context["decision_form"] = form or DecisionForm(receipt=receipt)
    template = "receipts/receipt.html" + (f"#{partial}" if partial else "")
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return _conditional_page(request, response, verification) if revalidate else response


def _conditional_page(
    request: HttpRequest, response: HttpResponse, verification: dict[str, Any]
) -> HttpResponse:
    """The page's ETag is of its bytes, the time of the check ("Checked at", the answer's
    `verified_at`) and the CSP nonce of the htmx script left out: both are made for this request
    alone, and all else shown (the language, the verdict and every check, the linked receipts'
    verdicts, the auditor's decisions, which fragment) is in the bytes. A page holding a form's
    CSRF token (an auditor's, with the decision form) gets none: that token is made for this
    request too, and a copy kept must not be told it is current once it is no longer accepted."""
    if b'name="csrfmiddlewaretoken"' in response.content:
        return response
    verified_at = verification["verified_at"]
    nonce = get_nonce(request)
    return conditional(
        request, response, NO_STORE,
        per_request=[when_html(verified_at), verified_at, str(nonce) if nonce else ""],
    )


@capability
@require_safe
@rate_limited("read")
def receipt_page(request: HttpRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = _receipt(receipt_id)
    if receipt is None:
        return render(request, "404.html", status=404)
    if (found := withdrawn(receipt)) is not None:
        return _withdrawn_page(request, receipt, found)
    # htmx's "Check again" asks for the verification panel alone; a plain link gets the page.
    htmx = getattr(request, "htmx", False)
    partial = "verification-panel" if htmx and request.GET.get("part") == "verification" else ""
    return _render_page(request, receipt, partial=partial, revalidate=True)


# Another method is a 405 (with Allow), before the CSRF check that a POST still gets.
@csrf_exempt
@capability
@require_POST
@csrf_protect
def receipt_decision(request: HttpRequest, receipt_id: uuid.UUID) -> HttpResponse:
    """Append an auditor's decision from the page (htmx re-renders the decisions list)."""
    receipt = _receipt(receipt_id)
    if receipt is None:
        return render(request, "404.html", status=404)
    if (found := withdrawn(receipt)) is not None:
        return _withdrawn_page(request, receipt, found)  # nothing left to review
    if not _can_review(request):
        raise PermissionDenied
    form = DecisionForm(request.POST, receipt=receipt)
    htmx = getattr(request, "htmx", False)
    # A form error, also when another auditor corrected the same decision meanwhile.
    if not form.is_valid() or form.record(request.user) is None:  # type: ignore[arg-type]
        return _render_page(request, receipt, form=form, status=422,
                            partial="decisions-panel" if htmx else "")
    if htmx:
        return _render_page(request, receipt, partial="decisions-panel")
    return redirect(reverse("receipt-page", args=[receipt.public_id]) + "#decisions")


@capability
@require_safe
@rate_limited("read")
def handoff_txt(request: HttpRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = _receipt(receipt_id)
    if receipt is None:
        return HttpResponse(
            "There is no receipt with this id.\n",
            status=404,
            content_type="text/plain; charset=utf-8",
        )
    if (found := withdrawn(receipt)) is not None:
        # The hand-off of a withdrawn receipt, in the reader's language (its time as the
        # verification answer gives it, as the hand-off's "Recorded at" is).
        text = pgettext(
            "hand-off",
            "This receipt was withdrawn on %(when)s, by %(by)s, for %(reason)s. Its content was "
            "erased; its place in the tamper-evident log is kept.",
        ) % {"when": found.withdrawn_at, "by": found.withdrawal.get_withdrawn_by_display(),
             "reason": found.withdrawal.get_reason_display()} + "\n"
        if (stated := found.statement) is not None:
            text += pgettext(
                "hand-off",
                "The withdrawal is a statement signed by this site and chained to the "
                "withdrawals before it; its SHA-256: %(hash)s (its signed bytes are in the "
                "receipt's verification answer).",
            ) % {"hash": stated.statement_hash} + "\n"
        return HttpResponse(text, status=410, content_type="text/plain; charset=utf-8")
    # Checked as the page checks it: a receipt that does not verify says so on its first line.
    text = receipt_handoff(
        receipt, verification_json(receipt), show_follow_up=_is_auditor(request)
    )
    # Nothing in it is made for this request alone: the ETag is of its bytes, so of its
    # language and of its first line's warning too.
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    return conditional(request, response, NO_STORE)


def _withdrawn_page(request: HttpRequest, receipt: Receipt, found: Withdrawn) -> HttpResponse:
    """410: a plain page saying when, by whom and why the receipt was withdrawn, which receipt
    it was and when it was recorded, and how whoever holds a copy can still check it."""
    context = {
        "withdrawal": found.withdrawal,
        "withdrawn_at": found.withdrawn_at,
        "receipt": receipt,
        "leaf_hash": b64(found.leaf_hash) if found.leaf_hash is not None else None,
        "verify_url": receipt.verify_url,
        "copy_commands": withdrawn_copy_commands(
            receipt.verify_url, settings.SITE_URL + reverse("receipt-keys")
        ),
    }
    return render(request, "receipts/withdrawn.html", context, status=410)


# Readable from any origin, like the JSON routes: verifiers on other sites use it.
@cross_origin
@csrf_exempt  # it only reads: another method is a 405, never the CSRF page
@capability
@require_safe
@rate_limited("read")
def receipt_bundle(request: HttpRequest, receipt_id: uuid.UUID) -> HttpResponse:
    """The offline bundle (pages/bundle.py), as a file to download."""
    receipt = _receipt(receipt_id)
    if receipt is None:
        return render(request, "404.html", status=404)
    body, status = bundle.bundle_json(receipt)
    response = JsonResponse(
        body, status=status, json_dumps_params={"ensure_ascii": False, "indent": 2}
    )
    response["Content-Disposition"] = f'attachment; filename="{bundle.filename(receipt)}"'
    # The verification in it was made now: its `verified_at` is left out of the ETag.
    return conditional(
        request, response, NO_STORE, per_request=[body["verification"].get("verified_at") or ""]
    )


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's own 400s (a Host header not in ALLOWED_HOSTS, say)."""
    if _is_api(request):
        return problem(400, "bad-request", "Bad request", "The request could not be read.")
    return HttpResponse("Bad request\n", status=400, content_type="text/plain; charset=utf-8")


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return problem(403, "forbidden", "Forbidden", "This request is not allowed.")
    return render(request, "403.html", status=403)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # The path's headers (capability URL, any origin) are RouteHeadersMiddleware's.
    if _is_api(request):
        missing = receipt_not_found() if path_kind(request.path_info).capability else Problem(
            404, "not-found", "Not found", "There is no such route or receipt."
        )
        return missing.response()
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return problem(
            500, "server-error", "Server error", "Something went wrong on our side."
        )
    context: dict[str, Any] = {"site_url": settings.SITE_URL}
    return HttpResponse(render_to_string("500.html", context), status=500)

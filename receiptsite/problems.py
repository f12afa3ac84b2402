"""Every error answer of the API is RFC 9457 problem+json, made here.

Code anywhere below a view raises `Problem`; the API's route decorator
(receiptsite.api.routes.api_route) turns it into the answer, in one place. Every answer made
counts in `receiptsite_problems_total`, by its type (receiptsite/metrics).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import JsonResponse

from receiptsite import metrics


class Problem(Exception):
    """An answer that is an error: status, a slug for `type`, a title, a plain sentence, and any
    extra members (`errors`, `id`, ...). Headers (`Retry-After`, `Allow`) ride along."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(f"{status} {slug}: {detail}")
        self.status, self.slug, self.title, self.detail = status, slug, title, detail
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {
            "type": f"{settings.SITE_URL}/problems/{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }

    def response(self) -> JsonResponse:
        response = JsonResponse(
            self.body(),
            status=self.status,
            content_type="application/problem+json",
            json_dumps_params={"ensure_ascii": False},
        )
        if self.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="receipts"'
        for name, value in self.headers.items():
            response[name] = value
        metrics.count_problem(self.slug, self.status)
        return response


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JsonResponse:
    """The problem+json answer itself, for code that answers rather than raises."""
    return Problem(status, slug, title, detail, **extra).response()


def withdrawn_key(*, receipt_id: str, url: str) -> Problem:
    """410 `withdrawn`: a POST under the idempotency key of a receipt that was withdrawn. The
    key stays spent, so that a producer's retry never publishes withdrawn content again;
    nothing is stored. `id` and `url` name the withdrawn receipt (as `idempotency-key-reused`
    names its receipt)."""
    return Problem(
        410,
        "withdrawn",
        "The idempotency key names a withdrawn receipt",
        "This idempotency key named a receipt that has since been withdrawn: its content was "
        "erased and is not stored again. Nothing was stored; a new receipt needs a new key.",
        id=receipt_id,
        url=url,
    )

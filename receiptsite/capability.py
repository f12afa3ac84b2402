"""Capability URLs: a path that holds a receipt id is a secret link to that receipt.

What every route of one receipt shares, the JSON routes (receiptsite.api) and the pages
(receiptsite.pages) alike: the id in the path, parsed once; the one 404 of a receipt; the
headers that keep such a link out of referrers, search engines and caches; and, on
PostgreSQL, a read scoped to that one receipt (receipts/rowsecurity.py).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from receiptsite.problems import Problem
from receiptsite.receipts import rowsecurity

View = Callable[..., HttpResponse]

RECEIPT_ID_PATTERN = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"


class ReceiptIdConverter:
    """`<receipt_id:receipt_id>` in a URL pattern: a hyphenated UUID in any case, parsed once.
    Anything else does not match the route, so it is the site's ordinary 404."""

    regex = RECEIPT_ID_PATTERN

    def to_python(self, value: str) -> uuid.UUID:
        return uuid.UUID(value)

    def to_url(self, value: uuid.UUID | str) -> str:
        return str(value)


def receipt_not_found() -> Problem:
    """The one 404 of a receipt route: an unknown id, a malformed one and another tenant's
    receipt are answered alike, so that an answer never tells which it was."""
    return Problem(404, "not-found", "Not found", "There is no receipt with this id.")



def set_capability_headers(response: HttpResponse) -> HttpResponse:
    """A path holding a receipt id is a capability URL: keep it out of referrers, search
    engines and caches. Set on every answer under such a path by
    middleware.RouteHeadersMiddleware."""
    response["Referrer-Policy"] = "same-origin"
    response["X-Robots-Tag"] = "noindex"
    response["Cache-Control"] = "no-store"
    return response


def capability(view: View) -> View:
    """For pages whose path holds a receipt id (API routes say `capability=True`). On
    PostgreSQL the page reads that receipt by its id, and cannot list (rowsecurity). The
    headers are set for the path, whatever answers it (middleware.RouteHeadersMiddleware)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with rowsecurity.receipt_scope(kwargs["receipt_id"]):
            return view(request, *args, **kwargs)

    return wrapper


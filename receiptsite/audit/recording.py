"""Writing the API audit log: one entry for each request a tenant's key makes, whatever it is
answered. receiptsite.api.routes.api_route calls `audited` once the key is authenticated
(a 401 has no tenant, so no entry).

Where the entry is written, so that a stored receipt always has its entry and a read costs one
short statement:

- a writing method (POST): the view runs inside `transaction.atomic()` and the entry is
  inserted before that transaction commits, so the receipts and their entry commit together
  or not at all. A Problem raised by the view rolls its work back; the refusal's entry is then
  written on its own.
- ingest (a route with `own_transactions`): the view takes its own storing transaction, as
  short as it can be, and writes the entry inside it through `in_transaction()`, which the
  storing code calls last thing before its commit. An outer transaction would hold SQLite's
  single write lock (BEGIN IMMEDIATE) while the body is parsed, validated and redacted, and
  so serialise every producer's whole request. An answer that stored nothing (a replay, a
  refusal) has its entry written after the view, as a read's is.
- a read (GET, HEAD): after the view, one INSERT in a transaction of its own (on SQLite a
  transaction around the view would take the write lock at BEGIN for the whole view; around
  the INSERT alone it queues the entry on the writer lock, receiptsite/lib/sqlite/base.py).

Either way the entry is one INSERT and no SELECT. When the request already runs inside a
transaction (one per tenant request, on PostgreSQL), everything above happens inside it, the
atomic block a savepoint.

A request that no key authenticates has no tenant and no entry: `failed_authentication`
records it instead, in a table of its own (one INSERT in autocommit, before any tenant's
transaction could open), once api_route has taken its token from the client address's `auth`
rate limit. A request refused by that limit (429) is not recorded: the limit bounds the rows
an address can add.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from receiptsite import logconfig
from receiptsite.audit.models import AuditEntry, FailedAuthentication
from receiptsite.problems import Problem
from receiptsite.receipts.models import KeyRefused

READING_METHODS = ("GET", "HEAD", "OPTIONS")

# `<receipt_id:receipt_id>` in a URL pattern; any other parameter is `{name}`.
_PARAMETER = re.compile(r"<(?:(\w+):)?(\w+)>")


def route_name(request: HttpRequest) -> str:
    """The route as the contract names it, from the URL pattern that matched, never from the
    path (which may hold a receipt id): `POST /api/receipts`, `GET /api/receipts/{id}`. HEAD is
    served by the GET route."""
    method = "GET" if request.method == "HEAD" else request.method or ""
    match = request.resolver_match
    pattern = match.route if match is not None else ""
    path = _PARAMETER.sub(
        lambda m: "{id}" if m.group(1) == "receipt_id" else "{" + m.group(2) + "}", pattern
    )
    return f"{method} /{path}"


def touched(request: HttpRequest, receipt_ids: Iterable[str]) -> None:
    """For a tenant route's view: the receipts this request stored, replayed or read, which
    its audit entry names if it is answered 2xx (a receipt in the path is named without it)."""
    request.audit_receipt_ids = [str(i) for i in receipt_ids]  # type: ignore[attr-defined]


def receipt_ids(request: HttpRequest, response: HttpResponse) -> list[str]:
    """The receipts a successful answer stored or read: the one in the path, else those the
    view said it touched."""
    if not 200 <= response.status_code < 300:
        return []
    match = request.resolver_match
    if match is not None and "receipt_id" in match.kwargs:
        return [str(match.kwargs["receipt_id"])]
    return list(getattr(request, "audit_receipt_ids", []))


def problem_type(response: HttpResponse) -> str | None:
    """The problem's `type` as answered; null for a 2xx."""
    if 200 <= response.status_code < 300:
        return None
    if response.get("Content-Type") == "application/problem+json":
        with contextlib.suppress(ValueError, AttributeError):
            kind = json.loads(response.content).get("type")
            if isinstance(kind, str):
                return kind
    return f"{settings.SITE_URL}/problems/server-error" if response.status_code >= 500 else None


def _request_id(request: HttpRequest) -> str:
    return str(logconfig.request_id.get() or getattr(request, "request_id", ""))


def _write(
    request: HttpRequest, at: datetime, started: float, status: int, kind: str | None,
    ids: list[str],
) -> None:
    key = request.api_key  # type: ignore[attr-defined]
    entry = AuditEntry(
        at=at,
        request_id=_request_id(request),
        tenant_id=key.tenant_id,
        key_prefix=key.prefix,
        method=request.method or "",
        route=route_name(request),
        status=status,
        problem_type=kind,
        receipt_ids=ids,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
    AuditEntry.objects.insert([entry])


def _record(request: HttpRequest, at: datetime, started: float, response: HttpResponse) -> None:
    _write(request, at, started, response.status_code, problem_type(response),
           receipt_ids(request, response))


class _Pending:
    """The entry of a request whose view writes it inside its own storing transaction."""

    def __init__(self, request: HttpRequest, at: datetime, started: float) -> None:
        self.request, self.at, self.started = request, at, started
        self.written = False

    def write(self, status: int, ids: list[str]) -> None:
        _write(self.request, self.at, self.started, status, None, ids)
        self.written = True


def in_transaction(request: HttpRequest, status: int) -> Callable[[list[Any]], None]:
    """For the storing code of an `own_transactions` route: what writes the request's entry,
    answered `status`, naming the receipts it is given (services.Ingested), in the storing
    transaction. Call it last thing before that transaction commits."""
    pending: _Pending = request.audit_pending  # type: ignore[attr-defined]

    def write(done: list[Any]) -> None:
        pending.write(status, [item.receipt.uuid for item in done])

    return write


def audited(
    request: HttpRequest,
    limit: Callable[[], None] | None,
    view: Callable[[], HttpResponse],
    own_transactions: bool = False,
) -> HttpResponse:
    """Run the rate limit and the view of an authenticated tenant request, and write its one
    entry (see the module's docstring). A Problem becomes its answer here, and is logged."""
    at, started = timezone.now(), time.monotonic()
    try:
        if limit is not None:
            limit()  # outside the transaction: a refused request still spends its token
        if own_transactions and request.method not in READING_METHODS:
            pending = request.audit_pending = _Pending(request, at, started)  # type: ignore[attr-defined]
            response = view()
            if pending.written:
                return response
        elif request.method in READING_METHODS:
            response = view()
        else:
            with transaction.atomic():
                response = view()
                _record(request, at, started, response)
            return response
    except Problem as error:
        response = error.response()
    except Exception as error:
        # A fault of the site (a 500): logged too, as far as the database still answers. A
        # database that does not answer (503) has nowhere to write the entry.
        if not isinstance(error, DatabaseError):
            with contextlib.suppress(Exception), transaction.atomic():
                _write(request, at, started, 500, f"{settings.SITE_URL}/problems/server-error",
                       [])
        raise
    # A transaction of its own, even for one INSERT: on SQLite, BEGIN IMMEDIATE queues the
    # entry on the writer's locks (receiptsite/lib/sqlite/base.py), where autocommit
    # would queue it on SQLite's sleeping busy handler. Within the request's transaction
    # (PostgreSQL), nothing more than the INSERT.
    with transaction.atomic(savepoint=False):
        _record(request, at, started, response)
    return response


def failed_authentication(request: HttpRequest, refused: KeyRefused, address: str) -> None:
    """Record a request to a tenant route that no key authenticated, from client `address`:
    why, and the prefix of the stored key it named if any, never the key; the path as the
    logs write it (a receipt id cut short)."""
    fields = FailedAuthentication._meta
    FailedAuthentication.objects.create(
        at=timezone.now(),
        request_id=_request_id(request),
        client_address=address[: fields.get_field("client_address").max_length],
        method=request.method or "",
        path=logconfig.mask(request.path)[: fields.get_field("path").max_length],
        reason=refused.reason,
        key_prefix=refused.key_prefix,
    )

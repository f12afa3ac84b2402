"""The shape of every JSON route: method checks, API key authentication (and the limit and
record of its failures), rate limits, the audit log's entry, a capability's scope
(receiptsite/capability.py), and the one place a Problem becomes its problem+json answer.

Every JSON route is one `@api_route(...)`; the order of what it does is fixed here, not by
the order decorators happen to be stacked in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from receiptsite.api.ratelimit import client_address, throttle
from receiptsite.audit.recording import audited, failed_authentication
from receiptsite.capability import View
from receiptsite.middleware import cross_origin, mark_api
from receiptsite.problems import Problem
from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import ApiKey, AuthFailure, KeyRefused


def json_response(body: Any, status: int = 200) -> JsonResponse:
    """Every JSON answer: UTF-8 as it is (no \\u escapes), any JSON value at the top."""
    return JsonResponse(body, status=status, safe=False, json_dumps_params={"ensure_ascii": False})


class TenantRequest(HttpRequest):
    """A request whose bearer key was authenticated: views of tenant routes take this."""

    api_key: ApiKey


def _method_not_allowed(request: HttpRequest, allowed: tuple[str, ...]) -> Problem:
    return Problem(
        405,
        "method-not-allowed",
        "Method not allowed",
        f"This route answers {', '.join(allowed)}, not {request.method}.",
        headers={"Allow": ", ".join(allowed)},
    )


def authenticate(request: HttpRequest) -> ApiKey:
    """The active key of `Authorization: Bearer <key>`, with its tenant; else Problem 401.

    A failure takes a token from the client address's bucket in the `auth` rate limit, and is
    recorded without the key (receiptsite/audit/recording.py). Once the address has spent
    that limit, its failures are answered 429 and not recorded. A valid key never touches
    that bucket: it is limited per key, by the route's own scope."""
    header = request.headers.get("Authorization", "").strip()
    scheme, _, raw = header.partition(" ")
    found: ApiKey | KeyRefused
    if header and scheme.lower() != "bearer":
        found = KeyRefused(AuthFailure.MALFORMED, "")
    else:
        found = ApiKey.look_up(raw.strip())
    if isinstance(found, ApiKey):
        return found
    address = client_address(request)
    throttle("auth", address)
    failed_authentication(request, found, address)
    raise Problem(
        401,
        "unauthorized",
        "A valid API key is required",
        "Send an active API key as `Authorization: Bearer <key>`. "
        "The key given is missing, unknown or revoked.",
    )


def api_route(
    *allowed: str,
    tenant: bool = False,
    public: bool = False,
    capability: bool = False,
    rate: dict[str, str] | None = None,
    own_transactions: bool = False,
) -> Callable[[View], View]:
    """Every JSON route, in one order: the method (405 problem+json with `Allow`; HEAD where
    GET is served), then with `tenant` the bearer key (401, or 429 once the client address has
    spent its `auth` limit of failures; the view gets a TenantRequest),
    then the rate limit of `rate[method]` (per key on tenant routes, per client address on
    public ones), then the view. A Problem raised anywhere below becomes its answer here.
    `public` routes may be read from any origin; `capability` routes (a receipt id in the
    path) keep their links private. A tenant route with `own_transactions` writes in
    transactions of its own and its audit entry inside them (receiptsite/audit/recording.py);
    the others' writes run in one transaction with their entry. Bearer keys, never cookies:
    no CSRF token is needed, and a wrong method is a 405, never Django's CSRF page."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                method = "GET" if request.method == "HEAD" else request.method or ""
                if method not in allowed:
                    raise _method_not_allowed(request, allowed)
                who = client_address(request)
                if tenant:
                    key = authenticate(request)
                    cast(TenantRequest, request).api_key = key
                    who = key.prefix
                limit = functools.partial(throttle, rate[method], who) if (
                    rate and method in rate) else None
                serve = functools.partial(view, request, *args, **kwargs)
                if tenant:
                    # One API audit entry per request of a tenant (receiptsite/audit), written
                    # in the request's transaction; on PostgreSQL that transaction first sets
                    # the tenant, for row-level security (receipts/rowsecurity.py). The rate
                    # limit's token is taken before it opens, so that the bucket's row is not
                    # locked for the whole request; `audited` answers and logs a refusal.
                    replay = _taken_now(limit)
                    with rowsecurity.tenant_transaction(key.tenant_id):
                        response = audited(request, replay, serve, own_transactions)
                else:
                    if limit is not None:
                        limit()
                    if capability:
                        # A public read of one receipt by its id: it sees that receipt only.
                        with rowsecurity.receipt_scope(kwargs["receipt_id"]):
                            response = serve()
                    else:
                        response = serve()
            except Problem as error:
                response = error.response()
            return response

        # The path's headers (capability URL, any origin) are RouteHeadersMiddleware's.
        return csrf_exempt(mark_api(cross_origin(wrapper) if public else wrapper))

    return decorator


def _taken_now(limit: Callable[[], None] | None) -> Callable[[], None] | None:
    """Take the rate limit's token now, before the tenant's transaction opens, and return what
    replays the outcome where `audited` takes it: nothing when it was granted, the same 429
    Problem when it was refused."""
    if limit is None:
        return limit
    try:
        limit()
    except Problem as error:
        refused = error  # the name `error` ends with the except clause

        def refuse_again() -> None:
            raise refused

        return refuse_again
    return None



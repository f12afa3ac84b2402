"""The shape of every route: ids in paths, capability headers, API key authentication,
method checks, rate limits, and the one place a Problem becomes its problem+json answer.

Every JSON route is one `@api_route(...)`; the order of what it does is fixed here, not by
the order decorators happen to be stacked in.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from receiptsite.api import ratelimit
from receiptsite.audit.recording import audited
from receiptsite.problems import Problem
from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import ApiKey

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


class TenantRequest(HttpRequest):
    """A request whose bearer key was authenticated: views of tenant routes take this."""

    api_key: ApiKey


def set_capability_headers(response: HttpResponse) -> HttpResponse:
    """A path holding a receipt id is a capability URL: keep it out of referrers, search
    engines and caches."""
    response["Referrer-Policy"] = "same-origin"
    response["X-Robots-Tag"] = "noindex"
    response["Cache-Control"] = "no-store"
    return response


def capability(view: View) -> View:
    """For pages whose path holds a receipt id (API routes say `capability=True`). On
    PostgreSQL the page reads that receipt by its id, and cannot list (rowsecurity)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with rowsecurity.receipt_scope(kwargs["receipt_id"]):
            response = view(request, *args, **kwargs)
        return set_capability_headers(response)

    return wrapper


def _method_not_allowed(request: HttpRequest, allowed: tuple[str, ...]) -> Problem:
    return Problem(
        405,
        "method-not-allowed",
        "Method not allowed",
        f"This route answers {', '.join(allowed)}, not {request.method}.",
        headers={"Allow": ", ".join(allowed)},
    )


def authenticate(request: HttpRequest) -> ApiKey:
    """The active key of `Authorization: Bearer <key>`, with its tenant; Problem 401 else."""
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    key = ApiKey.authenticate(raw.strip()) if scheme.lower() == "bearer" else None
    if key is None:
        raise Problem(
            401,
            "unauthorized",
            "A valid API key is required",
            "Send an active API key as `Authorization: Bearer <key>`. "
            "The key given is missing, unknown or revoked.",
        )
    return key


def api_route(
    *allowed: str,
    tenant: bool = False,
    public: bool = False,
    capability: bool = False,
    rate: dict[str, str] | None = None,
    own_transactions: bool = False,
) -> Callable[[View], View]:
    """Every JSON route, in one order: the method (405 problem+json with `Allow`; HEAD where
    GET is served), then with `tenant` the bearer key (401; the view gets a TenantRequest),
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
            if capability:
                set_capability_headers(response)
            if public:
                response["Access-Control-Allow-Origin"] = "*"
            return response

        return csrf_exempt(wrapper)

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


# --- rate limits: token buckets shared by every worker and host (api/ratelimit.py) ------

def _limits() -> dict[str, tuple[float, float]] | None:
    # Parsed and checked once, at start (receiptsite.config.rate_limits); None is off.
    limits: dict[str, tuple[float, float]] | None = settings.RATE_LIMITS
    return limits


def client_address(request: HttpRequest) -> str:
    """The client's address; X-Forwarded-For is believed only from TRUSTED_PROXIES."""
    address = request.META.get("REMOTE_ADDR", "")
    if address in settings.TRUSTED_PROXIES:
        hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        for hop in reversed(hops):
            if hop and hop not in settings.TRUSTED_PROXIES:
                return hop
    return address


def throttle(scope: str, who: str, cost: int = 1, now: float | None = None) -> None:
    """Take `cost` tokens from `who`'s bucket in `scope`; Problem 429 when there are too few.
    A cost above the burst is charged as the whole burst, so it can pass once full. `now`
    (seconds since the epoch) is for tests."""
    limits = _limits()
    if limits is None or scope not in limits or cost <= 0:
        return
    burst, rate = limits[scope]
    key = ratelimit.bucket_key(scope, who)
    wait = ratelimit.take(key, burst, rate, min(float(cost), burst), now)
    if wait <= 0:
        return
    seconds = max(1, math.ceil(wait))
    raise Problem(
        429,
        "rate-limited",
        "Too many requests",
        f"Slow down: try again in {seconds} second(s).",
        headers={"Retry-After": str(seconds)},
    )


def rate_limited(scope: str) -> Callable[[View], View]:
    """For pages: one token per request from the client address's bucket in `scope`."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                throttle(scope, client_address(request))
            except Problem as error:
                return error.response()
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


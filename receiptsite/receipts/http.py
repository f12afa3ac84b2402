"""Small HTTP helpers shared by the JSON API and the pages: ids in paths, capability headers,
API key authentication, method checks, rate limits."""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from receiptsite.problems import problem
from receiptsite.receipts.models import ApiKey

View = Callable[..., HttpResponse]

UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


def parse_receipt_id(value: str) -> uuid.UUID | None:
    """A receipt id from a path: a hyphenated UUID (any case), else None."""
    return uuid.UUID(value) if UUID_RE.match(value) else None


def capability(view: View) -> View:
    """A path holding a receipt id is a capability URL: keep it out of referrers, search
    engines and caches. Applied to every route whose path holds a receipt id."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        response["Referrer-Policy"] = "same-origin"
        response["X-Robots-Tag"] = "noindex"
        response["Cache-Control"] = "no-store"
        return response

    return wrapper


def public_json(view: View) -> View:
    """Public JSON for verifiers on other sites: any origin may read it."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        response["Access-Control-Allow-Origin"] = "*"
        return response

    return wrapper


def methods(*allowed: str) -> Callable[[View], View]:
    """Like require_http_methods, but the 405 is problem+json as every API error is."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in allowed and not (
                request.method == "HEAD" and "GET" in allowed
            ):
                response = problem(
                    405,
                    "method-not-allowed",
                    "Method not allowed",
                    f"This route answers {', '.join(allowed)}, not {request.method}.",
                )
                response["Allow"] = ", ".join(allowed)
                return response
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def api_key_required(view: View) -> View:
    """Authenticate `Authorization: Bearer <key>`; sets request.api_key (tenant included)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        key = ApiKey.authenticate(raw.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            return problem(
                401,
                "unauthorized",
                "A valid API key is required",
                "Send an active API key as `Authorization: Bearer <key>`. "
                "The key given is missing, unknown or revoked.",
            )
        request.api_key = key  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return wrapper


# --- rate limits: token buckets in the cache -------------------------------------------------

DEFAULT_LIMITS = {"ingest": (200.0, 50.0), "read": (30.0, 5.0)}  # (burst, per second)


def _limits() -> dict[str, tuple[float, float]] | None:
    value = settings.RATE_LIMITS.lower()
    if value == "off":
        return None
    limits = dict(DEFAULT_LIMITS)
    if value not in ("", "on"):
        for part in value.split(","):
            name, _, spec = part.partition("=")
            burst, _, rate = spec.partition("/")
            limits[name.strip()] = (float(burst), float(rate))
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


def throttle(request: HttpRequest, scope: str, who: str, cost: int = 1) -> HttpResponse | None:
    """Take `cost` tokens from `who`'s bucket in `scope`; the 429 answer when there are too
    few. A cost above the burst is charged as the whole burst, so it can pass once full."""
    limits = _limits()
    if limits is None or scope not in limits:
        return None
    burst, rate = limits[scope]
    wait = _take(f"rl:{scope}:{who}", burst, rate, min(float(cost), burst))
    if wait <= 0:
        return None
    seconds = int(wait) + 1
    response = problem(
        429, "rate-limited", "Too many requests", f"Slow down: try again in {seconds} second(s)."
    )
    response["Retry-After"] = str(seconds)
    return response


def rate_limited(scope: str, who: Callable[[HttpRequest], str]) -> Callable[[View], View]:
    """One token per request from `who(request)`'s bucket in `scope`."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            return throttle(request, scope, who(request)) or view(request, *args, **kwargs)

        return wrapper

    return decorator


def _take(key: str, burst: float, rate: float, cost: float) -> float:
    """Take `cost` tokens; return 0 when allowed, else the seconds until enough are free."""
    now = time.monotonic()
    tokens, stamp = cache.get(key, (burst, now))
    tokens = min(burst, tokens + (now - stamp) * rate)
    timeout = int(burst / rate) + 60
    if tokens < cost:
        cache.set(key, (tokens, now), timeout=timeout)
        return (cost - tokens) / rate
    cache.set(key, (tokens - cost, now), timeout=timeout)
    return 0.0

"""Site-wide middleware: the metrics of every request (first of all), the Host of the paths
asked on a private address and the forwarded scheme (both before anything reads them), request
ids, the headers a route's path asks for (capability URLs, routes readable from any origin),
the browser's layers kept off the API's routes, and a clear 503 while the database is
unreachable."""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.middleware import locale
from django.urls import URLPattern, get_resolver, get_urlconf
from django.urls.resolvers import RoutePattern
from django.utils import translation
from django.utils.cache import patch_vary_headers
from django.utils.translation import get_supported_language_variant
from django_htmx import middleware as htmx

from receiptsite import logconfig, metrics
from receiptsite.api.ratelimit import from_trusted_proxy
from receiptsite.capability import ReceiptIdConverter, View, set_capability_headers
from receiptsite.problems import Problem

logger = logging.getLogger(__name__)

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@functools.cache
def _site_host() -> str:
    """A host ALLOWED_HOSTS takes: SITE_URL's when it does (the default), else the first one
    it names outright (ALLOWED_HOSTS may name only the hosts a proxy forwards, not SITE_URL's).
    Worked out once (the settings are read once, at start), and again when a test changes
    either setting."""
    own = urlsplit(settings.SITE_URL).netloc.rpartition("@")[2]
    if validate_host(split_domain_port(own)[0], settings.ALLOWED_HOSTS):
        return own
    for host in settings.ALLOWED_HOSTS:
        if host != "*" and not host.startswith("."):
            return host
    return own


def _forget_site_host(*, setting: str, **kwargs: object) -> None:
    if setting in ("SITE_URL", "ALLOWED_HOSTS"):
        _site_host.cache_clear()


setting_changed.connect(_forget_site_host)


class MetricsMiddleware:
    """Every request's duration, by the name of the route that answered it, its method and its
    status (receiptsite.metrics; never its path). First of all middleware, so that it times
    what every other one does, and sees the answer each of them may give instead of the view;
    it reads neither the Host nor the scheme."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        metrics.observe_request(request, response.status_code, time.perf_counter() - started)
        return response


class HealthCheckHostMiddleware:
    """The paths of settings.ANY_HOST_PATHS (`/healthz`, `/metrics`) answer whatever the Host.
    A load balancer, an orchestrator or Prometheus asks each host on its private address
    (`Host: 10.0.0.5:8000`), which ALLOWED_HOSTS rightly does not name: Django would answer 400
    and log an error with a traceback. Their answers hold no link and nothing made from the
    Host, so for those paths the request is taken as asked of the site's own host (SITE_URL's);
    every other path keeps Django's Host check. Before anything reads the Host."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info in settings.ANY_HOST_PATHS:
            request.META["HTTP_HOST"] = _site_host()
            request.META.pop("HTTP_X_FORWARDED_HOST", None)
        return self.get_response(request)


class ForwardedProtoMiddleware:
    """X-Forwarded-Proto, believed from TRUSTED_PROXIES only: from one of them, `https` or
    `http` there is the request's scheme (what request.is_secure() says, so the redirect to
    https, HSTS and the Secure cookies follow it); from any other peer it is ignored, and the
    scheme is the connection's own. Django's SECURE_PROXY_SSL_HEADER, left unset, would believe
    it from anyone. Gunicorn makes the same decision (gunicorn.conf.py's forwarded_allow_ips);
    this makes it hold under any server. Before anything asks for the scheme."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        forwarded = request.META.get("HTTP_X_FORWARDED_PROTO")
        if forwarded is not None and from_trusted_proxy(request):
            # The first value: the scheme the client used with the outermost proxy.
            scheme = forwarded.split(",")[0].strip().lower()
            if scheme in ("http", "https"):
                request.META["wsgi.url_scheme"] = scheme
        return self.get_response(request)


class RequestIDMiddleware:
    """Echo a well-formed incoming X-Request-ID, or make one; set it on every response, and on
    every log line written while the request is served (logconfig.request_id)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")  # request.headers: 8 µs more
        request_id = incoming if REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex
        request.request_id = request_id  # type: ignore[attr-defined]
        token = logconfig.request_id.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            # A worker serves request after request: the next line must not carry this id.
            logconfig.request_id.reset(token)
        response["X-Request-ID"] = request_id
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


def cross_origin(view: View) -> View:
    """Mark a view readable from any origin (the public JSON routes, the offline bundle):
    RouteHeadersMiddleware sends `Access-Control-Allow-Origin: *` on every answer of its path,
    a 404 for a malformed id included."""
    view.cross_origin = True  # type: ignore[attr-defined]
    return view


def mark_api(view: View) -> View:
    """Mark a view a route of the API (every api.routes.api_route's, /metrics, OTLP's): no
    session, bearer keys if any, never cookies, and an answer in English whatever the
    request's language. The layers of BrowserOnly (and LocaleMiddleware) let its requests
    straight through."""
    view.is_api = True  # type: ignore[attr-defined]
    return view


@dataclass(frozen=True)
class PathKind:
    capability: bool = False  # the path holds a receipt id, or lies where one would
    cross_origin: bool = False  # a route readable from any origin
    api: bool = False  # a route of the API (mark_api)


@functools.cache
def _routes(urlconf: str | None) -> tuple[re.Pattern[str], tuple[PathKind, ...], tuple[str, ...]]:
    """The URLconf's routes as one pattern, in their order, each a group `r<i>` that takes any
    segment where the route takes a receipt id (so that a malformed id is still that route's
    path), with each route's kind; and the capability prefixes, each route's path up to its
    receipt id (`/run/`, `/api/receipt/`...). One pattern: trying two dozen in turn took 12 to
    20 µs of every request."""
    shapes: list[str] = []
    kinds: list[PathKind] = []
    prefixes: list[str] = []
    for entry in get_resolver(urlconf).url_patterns:
        if not (isinstance(entry, URLPattern) and isinstance(entry.pattern, RoutePattern)):
            continue  # the admin's include: neither
        route = str(entry.pattern)
        converters = list(entry.pattern.converters.values())
        holds_id = any(isinstance(c, ReceiptIdConverter) for c in converters)
        # A receipt id's place takes any segment (a malformed id is still this route's path);
        # another parameter takes what its converter does (a tile's index spans segments).
        parts = re.split(r"<[^>]+>", route)
        loose = re.escape(parts[0]) + "".join(
            ("[^/]+" if isinstance(c, ReceiptIdConverter) else f"(?:{c.regex})") + re.escape(p)
            for c, p in zip(converters, parts[1:], strict=True)
        )
        kinds.append(PathKind(
            holds_id,
            bool(getattr(entry.callback, "cross_origin", False)),
            bool(getattr(entry.callback, "is_api", False)),
        ))  # fmt: skip
        shapes.append(f"(?P<r{len(shapes)}>/{loose})")
        if holds_id:
            prefixes.append("/" + route[: route.index("<")])
    pattern = re.compile("|".join(shapes))
    if pattern.groups != len(shapes):  # a converter's own group would hide which route matched
        raise ImproperlyConfigured(f"a converter of {urlconf or settings.ROOT_URLCONF} has a "
                                   "capturing group: make it (?:...)")  # fmt: skip
    return pattern, tuple(kinds), tuple(prefixes)


def path_kind(path: str) -> PathKind:
    """What the URLconf's routes say of `path` (a request's path_info): the first route whose
    shape it has decides (`/api/receipts/batch` is that route, not an id); a path of no route
    under a capability prefix (`/run/<anything>/...`) is a capability URL still."""
    pattern, kinds, prefixes = _routes(get_urlconf())
    found = pattern.fullmatch(path)
    if found is not None and found.lastgroup is not None:
        return kinds[int(found.lastgroup[1:])]
    return PathKind(capability=path.startswith(prefixes))


def kind_of(request: HttpRequest) -> PathKind:
    """path_kind of the request's path, worked out once per request."""
    try:
        return request.path_kind  # type: ignore[attr-defined,no-any-return]
    except AttributeError:
        kind = request.path_kind = path_kind(request.path_info)  # type: ignore[attr-defined]
        return kind


class RouteHeadersMiddleware:
    """The headers a path asks for, on every answer of it, whatever made the answer (the view,
    the 404 of a malformed id, the CSRF 403, the redirect to https, an error page): a
    capability URL's (capability.set_capability_headers) and, on a route marked
    `cross_origin`, `Access-Control-Allow-Origin: *`. Keyed on the path (path_kind), and placed
    outside SecurityMiddleware and CsrfViewMiddleware so that their answers carry them too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        kind = kind_of(request)
        if kind.capability:
            set_capability_headers(response)
        if kind.cross_origin:
            response["Access-Control-Allow-Origin"] = "*"
        return response


DATABASE_ERRORS = (OperationalError, InterfaceError)


def database_unavailable(error: Exception) -> Problem:
    """The 503 of a database that does not answer (logged, without a traceback)."""
    logger.error("database unavailable: %s", type(error).__name__)
    return Problem(
        503,
        "database-unavailable",
        "The database is not answering",
        "The site cannot reach its database right now. Try again shortly.",
        headers={"Retry-After": "5"},
    )


class DatabaseUnavailableMiddleware:
    """A database that does not answer is a 503 problem, never a bare 500 page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_ERRORS):
            return database_unavailable(exception).response()
        return None


class QueryLanguageMiddleware:
    """`?lang=zh-hans` picks the page's language: a plain link, no cookie, no POST.
    Without it, LocaleMiddleware follows Accept-Language."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if kind_of(request).api:
            return self.get_response(request)  # English (LocaleMiddleware)
        wanted = request.GET.get("lang", "")
        if wanted:
            try:
                code = get_supported_language_variant(wanted)
            except LookupError:
                code = ""
            if code:
                translation.activate(code)
                request.LANGUAGE_CODE = code
        response = self.get_response(request)
        patch_vary_headers(response, ("Accept-Language",))
        return response


# Powerful features the site never uses, refused to its own pages and to anything they embed.
# Only names Chromium and Firefox know (an unknown one is a console error); the clipboard is
# left alone, since the page's "copy" buttons write to it.
PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "encrypted-media",
        "fullscreen",
        "geolocation",
        "gyroscope",
        "hid",
        "idle-detection",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "picture-in-picture",
        "publickey-credentials-get",
        "screen-wake-lock",
        "serial",
        "usb",
        "xr-spatial-tracking",
    )
)


class ResourcePolicyMiddleware:
    """Cross-Origin-Resource-Policy and Permissions-Policy on every response, static files and
    error pages included.

    CORP is same-origin everywhere, the public JSON routes too: it only governs no-cors loads
    (an <img> or <script> on another site), never a CORS fetch(), so a verifier on another
    site still reads them through their `Access-Control-Allow-Origin: *`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response


# --- the layers only a browser's pages use ------------------------------------------------------


class BrowserOnly:
    """For a layer only the pages and the admin use: on an API route's path (mark_api) the
    request goes straight on to the next layer. An API route takes bearer keys, never cookies,
    and answers in English: it reads no session, no signed-in user, no messages, no htmx and
    no language. Run there, those layers took about a quarter of /healthz's time in-process.
    Django's admin checks still find them in MIDDLEWARE (they are its classes' subclasses)."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if kind_of(request).api:
            return cast(HttpResponse, self.get_response(request))  # type: ignore[attr-defined]
        return cast(HttpResponse, super().__call__(request))  # type: ignore[misc]


class SessionMiddleware(BrowserOnly, sessions.SessionMiddleware):
    pass


class AuthenticationMiddleware(BrowserOnly, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(BrowserOnly, messages.MessageMiddleware):
    pass


class HtmxMiddleware(BrowserOnly, htmx.HtmxMiddleware):
    pass


class LocaleMiddleware(locale.LocaleMiddleware):
    """Django's, on every path but an API route's, which runs in settings.LANGUAGE_CODE
    whatever the thread's previous page activated, and says nothing of languages (no
    `Vary: Accept-Language`, no `Content-Language`): its answers are the same in every one."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if kind_of(request).api:
            translation.activate(settings.LANGUAGE_CODE)
            return cast(HttpResponse, self.get_response(request))
        return cast(HttpResponse, super().__call__(request))


"""The site's Prometheus metrics: what each process counts as it serves (this module), and what
`/metrics` answers (receiptsite/metrics/exposition.py), in Prometheus' text format.

Counted as requests are served, by the code that serves them:

- `receiptsite_http_request_duration_seconds{route, method, status}`: a histogram of every
  request the site answers (MetricsMiddleware, first of all middleware), by the name of the
  URL pattern that answered it, never by its path: a path may hold a receipt's capability
  URL (`/run/<id>`), which must reach no metric and no log;
- `receiptsite_problems_total{problem, status}`: every problem+json answer, by its type's
  slug (Problem.response(), the one place a problem becomes its answer; gunicorn.conf.py's
  answers to requests gunicorn refuses itself count too);
- `receiptsite_rate_limit_refusals_total{limit}`: every 429 of a rate limit, by its scope
  (api/ratelimit.throttle);
- `receiptsite_receipts_stored_total`: receipts stored (receipts/services.py), once their
  transaction has committed; a replay of an idempotency key stores nothing.

Under gunicorn each worker is a process of its own: gunicorn.conf.py gives every worker one
directory (PROMETHEUS_MULTIPROC_DIR, set in the master before any worker imports this), where
prometheus_client's multiprocess mode keeps each process's values, and `/metrics` adds them up
whichever worker answers. Without it (runserver, the tests' own process) the values are this
process's. Label values come from fixed sets only (pattern names, methods, statuses, slugs,
scopes), so that no client can make a series of its own.
"""

from __future__ import annotations

import functools

import prometheus_client
from django.db import transaction
from django.http import HttpRequest

# The `_created` series (when each series began) say nothing an operator alerts on, and the
# multiprocess mode cannot give them: off, so both modes show the same series.
prometheus_client.disable_created_metrics()

# Up to gunicorn's worker timeout (30 s): a slower request is killed, never observed.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUEST_DURATION = prometheus_client.Histogram(
    "receiptsite_http_request_duration_seconds",
    "Time to answer a request, until the response is ready, by the URL pattern's name "
    "(`unmatched`: no route; `static`: a static file), method and status",
    ["route", "method", "status"],
    buckets=DURATION_BUCKETS,
)
PROBLEMS = prometheus_client.Counter(
    "receiptsite_problems_total",
    "problem+json answers (RFC 9457), by the slug of their type and their status",
    ["problem", "status"],
)
RATE_LIMIT_REFUSALS = prometheus_client.Counter(
    "receiptsite_rate_limit_refusals_total",
    "Requests refused by a rate limit (429), by the limit's scope (ingest, read, auth)",
    ["limit"],
)
RECEIPTS_STORED = prometheus_client.Counter(
    "receiptsite_receipts_stored_total",
    "Receipts stored (single, batch and OTLP ingest), counted once their transaction committed",
)

# Methods outside this set are counted as `other`: a method is whatever a client writes.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@functools.cache
def _static_url() -> str:
    from django.conf import settings

    return str(settings.STATIC_URL or "/static/")


def route_of(request: HttpRequest) -> str:
    """The name of the URL pattern that answered `request` (`admin:index` in the admin's
    namespace); `unnamed` for a pattern without a name, `static` for a static file (WhiteNoise
    answers before any pattern is matched), `unmatched` for a path no pattern matches."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "static" if request.path_info.startswith(_static_url()) else "unmatched"
    if not match.url_name:
        return "unnamed"
    return str(match.view_name)


def observe_request(request: HttpRequest, status: int, seconds: float) -> None:
    method = request.method if request.method in METHODS else "other"
    REQUEST_DURATION.labels(route_of(request), method, str(status)).observe(seconds)


def count_problem(slug: str, status: int) -> None:
    PROBLEMS.labels(slug, str(status)).inc()


def count_refusal(limit: str) -> None:
    RATE_LIMIT_REFUSALS.labels(limit).inc()


def count_stored(number: int) -> None:
    """`number` receipts stored, counted once the transaction that stored them has committed
    (at once outside any transaction); a transaction that rolls back counts nothing."""
    if number > 0:
        transaction.on_commit(functools.partial(RECEIPTS_STORED.inc, number))

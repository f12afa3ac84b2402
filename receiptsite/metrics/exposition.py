"""`GET /metrics`: the site's metrics in Prometheus' text format (or OpenMetrics, when the
scraper asks for it), for a scraper on a private address only.

Who may read it: a peer (REMOTE_ADDR, the connection's own address) within
METRICS_ALLOWED_FROM (the loopback unless set), asking directly. A request that carries
X-Forwarded-For (or Forwarded, or X-Real-IP) came through a proxy, from whoever the proxy
serves, and is refused whichever proxy it is (trusted or not): a proxy that forwards every
path does not expose this one. Refused is the 404 of a path no route has, the same answer,
so that from outside there is nothing to tell apart. The path answers any Host
(settings.ANY_HOST_PATHS), so that Prometheus may scrape each host on its private address.

What it says, besides the counts of receiptsite/metrics (summed over gunicorn's workers), is
read from the database at scrape time by SiteCollector, with the functions /healthz uses; a
scrape writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from receiptsite.api.ratelimit import address_of
from receiptsite.api.views import _witness_lag
from receiptsite.ledger import keyring, log, witnesses
from receiptsite.middleware import DATABASE_ERRORS, mark_api
from receiptsite.receipts.models import SignedCheckpoint

# The headers a proxy adds to what it forwards (X-Real-IP: nginx's other habit).
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def scrape_allowed(request: HttpRequest) -> bool:
    """Whether `request` may read the metrics: asked directly (no proxy's forwarding header)
    by a peer within METRICS_ALLOWED_FROM (networks parsed at start by
    config.metrics_allowed_from)."""
    if any(header in request.META for header in FORWARDING_HEADERS):
        return False
    peer = address_of(request.META.get("REMOTE_ADDR", ""))
    return peer is not None and any(peer in network for network in settings.METRICS_ALLOWED_FROM)


@mark_api
@csrf_exempt  # a POST from outside gets the 404 too, never the CSRF page
def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        raise Http404("no such route")
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(registry())
    response = HttpResponse(b"" if request.method == "HEAD" else body, content_type=content_type)
    response["Cache-Control"] = "no-store"
    patch_vary_headers(response, ("Accept",))
    return response


class _ThisProcess:
    """The default registry's collectors (this process's metrics, and its CPU, memory and
    garbage collector), for a registry of one scrape."""

    def collect(self) -> Iterator[Metric]:
        return iter(REGISTRY.collect())


def registry() -> CollectorRegistry:
    """What one scrape reads: under gunicorn every worker's values, summed from the
    multiprocess directory (a worker's own process metrics would describe one worker only, so
    there are none); otherwise this process's; and the database's gauges."""
    scrape = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(scrape)
    else:
        scrape.register(_ThisProcess())
    scrape.register(SiteCollector())
    return scrape


def _gauge(name: str, documentation: str, value: float | None) -> Iterator[GaugeMetricFamily]:
    if value is not None:
        yield GaugeMetricFamily(name, documentation, value=value)


def _age(then: datetime | None, now: datetime) -> float | None:
    return max(0.0, (now - then).total_seconds()) if then is not None else None


class SiteCollector:
    """The gauges read from the database when a scrape asks (reads only): whether the site is
    ready as /healthz judges it, with each of its checks; the log's latest signed checkpoint,
    its size and age; and, with a witness policy, the lag of the witnessed checkpoint as
    /healthz reports it (api.views._witness_lag). Statements: one each for the key's status,
    the log's latest checkpoint as served, its size and signing time, and, with a policy, the
    witnessed checkpoint. A database that does not answer is `receiptsite_ready_check
    {check="database"} 0`, and the rest is left out: it cannot be known."""

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration: every scrape reads afresh

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        checks = GaugeMetricFamily(
            "receiptsite_ready_check",
            "1 when the check of /healthz passes, 0 when it fails (database, signing_key, log)",
            labels=["check"],
        )
        try:
            found = self._read()
        except DATABASE_ERRORS:
            checks.add_metric(["database"], 0)
            yield from _gauge("receiptsite_ready", "1 when /healthz would answer 200, else 0", 0)
            yield checks
            return
        key_usable, signed, latest, lag = found
        checks.add_metric(["database"], 1)
        checks.add_metric(["signing_key"], int(key_usable))
        checks.add_metric(["log"], int(signed is not None))
        ready = key_usable and signed is not None
        yield from _gauge(
            "receiptsite_ready", "1 when /healthz would answer 200, else 0", int(ready)
        )
        yield checks
        size, signed_at = latest if latest is not None else (None, None)
        yield from _gauge(
            "receiptsite_log_tree_size",
            "Leaves in the log's latest signed checkpoint (every receipt ever stored)",
            size,
        )
        yield from _gauge(
            "receiptsite_log_checkpoint_age_seconds",
            "Seconds since the log's latest checkpoint was signed (the database's signed_at)",
            _age(signed_at, now),
        )
        if lag is None:
            return
        yield from _gauge(
            "receiptsite_witness_lag_leaves",
            "Leaves the log has grown since the largest checkpoint its witnesses' quorum "
            "cosigned (/healthz's witnesses.leaves_behind)",
            lag["leaves_behind"],
        )
        yield from _gauge(
            "receiptsite_witnessed_tree_size",
            "Leaves in the largest checkpoint the witnesses' quorum cosigned",
            lag["witnessed_size"],
        )
        witnessed_at = lag["witnessed_at"]
        yield from _gauge(
            "receiptsite_witnessed_checkpoint_age_seconds",
            "Seconds since the witnesses' quorum cosigned the largest witnessed checkpoint "
            "(/healthz's witnesses.witnessed_at)",
            _age(datetime.fromisoformat(witnessed_at) if witnessed_at else None, now),
        )

    @staticmethod
    def _read() -> tuple[
        bool, log.SignedHead | None, tuple[int, datetime] | None, dict[str, Any] | None
    ]:
        published, status = log.readiness(keyring.configured_kid())  # one query
        try:
            keyring.check_status(status)
            key_usable = True
        except keyring.CannotSign:
            key_usable = False
        signed = None if isinstance(published, log.LogNotSigned) else published
        latest = (
            SignedCheckpoint.objects.order_by("-tree_size", "-id")
            .values_list("tree_size", "signed_at")
            .first()
        )
        lag = _witness_lag(signed) if witnesses.policy() is not None else None
        return key_usable, signed, latest, lag

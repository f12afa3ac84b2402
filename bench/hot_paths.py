#!/usr/bin/env python
"""The three hot paths, end to end through Django's test Client, against a migrated database of
the benchmark's own holding a tenant, an API key and some thousands of receipts:

- ingest: POST /api/receipts (a new receipt each time: a new idempotency key)
- verify: GET /api/receipt/<id>/verify (a random stored receipt each time)
- page:   GET /run/<id> (a random stored receipt each time)

Run from the repository root:

    .venv/bin/python bench/hot_paths.py                     # SQLite temp file
    .venv/bin/python bench/hot_paths.py --database-url postgres://postgres@127.0.0.1:5432/bench_hot

Baseline: a minimal view returning a fixed JsonResponse({"ok": true}), routed through the same
middleware stack (settings.MIDDLEWARE, unchanged) by a temporary URLconf made in this script
(the project's urlpatterns plus /bench/baseline; nothing is added to the project). Every ratio
is to that baseline, measured in the same run.

For each path: `--warmup` untimed requests, then `--requests` timed ones, in this one process
(a single client, no server, no network: the figures are Django's in-process cost, not a load
test). The timed requests of the four paths are interleaved, 10 of one path then 10 of the
next, so that other load on the machine slows every path alike. Printed: requests per second
(timed requests / their total time), mean and p95 latency, SQL queries per request
(django.test.utils.CaptureQueriesContext, on 20 more requests, with the SQL of one of them
listed), and peak memory per request (tracemalloc, on 20 more requests: the peak of Python
allocations during the request above what was allocated before it). Every answer is checked
(201 for ingest, 200 and "status": "valid" for verify, 200 and no tamper warning for the
page); the script exits 1 if one is wrong.

The test Client does not enforce CSRF checks, which is how the test suite calls the API. A
real producer's POST has no CSRF cookie, so the script also sends one POST with CSRF checks
enforced and prints what a real producer would get.

RATE_LIMITS is off. The seed receipts are stored with services.receipt_ingest (the path POST
uses, minus HTTP).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import random
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
import _common  # noqa: E402
from _common import mean, percentile  # noqa: E402

from tests.examples import EXAMPLE_BODY  # noqa: E402

URLCONF = "bench_hot_paths_urls"
ROUND = 10  # requests of one path before the next path's turn

# The test vector's request body (tests/examples.py); each request gets its own idempotency key
# and workflow id.
BODY: dict[str, Any] = EXAMPLE_BODY


def body(n: int, prefix: str) -> dict[str, Any]:
    doc = copy.deepcopy(BODY)
    doc["workflow_id"] = f"wf-{prefix}-{n // 4}"
    doc["idempotency_key"] = f"{prefix}/{n}/end/1"
    doc["metadata"] = {"ticket": f"OPS-{n}"}
    return doc


class WrongAnswer(Exception):
    pass


@dataclass
class Request:
    method: str
    path: str
    data: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    name: str
    route: str
    times: list[float]
    queries: list[int]
    sample_sql: list[str]
    peaks: list[int]

    @property
    def rps(self) -> float:
        return len(self.times) / sum(self.times)


def install_baseline_urlconf() -> None:
    from django.conf import settings
    from django.http import HttpRequest, JsonResponse
    from django.urls import clear_url_caches, path

    import receiptsite.urls as site_urls

    def baseline(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"ok": True})

    module = types.ModuleType(URLCONF)
    module.urlpatterns = [path("bench/baseline", baseline), *site_urls.urlpatterns]  # type: ignore[attr-defined]
    module.handler404 = site_urls.handler404  # type: ignore[attr-defined]
    module.handler500 = site_urls.handler500  # type: ignore[attr-defined]
    sys.modules[URLCONF] = module
    settings.ROOT_URLCONF = URLCONF
    clear_url_caches()


def send(client: Any, request: Request) -> Any:
    return client.generic(
        request.method,
        request.path,
        request.data,
        content_type="application/json",
        headers=request.headers,
    )


@dataclass
class Path_:
    name: str
    route: str
    make: Callable[[], Request]
    check: Callable[[Request, Any], None]


def measure(paths: list[Path_], client: Any, args: argparse.Namespace) -> list[Result]:
    """Warm up every path, then time them interleaved: rounds of `ROUND` requests of each path
    in turn, so that whatever else runs on the machine slows every path alike and the ratios
    stay fair. Then count queries and trace memory, path by path."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for path in paths:
        for _ in range(args.warmup):
            request = path.make()
            path.check(request, send(client, request))

    times: dict[str, list[float]] = {path.name: [] for path in paths}
    done = 0
    while done < args.requests:
        batch = min(ROUND, args.requests - done)
        for path in paths:
            prepared = [path.make() for _ in range(batch)]
            answers = []
            for request in prepared:
                start = time.perf_counter()
                response = send(client, request)
                times[path.name].append(time.perf_counter() - start)
                answers.append(response)
            for request, response in zip(prepared, answers, strict=True):
                path.check(request, response)
        done += batch

    results = []
    for path in paths:
        queries: list[int] = []
        sample: list[str] = []
        for j in range(args.sample_requests):
            request = path.make()
            with CaptureQueriesContext(connection) as captured:
                path.check(request, send(client, request))
            queries.append(len(captured.captured_queries))
            if j == args.sample_requests - 1:
                sample = [q["sql"] for q in captured.captured_queries]

        peaks: list[int] = []
        gc.collect()
        tracemalloc.start()
        try:
            for _ in range(args.sample_requests):
                request = path.make()
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                response = send(client, request)
                peaks.append(tracemalloc.get_traced_memory()[1] - before)
                path.check(request, response)
                del response
        finally:
            tracemalloc.stop()
        results.append(Result(path.name, path.route, times[path.name], queries, sample, peaks))
    return results


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def expect(condition: bool, request: Request, message: str) -> None:
    if not condition:
        raise WrongAnswer(f"{request.method} {request.path}: {message}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--receipts", type=int, default=3000, help="receipts stored before")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per path")
    parser.add_argument("--warmup", type=int, default=20, help="untimed requests per path first")
    parser.add_argument(
        "--sample-requests",
        type=int,
        default=20,
        help="requests per path for query counts and for tracemalloc",
    )
    parser.add_argument("--seed", type=int, default=7)
    _common.add_database_argument(parser)
    args = parser.parse_args()

    started = time.perf_counter()
    description = _common.setup_django(args)
    install_baseline_urlconf()

    from django.conf import settings
    from django.test import Client

    from receiptsite.receipts.models import ApiKey, LogEntry, Receipt, Tenant
    from receiptsite.receipts.services import receipt_ingest

    print(f"hot_paths: {_common.machine()}")
    print(f"database: {description}")
    print(
        f"middleware: {len(settings.MIDDLEWARE)} classes (settings.MIDDLEWARE, unchanged); "
        f"RATE_LIMITS={settings.RATE_LIMITS}; DEBUG={settings.DEBUG}"
    )

    tenant = Tenant.objects.create(slug="acme", name="Acme Corp")
    key_row, raw_key = ApiKey.issue(tenant)
    start = time.perf_counter()
    for n in range(args.receipts):
        receipt_ingest(api_key=key_row, payload=body(n, "seed"))
    seeded = time.perf_counter() - start
    ids = [str(u) for u in Receipt.objects.values_list("public_id", flat=True)]
    each = seeded / max(1, len(ids)) * 1000
    print(
        f"seeded {len(ids):,} receipts with services.receipt_ingest in {seeded:.1f} s "
        f"({each:.2f} ms each); log size {LogEntry.objects.count():,}"
    )

    rng = random.Random(args.seed)
    auth = {"Authorization": f"Bearer {raw_key}"}
    counter = iter(range(10**9))

    def baseline_request() -> Request:
        return Request("GET", "/bench/baseline")

    def baseline_check(request: Request, response: Any) -> None:
        expect(
            response.status_code == 200 and response.json() == {"ok": True},
            request,
            f"baseline answered {response.status_code}",
        )

    def ingest_request() -> Request:
        data = json.dumps(body(next(counter), "bench")).encode()
        return Request("POST", "/api/receipts", data, auth)

    def ingest_check(request: Request, response: Any) -> None:
        expect(
            response.status_code == 201,
            request,
            f"answered {response.status_code}: {response.content[:300]!r}",
        )
        answer = response.json()
        expect(isinstance(answer.get("log_index"), int), request, "no log_index in the answer")
        expect(response.get("Idempotent-Replayed") is None, request, "replayed, not stored")

    def verify_request() -> Request:
        return Request("GET", f"/api/receipt/{rng.choice(ids)}/verify")

    def verify_check(request: Request, response: Any) -> None:
        expect(response.status_code == 200, request, f"answered {response.status_code}")
        answer = response.json()
        failed = [c["name"] for c in answer["checks"] if c["result"] != "pass"]
        expect(
            answer["status"] == "valid",
            request,
            f"status {answer['status']!r}, checks not passing: {failed}",
        )
        expect(request.path.split("/")[3] == answer["receipt_id"], request, "another receipt")

    def page_request() -> Request:
        return Request("GET", f"/run/{rng.choice(ids)}")

    def page_check(request: Request, response: Any) -> None:
        expect(response.status_code == 200, request, f"answered {response.status_code}")
        html = response.content.decode()
        expect(request.path.split("/")[2] in html, request, "the page lacks the receipt id")
        expect("alert-bad" not in html, request, "the page warns that the receipt is invalid")

    client = Client()
    print(
        f"{args.requests} timed requests per path after {args.warmup} warm-ups, interleaved "
        f"in rounds of {ROUND} per path; {args.sample_requests} more for queries and "
        f"{args.sample_requests} for tracemalloc; load average before: {load()}"
    )
    paths = [
        Path_("baseline", "GET /bench/baseline", baseline_request, baseline_check),
        Path_("ingest", "POST /api/receipts", ingest_request, ingest_check),
        Path_("verify", "GET /api/receipt/<id>/verify", verify_request, verify_check),
        Path_("page", "GET /run/<id>", page_request, page_check),
    ]
    try:
        results = measure(paths, client, args)
    except WrongAnswer as error:
        print(f"\nWRONG ANSWER: {error}", file=sys.stderr)
        return 1
    print(f"load average after: {load()}")

    base = results[0]
    base_mean = mean(base.times)
    base_peak = max(base.peaks)
    print()
    print(
        f"{'path':<17} {'route':<30} {'req/s':>8} {'mean ms':>8} {'p95 ms':>8} "
        f"{'x base':>7} {'queries':>9} {'peak KiB':>9} {'x base':>7}"
    )
    for r in results:
        q_mean = mean(r.queries)
        q_text = (
            f"{q_mean:.0f}"
            if min(r.queries) == max(r.queries)
            else f"{min(r.queries)}-{max(r.queries)}"
        )
        print(
            f"{r.name:<17} {r.route:<30} {r.rps:>8.1f} {mean(r.times) * 1e3:>8.3f} "
            f"{percentile(r.times, 0.95) * 1e3:>8.3f} {mean(r.times) / base_mean:>7.1f} "
            f"{q_text:>9} {max(r.peaks) / 1024:>9.1f} {max(r.peaks) / base_peak:>7.1f}"
        )
    print(
        "\n(x base: mean latency / baseline mean latency, and peak memory / baseline peak; "
        "req/s is 1 / mean latency of one in-process client)"
    )

    print("\nSQL of one request per path:")
    for r in results[1:]:
        print(f"  {r.route} ({len(r.sample_sql)} queries)")
        for sql in r.sample_sql:
            print(f"      {sql if len(sql) <= 110 else sql[:107] + '...'}")

    csrf_client = Client(enforce_csrf_checks=True)
    response = csrf_client.post(
        "/api/receipts",
        data=json.dumps(body(next(counter), "csrf")),
        content_type="application/json",
        headers=auth,
    )
    print(
        f"\nCSRF enforced, as for a real producer (no cookie, no token): POST /api/receipts -> "
        f"{response.status_code}"
        + (
            ""
            if response.status_code == 201
            else "  <-- WARNING: a producer outside the test Client cannot store receipts"
        )
    )
    print(
        f"\nreceipts stored at the end: {Receipt.objects.count():,}; "
        f"total run time {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

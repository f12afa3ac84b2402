"""The routes bench/run.py drives, and the check each answer gets before its load.

- `Routes.baseline()` and `Routes.healthz()`: the raw WSGI baseline and `/healthz`;
- `Routes.reads()`: verify, the page, and the tenant's list without and with each filter
  (`list_routes()`), each checked once (`check_verify`, `check_page`, `check_list` against
  the same filter run on the database), then loaded with random stored ids or filter values;
- `Routes.ingests()`: a single and a batch POST checked (201, and what they stored verifies),
  then loaded with bodies like the stored ones and new idempotency keys; afterwards the newest
  receipt must verify too.

A wrong answer raises _common.Wrong: the run exits 1.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from _common import fail

from siteload.dataset import (
    SUBJECTS,
    Shape,
    ingest_bodies,
    public_id,
    session_of,
    tenant_of,
    workflow_of,
)
from siteload.figures import Measure
from siteload.load import Load
from siteload.server import Server, Site, http

SAMPLE = 20_000  # random stored receipts the GET routes pick from
BATCH = 100  # receipts per batch body


@dataclass
class ListRoute:
    label: str
    name: str  # the filter parameter ("" for none, "since/until")
    queries: list[dict[str, str]]  # the query parameters, one dict per path


def list_routes(shape: Shape, size: int, rng: random.Random) -> list[ListRoute]:
    """The tenant's list, without and with each filter, with values of the first tenant that
    occur in the data set (so each filter selects its realistic fraction)."""
    from receiptsite.evidence.declaration import LIST_FILTERS, OUTCOMES, PHASES

    mine = [i for i in (rng.randrange(size) for _ in range(4000)) if tenant_of(i) == 0] or [0]
    values: dict[str, list[str]] = {
        "workflow_id": [workflow_of(i) for i in mine],
        "session_id": [session_of(i) for i in mine],
        "subject_name": [name for _, name in SUBJECTS],
        "phase": list(PHASES),
        "outcome": list(OUTCOMES),
    }
    routes = [ListRoute("list", "", [{}])]
    for column in LIST_FILTERS:
        if column.name not in values:
            fail(f"the list has a filter the benchmark does not know: {column.name}")
        routes.append(
            ListRoute(
                f"list {column.name}", column.name, [{column.name: v} for v in values[column.name]]
            )
        )
    span = shape.recorded_at(size) - shape.recorded_at(0)
    windows = []
    for i in mine:  # a window of 1% of the data set's time, around a receipt of the tenant
        since = shape.recorded_at(i) - span / 200
        windows.append(
            {
                "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "until": (since + span / 100).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    routes.append(ListRoute("list since/until", "since/until", windows))
    return routes


def list_path(query: dict[str, str]) -> str:
    return "/api/receipts" + ("?" + urlencode(query) if query else "")


def expected_list(tenant_id: int, query: dict[str, str]) -> list[str]:
    """The ids the list must answer, from the database (newest first, 50)."""
    from receiptsite.lib.rfc3339 import parse_rfc3339
    from receiptsite.receipts.models import Receipt

    rows = Receipt.objects.filter(tenant_id=tenant_id)
    for name, value in query.items():
        if name == "since":
            rows = rows.filter(recorded_at__gte=parse_rfc3339(value))
        elif name == "until":
            rows = rows.filter(recorded_at__lt=parse_rfc3339(value))
        else:
            rows = rows.filter(**{name: value})
    return [str(u) for u in rows.order_by("-id").values_list("public_id", flat=True)[:50]]


def check_verify(url: str, receipt_id: str) -> None:
    status, body = http(f"{url}/api/receipt/{receipt_id}/verify")
    if status != 200:
        fail(f"verify of {receipt_id[:8]} answered {status}")
    answer = json.loads(body)
    if answer.get("status") != "valid":
        failed = [c["name"] for c in answer.get("checks", []) if c.get("result") != "pass"]
        fail(f"verify of {receipt_id[:8]} says {answer.get('status')!r}: {failed}")


def check_page(url: str, receipt_id: str) -> None:
    status, body = http(f"{url}/run/{receipt_id}")
    html = body.decode("utf-8", "replace")
    if status != 200:
        fail(f"the page of {receipt_id[:8]} answered {status}")
    if "alert-bad" in html or receipt_id not in html:
        fail(f"the page of {receipt_id[:8]} warns that the receipt does not verify, or lacks it")


def check_list(url: str, key: str, tenant_id: int, query: dict[str, str], label: str) -> None:
    status, body = http(url + list_path(query), key=key)
    if status != 200:
        fail(f"{label} answered {status}: {body[:300]!r}")
    got = [r["id"] for r in json.loads(body)["receipts"]]
    want = expected_list(tenant_id, query)
    if got != want:
        fail(f"{label} ({query}) answered {len(got)} receipts, not the {len(want)} it selects")
    if not got:
        fail(f"{label} ({query}) selects nothing: the check would prove nothing")


def with_key(body: dict[str, Any], key: str) -> bytes:
    return json.dumps(body).replace("@KEY@", key).encode()


@dataclass
class Routes:
    """What the load of every route needs: the run's files, data set, site and wrk."""

    tmp: Path
    shape: Shape
    site: Site
    load: Load
    rng: random.Random
    run_token: str = field(default_factory=lambda: f"load-{secrets.token_hex(4)}")
    rounds: int = 0  # ingests() so far: each round's check posts take keys of their own

    def paths_file(self, name: str, paths: Sequence[str]) -> Path:
        path = self.tmp / f"{name}.paths"
        path.write_text("\n".join(paths) + "\n")
        return path

    def baseline(self, raw: Server) -> Measure:
        """The raw WSGI baseline: the same gunicorn command line, none of the site's work."""
        status, body = http(raw.url + "/")
        if status != 200 or len(body) != 2048:
            fail(f"the raw baseline answered {status} with {len(body)} bytes")
        return self.load.run(
            raw, "raw WSGI baseline", "paths.lua",
            {"BENCH_PATHS": str(self.paths_file("raw", ["/"]))},
        )  # fmt: skip

    def healthz(self, server: Server) -> Measure:
        # No check of its own: the server's start already waited for its 200.
        return self.load.run(
            server, "/healthz", "paths.lua",
            {"BENCH_PATHS": str(self.paths_file("healthz", ["/healthz"]))},
        )  # fmt: skip

    def reads(self, server: Server, size: int, *, lists: bool = True) -> dict[str, Measure]:
        """Check, then load, verify, the page and (unless not `lists`) each list route at the
        current size."""
        sample = [
            str(public_id(self.shape.seed, self.rng.randrange(size)))
            for _ in range(min(size, SAMPLE))
        ]
        check_verify(server.url, sample[0])
        check_page(server.url, sample[0])
        listed = list_routes(self.shape, size, self.rng) if lists else []
        acme = self.site.tenants[0][0]
        for route in listed:
            check_list(server.url, self.site.keys[0], acme, route.queries[0], route.label)
        results = {}
        verify = self.paths_file("verify", [f"/api/receipt/{i}/verify" for i in sample])
        results["verify"] = self.load.run(
            server, "verify", "paths.lua", {"BENCH_PATHS": str(verify)}
        )
        page = self.paths_file("page", [f"/run/{i}" for i in sample])
        results["page"] = self.load.run(server, "page", "paths.lua", {"BENCH_PATHS": str(page)})
        for route in listed:
            file = self.paths_file(route.label.replace(" ", "_").replace("/", "_"),
                                   [list_path(q) for q in route.queries])  # fmt: skip
            results[route.label] = self.load.run(
                server, route.label, "paths.lua",
                {"BENCH_PATHS": str(file), "BENCH_API_KEY": self.site.keys[0]},
            )  # fmt: skip
        return results

    def ingests(self, server: Server, size: int) -> dict[str, Measure]:
        key = self.site.keys[0]
        self.rounds += 1
        check = f"{self.run_token}/check-{self.rounds}"
        singles = ingest_bodies(self.shape, size, self.rng, 50)
        status, body = http(server.url + "/api/receipts", "POST",
                            with_key(singles[0], f"{check}/1"), key)  # fmt: skip
        if status != 201:
            fail(f"single ingest answered {status}: {body[:300]!r}")
        check_verify(server.url, json.loads(body)["id"])
        batches = [{"receipts": ingest_bodies(self.shape, size, self.rng, BATCH)} for _ in range(4)]
        text = json.dumps(batches[0])
        count = iter(range(1, BATCH + 1))
        text = "".join(
            part if n == 0 else f"{check}-batch/{next(count)}{part}"
            for n, part in enumerate(text.split("@KEY@"))
        )
        status, body = http(server.url + "/api/receipts/batch", "POST", text.encode(), key)
        results_ = json.loads(body).get("results", []) if status == 200 else []
        if status != 200 or len(results_) != BATCH or any(r.get("status") != 201 for r in results_):
            fail(f"batch ingest answered {status}: {body[:300]!r}")
        check_verify(server.url, results_[-1]["id"])

        out = {}
        files = {}
        for name, items in (("single", singles), ("batch", batches)):
            files[name] = self.tmp / f"ingest-{name}.bodies"
            files[name].write_text("\n".join(json.dumps(b) for b in items) + "\n")
        common = {"BENCH_API_KEY": key, "BENCH_RUN": self.run_token}
        out["ingest single"] = self.load.run(
            server, "ingest single", "ingest.lua",
            {**common, "BENCH_BODIES": str(files["single"]), "BENCH_PATH": "/api/receipts",
             "BENCH_RUN": self.run_token + "-single"},
            per_request=1,
        )  # fmt: skip
        out["ingest batch"] = self.load.run(
            server, "ingest batch", "ingest.lua",
            {**common, "BENCH_BODIES": str(files["batch"]), "BENCH_PATH": "/api/receipts/batch",
             "BENCH_RUN": self.run_token + "-batch"},
            per_request=BATCH,
        )  # fmt: skip
        # What the load stored verifies too: the newest receipt of the tenant.
        # (Batches wrk left in flight are still being stored: wait for them.)
        status, body = http(server.url + "/api/receipts?limit=1", key=key, timeout=600)
        newest = json.loads(body)["receipts"][0]["id"] if status == 200 else ""
        if not newest:
            fail(f"the list after the ingest load answered {status}")
        check_verify(server.url, newest)
        return out

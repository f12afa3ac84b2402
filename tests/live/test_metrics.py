"""/metrics under a real gunicorn with two workers: what each worker counted is summed whichever
worker answers the scrape (prometheus_client's multiprocess mode, its folder made by the
master: gunicorn.conf.py), the database's gauges are there, gunicorn's own refusals count,
nothing a proxy forwards is answered, and the folder is private and gone when the master
exits. In process, with the test client: tests/db/test_metrics.py; METRICS_DIR, the folder
an operator names instead: tests/live/test_configuration.py."""

from __future__ import annotations

import json
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import example_body
from tests.livesite import LiveSite

pytestmark = pytest.mark.live

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
CHECKPOINT = "/api/log/checkpoint"
REQUEST_LINE_LIMIT = 8190  # gunicorn.conf.py's limit_request_line


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    # The loopback is the proxy too, so that a test may speak as another client (its own rate
    # limit bucket) by X-Forwarded-For; `read` gives each client 3 reads.
    env = {"TRUSTED_PROXIES": "127.0.0.1", "RATE_LIMITS": "read=3/0.001"}
    with LiveSite(workers=2, env=env) as live:
        yield live


def scrape(site: LiveSite, **headers: str) -> tuple[Samples, str]:
    answer = site.get("/metrics", headers=headers)
    assert answer.status == 200, answer
    assert answer.content_type == "text/plain; version=0.0.4; charset=utf-8"
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, answer.text


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def served(samples: Samples, route: str, method: str, status: int) -> float:
    return value(samples, "receiptsite_http_request_duration_seconds_count",
                 route=route, method=method, status=str(status))  # fmt: skip


def access_lines(site: LiveSite, path: str, count: int) -> list[dict[str, object]]:
    """gunicorn's access lines of `path`, once there are `count` of them (each is written just
    after its answer)."""
    deadline = time.monotonic() + 15
    while True:
        lines = [json.loads(line) for line in site.stdout().splitlines() if line.startswith("{")]
        found = [line for line in lines if line.get("path") == path]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_what_both_workers_counted_is_summed_in_every_scrape(site: LiveSite) -> None:
    before, _ = scrape(site)
    sent = 0
    with ThreadPoolExecutor(max_workers=6) as pool:
        # Requests at once, until gunicorn's log shows that both workers answered some.
        for _ in range(10):
            statuses = list(pool.map(lambda _: site.get(CHECKPOINT).status, range(24)))
            assert statuses == [200] * 24
            sent += 24
            workers = {line["pid"] for line in access_lines(site, CHECKPOINT, sent)}
            if len(workers) == 2:
                break
    assert len(workers) == 2, site.logs()
    # Each scrape is answered by one worker or the other, and says every request of both.
    for _ in range(6):
        after, _ = scrape(site)
        counted = served(after, "log-checkpoint", "GET", 200) - served(before, "log-checkpoint",
                                                                        "GET", 200)
        assert counted == sent


def test_receipts_stored_and_the_logs_gauges(site: LiveSite) -> None:
    assert site.post("/api/receipts", example_body(idempotency_key="single")).status == 201
    items = [example_body(idempotency_key=f"batch-{i}") for i in range(3)]
    assert site.post("/api/receipts/batch", {"receipts": items}).status == 200
    assert site.post("/api/receipts", example_body(idempotency_key="single")).status == 201
    samples, _ = scrape(site)
    # A fresh site and a fresh folder: every receipt in the log was counted by this master's
    # workers, the replay not.
    assert value(samples, "receiptsite_log_tree_size") == 4
    assert value(samples, "receiptsite_receipts_stored_total") == value(
        samples, "receiptsite_log_tree_size")
    assert 0 <= value(samples, "receiptsite_log_checkpoint_age_seconds") < 60
    assert value(samples, "receiptsite_ready") == 1
    for check in ("database", "signing_key", "log"):
        assert value(samples, "receiptsite_ready_check", check=check) == 1


def test_refusals_are_counted_by_limit_and_by_problem(site: LiveSite) -> None:
    receipt = site.post("/api/receipts", example_body(idempotency_key="limited")).json()["id"]
    before, _ = scrape(site)
    client = {"X-Forwarded-For": "203.0.113.7"}  # a client of its own, with its 3 reads
    statuses = [site.get(f"/api/receipt/{receipt}/verify", headers=client).status
                for _ in range(5)]  # fmt: skip
    assert statuses == [200, 200, 200, 429, 429]
    missing = site.get("/api/no-such-route")
    assert missing.status == 404
    # A request line gunicorn refuses itself, answered by gunicorn.conf.py.
    with socket.create_connection(("127.0.0.1", site.port), timeout=30) as sock:
        line = b"GET /?" + b"a" * REQUEST_LINE_LIMIT + b" HTTP/1.1"
        sock.sendall(line + b"\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 414 ")
    after, _ = scrape(site)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("receiptsite_rate_limit_refusals_total", limit="read") == 2
    assert grew("receiptsite_problems_total", problem="rate-limited", status="429") == 2
    assert grew("receiptsite_problems_total", problem="not-found", status="404") == 1
    assert grew("receiptsite_problems_total", problem="uri-too-long", status="414") == 1
    assert served(after, "api-verify", "GET", 429) - served(before, "api-verify", "GET", 429) == 2


def test_no_receipt_id_reaches_the_metrics(site: LiveSite) -> None:
    receipt = site.post("/api/receipts", example_body(idempotency_key="page")).json()["id"]
    missing = str(uuid.uuid4())
    assert site.get(f"/run/{receipt}").status == 200
    assert site.get(f"/run/{missing}").status == 404
    samples, text = scrape(site)
    for receipt_id in (receipt, missing):
        assert receipt_id not in text and uuid.UUID(receipt_id).hex not in text
    assert served(samples, "receipt-page", "GET", 200) >= 1  # counted, by its pattern's name
    assert served(samples, "receipt-page", "GET", 404) >= 1


def test_the_private_address_is_answered_and_nothing_a_proxy_forwards(site: LiveSite) -> None:
    scrape(site, Host="10.0.0.5:8000")  # not in ALLOWED_HOSTS
    unknown = site.get("/metricz")
    for forwarded in ({"X-Forwarded-For": "203.0.113.9"}, {"X-Forwarded-For": "127.0.0.1"},
                      {"Forwarded": "for=203.0.113.9"}):
        refused = site.get("/metrics", headers=forwarded)
        assert refused.status == unknown.status == 404
        assert refused.content_type == unknown.content_type
        assert refused.body == unknown.body.replace(b"/metricz", b"/metrics")
        assert b"receiptsite_" not in refused.body


def _folder_of(pids: set[object]) -> Path:
    """The multiprocess folder the master made: the one of /dev/shm (or the temporary
    folder) holding files of these workers."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    found = [folder for folder in base.glob("receiptsite-metrics-*")
             if any(path.stem.endswith(f"_{pid}") for pid in pids
                    for path in folder.glob("*.db"))]  # fmt: skip
    assert len(found) == 1, found
    return found[0]


def test_the_workers_folder_is_private_and_removed_when_the_master_exits(site: LiveSite) -> None:
    # Last of the module: it stops the site.
    pids = {line["pid"] for line in access_lines(site, CHECKPOINT, 1)}
    folder = _folder_of(pids)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {path.name.split("_")[0] for path in folder.glob("*.db")} >= {"counter", "histogram"}
    site.stop()
    assert not folder.exists()


"""GET /metrics: Prometheus' text format, read by prometheus_client's own parser, for a peer
within METRICS_ALLOWED_FROM asking directly; the 404 of a path no route has for anyone else
and for anything a proxy forwards. In this process (no gunicorn) the counts are this
process's, so each test compares a scrape before with a scrape after. Live, with gunicorn's
workers summed: tests/live/test_metrics.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from receiptsite.config import metrics_allowed_from, rate_limits, trusted_proxies
from tests.conftest import Producer, assert_problem, example_body, remember_a_tree_not_stored
from tests.db.test_witnesses import cosign, one_of_two
from tests.otelspans import Recorder, protobuf, tool_call

pytestmark = pytest.mark.db

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
CaptureCommits = Callable[..., AbstractContextManager[list[Callable[[], Any]]]]

FAMILIES = {
    "receiptsite_http_request_duration_seconds": "histogram",
    "receiptsite_problems": "counter",
    "receiptsite_rate_limit_refusals": "counter",
    "receiptsite_receipts_stored": "counter",
    "receiptsite_ready": "gauge",
    "receiptsite_ready_check": "gauge",
    "receiptsite_log_tree_size": "gauge",
    "receiptsite_log_checkpoint_age_seconds": "gauge",
}
WITNESS_FAMILIES = {
    "receiptsite_witness_lag_leaves",
    "receiptsite_witnessed_tree_size",
    "receiptsite_witnessed_checkpoint_age_seconds",
}


def scrape(client: Client, **extra: Any) -> tuple[dict[str, str], Samples, str]:
    """The families' types and every sample of one scrape, parsed by prometheus_client."""
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    text = response.content.decode()
    types, samples = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return types, samples, text


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests(samples: Samples, route: str, method: str, status: int) -> float:
    return value(samples, "receiptsite_http_request_duration_seconds_count",
                 route=route, method=method, status=str(status))  # fmt: skip


def test_the_loopback_reads_the_named_families_with_their_labels(
    client: Client, producer: Producer, settings: Any,
    django_capture_on_commit_callbacks: CaptureCommits,
) -> None:
    _, before, _ = scrape(client)
    # The receipts stored count once their transaction commits: the capture runs what waits
    # for that (the test's own transaction never commits).
    with django_capture_on_commit_callbacks(execute=True):
        producer.publish(idempotency_key="one")
        items = [example_body(idempotency_key=k) for k in ("two", "three")]
        assert producer.post({"receipts": items}, path="/api/receipts/batch").status_code == 200
        recorder = Recorder(seed=7)
        for i in range(2):
            tool_call(recorder.tracer, f"tool_{i}")
        traces = client.post("/v1/traces", data=protobuf(recorder.export()),
                             content_type="application/x-protobuf",
                             headers=producer.headers())  # fmt: skip
        assert traces.status_code == 200, traces.content
        producer.publish(idempotency_key="one")  # a replay stores nothing
    assert_problem(client.get("/api/no-such-route"), 404, "not-found")
    settings.RATE_LIMITS = rate_limits("read=1/0.001")
    first = producer.publish(idempotency_key="four")["id"]
    assert client.get(f"/api/receipt/{first}/verify").status_code == 200
    assert_problem(client.get(f"/api/receipt/{first}/verify"), 429, "rate-limited")

    types, after, text = scrape(client)
    assert {name: types.get(name) for name in FAMILIES} == FAMILIES
    assert not WITNESS_FAMILIES & set(types)  # no witness policy
    assert [line for line in text.splitlines() if "_created" in line] == []

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # One, two and two receipts stored; the replay and the last (outside the capture, whose
    # transaction never commits) not counted.
    assert grew("receiptsite_receipts_stored_total") == 5
    assert grew("receiptsite_problems_total", problem="not-found", status="404") == 1
    assert grew("receiptsite_problems_total", problem="rate-limited", status="429") == 1
    assert grew("receiptsite_rate_limit_refusals_total", limit="read") == 1
    # Three single POSTs (the replay answered 201 too).
    assert requests(after, "api-receipts", "POST", 201) - requests(before, "api-receipts",
                                                                     "POST", 201) == 3
    assert requests(after, "api-receipts-batch", "POST", 200) >= 1
    assert requests(after, "otlp-traces", "POST", 200) >= 1
    assert requests(after, "unmatched", "GET", 404) >= 1
    assert requests(after, "api-verify", "GET", 429) >= 1
    assert requests(after, "metrics", "GET", 200) >= 1  # the scrape before
    # Every bucket of a histogram's series, up to +Inf, which is its count.
    buckets = {labels: v for (name, labels), v in after.items()
               if name == "receiptsite_http_request_duration_seconds_bucket"
               and ("route", "api-receipts") in labels and ("status", "201") in labels}
    assert len(buckets) == 13 and max(buckets.values()) == requests(after, "api-receipts",
                                                                      "POST", 201)
    # The database's gauges, read at the scrape.
    assert value(after, "receiptsite_ready") == 1
    assert {c: value(after, "receiptsite_ready_check", check=c)
            for c in ("database", "signing_key", "log")} == dict.fromkeys(
        ("database", "signing_key", "log"), 1.0)  # fmt: skip
    assert value(after, "receiptsite_log_tree_size") == 6
    assert 0 <= value(after, "receiptsite_log_checkpoint_age_seconds") < 60


def test_no_receipt_id_reaches_the_metrics(client: Client, producer: Producer) -> None:
    stored = producer.publish()["id"]
    missing = str(uuid.uuid4())
    assert client.get(f"/run/{stored}").status_code == 200
    assert client.get(f"/run/{stored}/handoff.txt").status_code == 200
    assert client.get(f"/api/receipt/{stored}/verify").status_code == 200
    assert client.get(f"/run/{missing}").status_code == 404
    assert client.get(f"/run/{missing}/nothing-here").status_code == 404
    _, samples, text = scrape(client)
    for receipt_id in (stored, missing):
        assert receipt_id not in text and uuid.UUID(receipt_id).hex not in text
    # Not vacuous: the pages were counted, by their pattern's name.
    assert requests(samples, "receipt-page", "GET", 200) >= 1
    assert requests(samples, "receipt-handoff", "GET", 200) >= 1
    assert requests(samples, "receipt-page", "GET", 404) >= 1
    assert "/run/" not in text


def test_a_method_no_client_is_held_to_is_counted_as_other(client: Client, db: None) -> None:
    client.generic("BREW", "/healthz")
    client.generic("X" * 50, "/healthz")
    _, samples, text = scrape(client)
    assert requests(samples, "healthz", "other", 405) >= 2
    assert "BREW" not in text and "X" * 50 not in text


def unknown_path(client: Client, **extra: Any) -> tuple[int, str, bytes]:
    """The answer to a path no route has (whose page links the path itself, in another
    language)."""
    response = client.get("/metricz", **extra)
    return (response.status_code, response["Content-Type"],
            response.content.replace(b"/metricz", b"/metrics"))  # fmt: skip


def answer(response: Any) -> tuple[int, str, bytes]:
    return response.status_code, response["Content-Type"], response.content


def test_a_peer_outside_metrics_allowed_from_gets_the_404_of_no_route(
    client: Client, db: None, settings: Any
) -> None:
    outside: dict[str, Any] = {"REMOTE_ADDR": "203.0.113.5"}
    expected = unknown_path(client, **outside)
    assert expected[0] == 404
    assert answer(client.get("/metrics", **outside)) == expected
    # Any method: never the CSRF page, never a 405 that says the route is there.
    assert client.post("/metrics", **outside).status_code == 404
    assert client.head("/metrics", **outside).status_code == 404
    # A range of the scraper's.
    settings.METRICS_ALLOWED_FROM = metrics_allowed_from("10.0.0.0/8, fd00::/8")
    scrape(client, REMOTE_ADDR="10.1.2.3")
    scrape(client, REMOTE_ADDR="fd00::7")
    assert answer(client.get("/metrics")) == unknown_path(client)  # the loopback, now outside
    settings.METRICS_ALLOWED_FROM = metrics_allowed_from("none")
    assert answer(client.get("/metrics", REMOTE_ADDR="10.1.2.3")) == unknown_path(client)


def test_the_loopback_is_the_default_in_both_families(client: Client, db: None) -> None:
    scrape(client, REMOTE_ADDR="127.0.0.1")
    scrape(client, REMOTE_ADDR="::1")
    scrape(client, REMOTE_ADDR="::ffff:127.0.0.1")  # a dual-stack socket's IPv4 peer
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.2").status_code == 404
    assert client.get("/metrics", REMOTE_ADDR="").status_code == 404


@pytest.mark.parametrize(
    "forwarded",
    [
        {"HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"HTTP_X_FORWARDED_FOR": "127.0.0.1"},  # even a loopback client of the proxy's
        {"HTTP_FORWARDED": "for=203.0.113.9"},
        {"HTTP_X_REAL_IP": "203.0.113.9"},
    ],
)
@pytest.mark.parametrize("trusted", ["127.0.0.1", ""])
def test_nothing_a_proxy_forwards_is_answered(
    client: Client, db: None, settings: Any, forwarded: dict[str, Any], trusted: str
) -> None:
    # The proxy on the loopback, trusted (the README's nginx) or not: what it forwards carries
    # its header, and is refused, though the peer is the loopback.
    settings.TRUSTED_PROXIES = trusted_proxies(trusted)
    assert answer(client.get("/metrics", **forwarded)) == unknown_path(client, **forwarded)
    scrape(client)  # asked directly, it answers


def test_metrics_answer_any_host_and_are_never_redirected_to_https(
    client: Client, db: None, settings: Any
) -> None:
    for host in ("10.0.0.5:8000", "[fd00::5]:8000", "internal.example"):
        scrape(client, HTTP_HOST=host)
    assert client.get("/metricz", HTTP_HOST="10.0.0.5:8000").status_code == 400
    settings.SECURE_SSL_REDIRECT = True
    fresh = Client()  # SecurityMiddleware reads its settings when it is made
    assert fresh.get("/api/log/checkpoint").status_code == 301
    scrape(fresh)
    assert fresh.get("/healthz").status_code == 200


def test_other_methods_from_the_scraper_are_refused_and_head_has_no_body(
    client: Client, db: None
) -> None:
    posted = client.post("/metrics")
    assert posted.status_code == 405 and posted["Allow"] == "GET, HEAD"
    head = client.head("/metrics")
    assert head.status_code == 200 and head.content == b""


def test_openmetrics_is_answered_to_a_scraper_that_asks_for_it(
    client: Client, db: None
) -> None:
    response = client.get("/metrics", HTTP_ACCEPT=(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert "Accept" in response["Vary"]
    names = {f.name for f in openmetrics_families(response.content.decode())}
    assert {"receiptsite_ready", "receiptsite_problems", "receiptsite_log_tree_size"} <= names


def test_a_scrape_reads_the_database_and_writes_nothing(client: Client, db: None) -> None:
    client.get("/metrics")  # whatever a first request of the process loads
    with CaptureQueriesContext(connection) as queries:
        scrape(client)
    sql = [q["sql"].lstrip().upper() for q in queries.captured_queries]
    assert all(s.startswith(("SELECT", "WITH")) for s in sql), sql
    # The key's status with the log's checkpoint as served (log.readiness), and the latest
    # signed checkpoint's size and signing time.
    assert len(sql) == 2, sql


def test_a_log_the_guard_refuses_and_a_missing_key_are_not_ready(
    client: Client, producer: Producer, settings: Any
) -> None:
    producer.publish()
    remember_a_tree_not_stored(settings)
    assert client.get("/healthz").status_code == 503
    _, samples, _ = scrape(client)
    assert value(samples, "receiptsite_ready") == 0
    assert value(samples, "receiptsite_ready_check", check="log") == 0
    assert value(samples, "receiptsite_ready_check", check="signing_key") == 1
    assert value(samples, "receiptsite_ready_check", check="database") == 1
    assert value(samples, "receiptsite_log_tree_size") == 1  # what was signed, still
    settings.SIGNING_KEY = None
    _, samples, _ = scrape(client)
    assert value(samples, "receiptsite_ready_check", check="signing_key") == 0


def test_with_a_witness_policy_the_lag_is_the_one_healthz_reports(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = one_of_two(settings)
    producer.publish(idempotency_key="a")
    types, samples, _ = scrape(client)
    assert value(samples, "receiptsite_witness_lag_leaves") == 1
    assert "receiptsite_witnessed_tree_size" not in types  # nothing witnessed yet
    assert "receiptsite_witnessed_checkpoint_age_seconds" not in types
    assert cosign(rules, "w1", at=1_700_000_000) == []
    producer.publish(idempotency_key="b")
    producer.publish(idempotency_key="c")
    health = client.get("/healthz").json()["witnesses"]
    types, samples, _ = scrape(client)
    assert set(types) >= WITNESS_FAMILIES
    assert value(samples, "receiptsite_witness_lag_leaves") == health["leaves_behind"] == 2
    assert value(samples, "receiptsite_witnessed_tree_size") == health["witnessed_size"] == 1
    age = value(samples, "receiptsite_witnessed_checkpoint_age_seconds")
    assert abs(age - (time.time() - 1_700_000_000)) < 60
    assert value(samples, "receiptsite_log_tree_size") == health["tree_size"] == 3

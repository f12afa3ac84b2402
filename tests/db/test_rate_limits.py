"""Rate limits: token buckets that every worker and host share, in the database by default and
in Redis with REDIS_URL. Each behaviour runs on both stores (`store`); time passes by handing
`throttle` a clock, never by sleeping. The live tests count what 4 gunicorn workers let through.

Redis is a throwaway `redis-server` of this module's own, on a Unix socket; the tests that need
it are skipped, saying so, where redis-server is not installed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from receiptsite.api import ratelimit
from receiptsite.api.ratelimit import throttle
from receiptsite.config import rate_limits
from receiptsite.problems import Problem
from receiptsite.receipts.models import ApiKey, RateBucket, Tenant
from tests.conftest import Producer, assert_problem, example_body

pytestmark = pytest.mark.db

T = 1_800_000_000.0  # a moment, in seconds since the epoch


def refused(scope: str, who: str, cost: int = 1, now: float = T) -> Problem:
    with pytest.raises(Problem) as caught:
        throttle(scope, who, cost, now=now)
    return caught.value


# --- the bucket ------------------------------------------------------------------------------


def test_a_burst_passes_then_a_429_says_when_to_retry(store: str, settings: Any) -> None:
    settings.RATE_LIMITS = rate_limits("read=3/0.5")
    for _ in range(3):
        throttle("read", "198.51.100.1", now=T)
    problem = refused("read", "198.51.100.1")
    assert problem.status == 429 and problem.slug == "rate-limited"
    assert problem.headers == {"Retry-After": "2"}  # one token, at half a token a second
    response = problem.response()
    assert response.status_code == 429
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"] == "2"


def test_the_bucket_refills_with_time_up_to_the_burst(store: str, settings: Any) -> None:
    settings.RATE_LIMITS = rate_limits("read=3/0.5")
    for _ in range(3):
        throttle("read", "a", now=T)
    assert refused("read", "a", now=T + 1.9).headers["Retry-After"] == "1"
    throttle("read", "a", now=T + 2)  # one token back
    assert refused("read", "a", now=T + 2).headers["Retry-After"] == "2"
    # A long pause fills the bucket to its burst, never beyond.
    for _ in range(3):
        throttle("read", "a", now=T + 1000)
    refused("read", "a", now=T + 1000)


def test_a_clock_behind_the_last_take_refills_nothing(store: str, settings: Any) -> None:
    settings.RATE_LIMITS = rate_limits("read=1/1")
    throttle("read", "a", now=T)
    # Another host, its clock 30 s behind: the bucket is not emptier, nor fuller.
    refused("read", "a", now=T - 30)
    throttle("read", "a", now=T + 1)


def test_a_batch_of_n_costs_n_tokens(store: str, settings: Any) -> None:
    settings.RATE_LIMITS = rate_limits("ingest=10/0.001")
    throttle("ingest", "rk_a", cost=4, now=T)
    throttle("ingest", "rk_a", cost=4, now=T)
    refused("ingest", "rk_a", cost=4)  # 2 left
    throttle("ingest", "rk_a", cost=2, now=T)
    refused("ingest", "rk_a", cost=1)
    # More than the burst is charged as the burst: it passes once, on a full bucket.
    throttle("ingest", "rk_b", cost=25, now=T)
    refused("ingest", "rk_b", cost=1)


def test_each_scope_and_client_has_its_own_bucket(store: str, settings: Any) -> None:
    settings.RATE_LIMITS = rate_limits("ingest=1/0.001,read=1/0.001")
    throttle("read", "rk_a", now=T)
    refused("read", "rk_a")
    throttle("ingest", "rk_a", now=T)
    throttle("read", "rk_b", now=T)


def test_off_limits_nothing(store: str, settings: Any) -> None:
    settings.RATE_LIMITS = rate_limits("off")
    for _ in range(50):
        throttle("read", "a", now=T)


# --- the routes ------------------------------------------------------------------------------


def test_healthz_is_never_limited(store: str, settings: Any, producer: Producer) -> None:
    answer = producer.publish()
    settings.RATE_LIMITS = rate_limits("ingest=1/0.001,read=1/0.001")
    client = Client()
    assert [client.get("/healthz").status_code for _ in range(5)] == [200] * 5
    # ... while the verify route, from the same address, is.
    verify = f"/api/receipt/{answer['id']}/verify"
    assert [client.get(verify).status_code for _ in range(2)] == [200, 429]
    assert client.get("/healthz").status_code == 200


def test_tenant_routes_count_per_key_and_public_ones_per_address(
    store: str, settings: Any, producer: Producer, tenant: Tenant
) -> None:
    answer = producer.publish()
    settings.RATE_LIMITS = rate_limits("read=2/0.001")
    second = Producer(Client(REMOTE_ADDR="203.0.113.9"), ApiKey.issue(tenant)[1])
    elsewhere = Producer(Client(REMOTE_ADDR="203.0.113.10"), producer.key)
    # Per key: the same key from another address shares its bucket; another key does not.
    assert [producer.get("/api/receipts").status_code for _ in range(2)] == [200, 200]
    assert_problem(elsewhere.get("/api/receipts"), 429, "rate-limited")
    assert elsewhere.get(f"/api/receipts/{answer['id']}").status_code == 429
    assert second.get("/api/receipts").status_code == 200
    # Per address: verification and the page draw on the address's bucket, whatever the key.
    verify = f"/api/receipt/{answer['id']}/verify"
    assert second.get(verify).status_code == 200
    assert second.client.get(f"/run/{answer['id']}").status_code == 200
    assert second.client.get(verify).status_code == 429
    assert Client(REMOTE_ADDR="203.0.113.11").get(verify).status_code == 200


def test_the_ingest_route_charges_a_batch_per_receipt(
    store: str, settings: Any, producer: Producer
) -> None:
    settings.RATE_LIMITS = rate_limits("ingest=5/0.001")
    items = [example_body(idempotency_key=f"k{i}") for i in range(4)]
    assert producer.post({"receipts": items}, path="/api/receipts/batch").status_code == 200
    assert producer.post(example_body(idempotency_key="one")).status_code == 201
    response = producer.post(example_body(idempotency_key="two"))
    assert_problem(response, 429, "rate-limited")
    assert int(response["Retry-After"]) >= 1


# --- the stores ------------------------------------------------------------------------------


def test_database_buckets_are_one_row_each_and_full_ones_are_pruned(
    db: None, settings: Any
) -> None:
    settings.REDIS_URL = None
    settings.RATE_LIMITS = rate_limits("ingest=10/1,read=2/1")
    throttle("read", "a", now=T)
    throttle("read", "a", now=T)
    throttle("read", "b", now=T + 5)
    throttle("ingest", "rk_a", cost=3, now=T)
    rows = {b.name: (b.tokens, b.stamp) for b in RateBucket.objects.all()}
    assert rows == {"read:a": (0.0, T), "read:b": (1.0, T + 5), "ingest:rk_a": (7.0, T)}
    # At T + 5.5, "read:a" is full again (it took 2 s) and so is "ingest:rk_a" (3 s), but
    # "read:b" is half a token short.
    assert ratelimit.prune(now=T + 5.5) == 2
    assert set(RateBucket.objects.values_list("name", flat=True)) == {"read:b"}


def test_a_long_forwarded_address_makes_a_short_bucket_name(db: None, settings: Any) -> None:
    settings.REDIS_URL = None
    settings.RATE_LIMITS = rate_limits("read=1/1")
    throttle("read", "x" * 500, now=T)
    refused("read", "x" * 500)
    (name,) = RateBucket.objects.values_list("name", flat=True)
    assert name.startswith("read:sha256:") and len(name) <= 100


def test_a_redis_that_does_not_answer_lets_requests_pass_and_says_so(
    db: None, settings: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings.REDIS_URL = f"unix://{tmp_path}/nobody.sock"
    settings.RATE_LIMITS = rate_limits("read=1/0.001")
    with caplog.at_level(logging.ERROR, logger="receiptsite.api.ratelimit"):
        for _ in range(3):
            throttle("read", "a", now=T)
    assert "rate limits are not applied: Redis did not answer" in caplog.text


# --- several workers -------------------------------------------------------------------------




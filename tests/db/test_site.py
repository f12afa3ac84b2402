"""Site-wide behaviour: request ids, security headers, health, the API description, errors."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, get_resolver
from openapi_spec_validator import validate

from receiptsite.config import rate_limits
from tests.conftest import Producer

pytestmark = pytest.mark.db


def test_a_well_formed_request_id_is_echoed(client: Client, db: None) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": "abc.DEF:123-_"})
    assert response["X-Request-ID"] == "abc.DEF:123-_"


@pytest.mark.parametrize("incoming", ["", "has space", "x" * 129, "semi;colon", "ünï"])
def test_a_bad_request_id_is_replaced(client: Client, db: None, incoming: str) -> None:
    headers = {"X-Request-ID": incoming} if incoming else {}
    response = client.get("/healthz", headers=headers)
    assert response["X-Request-ID"] != incoming
    assert len(response["X-Request-ID"]) == 32


@pytest.mark.parametrize("path", ["/", "/healthz", "/api/openapi.json", "/api/log/checkpoint",
                                  "/.well-known/receipt-keys.json", "/nope", "/api/nope"])
def test_every_response_has_the_site_headers(client: Client, db: None, path: str) -> None:
    response = client.get(path)
    assert response["X-Request-ID"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "unsafe-inline" not in response["Content-Security-Policy"]
    assert "unsafe-eval" not in response["Content-Security-Policy"]


def test_an_unknown_api_route_is_a_problem(client: Client, db: None) -> None:
    response = client.get("/api/nope")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["status"] == 404


def test_healthz_is_ok(client: Client, db: None) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Access-Control-Allow-Origin"] == "*"


def test_the_home_page_explains_the_site(client: Client, db: None) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert "Execution receipts for AI agents" in response.content.decode()


def test_the_openapi_description_is_valid_and_covers_every_api_route(
    client: Client, db: None
) -> None:
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    spec: dict[str, Any] = response.json()
    validate(spec)
    assert spec["openapi"].startswith("3.1")
    routes = set()
    for pattern in get_resolver().url_patterns:
        if isinstance(pattern, URLPattern):
            route = "/" + str(pattern.pattern).replace("<receipt_id:receipt_id>", "{receipt_id}")
            if route.startswith(("/api/", "/.well-known/", "/healthz")):
                routes.add(route)
    assert routes == set(spec["paths"])


def test_rate_limits_answer_429_with_retry_after(
    producer: Producer, settings: Any
) -> None:
    settings.RATE_LIMITS = rate_limits("ingest=3/0.001")
    from django.core.cache import cache

    cache.clear()
    statuses = [producer.post({"workflow_id": 1}).status_code for _ in range(5)]
    assert statuses == [422, 422, 422, 429, 429]
    response = producer.post({"workflow_id": 1})
    assert response["Content-Type"] == "application/problem+json"
    assert int(response["Retry-After"]) >= 1


def test_page_reads_are_limited_per_client_address(
    producer: Producer, client: Client, settings: Any
) -> None:
    answer = producer.publish()
    settings.RATE_LIMITS = rate_limits("read=2/0.001")
    from django.core.cache import cache

    cache.clear()
    statuses = [client.get(f"/run/{answer['id']}").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    other = Client(REMOTE_ADDR="10.9.9.9")
    assert other.get(f"/run/{answer['id']}").status_code == 200


def test_forwarded_addresses_count_only_from_trusted_proxies(
    producer: Producer, settings: Any
) -> None:
    answer = producer.publish()
    settings.RATE_LIMITS = rate_limits("read=1/0.001")
    settings.TRUSTED_PROXIES = ["127.0.0.1"]
    from django.core.cache import cache

    cache.clear()
    proxy = Client(REMOTE_ADDR="127.0.0.1")
    a = proxy.get(f"/run/{answer['id']}", headers={"X-Forwarded-For": "203.0.113.1"})
    b = proxy.get(f"/run/{answer['id']}", headers={"X-Forwarded-For": "203.0.113.2"})
    c = proxy.get(f"/run/{answer['id']}", headers={"X-Forwarded-For": "203.0.113.1"})
    assert [a.status_code, b.status_code, c.status_code] == [200, 200, 429]
    untrusted = Client(REMOTE_ADDR="198.51.100.7")
    d = untrusted.get(f"/run/{answer['id']}", headers={"X-Forwarded-For": "203.0.113.3"})
    e = untrusted.get(f"/run/{answer['id']}", headers={"X-Forwarded-For": "203.0.113.4"})
    assert [d.status_code, e.status_code] == [200, 429]


def test_favicon_ico_redirects_to_the_sites_icon(client: Client, db: None) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/favicon.svg"


def test_the_ingest_limit_counts_receipts_not_requests(
    producer: Producer, settings: Any
) -> None:
    from django.core.cache import cache

    from tests.conftest import example_body

    settings.RATE_LIMITS = rate_limits("ingest=10/0.001")
    cache.clear()
    items = [example_body(idempotency_key=f"k{i}") for i in range(8)]
    first = producer.post({"receipts": items}, path="/api/receipts/batch")
    assert first.status_code == 200
    second = producer.post({"receipts": items[:4]}, path="/api/receipts/batch")
    assert second.status_code == 429  # 8 of 10 used; 4 more do not fit
    assert producer.post(example_body(idempotency_key="one")).status_code == 201
    # Reading the tenant's receipts draws on another bucket.
    assert producer.get("/api/receipts").status_code == 200


def test_the_default_limits_allow_a_burst_of_100_receipts(
    producer: Producer, settings: Any
) -> None:
    from django.core.cache import cache

    from tests.conftest import example_body

    settings.RATE_LIMITS = rate_limits("on")
    cache.clear()
    statuses = {producer.post(example_body(idempotency_key=f"b{i}")).status_code
                for i in range(100)}
    assert statuses == {201}


def test_static_files_carry_the_site_headers_too(client: Client, db: None) -> None:
    response = client.get("/static/css/site.css")
    assert response.status_code == 200
    assert response["X-Request-ID"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_a_bad_host_on_an_api_route_is_a_problem(client: Client, db: None) -> None:
    response = client.get("/api/log/checkpoint", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response["X-Request-ID"]

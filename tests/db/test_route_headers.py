"""The headers a path asks for, on every answer of it, whatever made the answer
(receiptsite/middleware.py, RouteHeadersMiddleware): a capability URL's `Cache-Control:
no-store`, `X-Robots-Tag: noindex` and `Referrer-Policy: same-origin`, and the public JSON
routes' `Access-Control-Allow-Origin: *`, on the view's answers and on those made before it
runs (Django's CSRF 403, the redirect to https, the 404 of a malformed id). And the decisions
route answers a method it does not serve with a 405, before any CSRF check.

The test client here enforces CSRF checks, as a real browser's session would be checked. The
live redirect to https is in tests/live/test_security_headers.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import Producer

pytestmark = pytest.mark.db

CAPABILITY = {
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
    "Referrer-Policy": "same-origin",
}
CAPABILITY_PATHS = [
    "/run/{id}",
    "/run/{id}/handoff.txt",
    "/run/{id}/bundle.json",
    "/run/{id}/decisions",
    "/api/receipts/{id}",
    "/api/receipts/{id}/withdrawal",
    "/api/receipt/{id}/verify",
]
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
PUBLIC_JSON = [
    "/api/receipt/{id}/verify",
    "/.well-known/receipt-keys.json",
    "/api/log/checkpoint",
    "/api/log/consistency?first=1&second=1",
    "/api/openapi.json",
]


@pytest.fixture
def strict_client() -> Client:
    return Client(enforce_csrf_checks=True)


def assert_capability_headers(response: Any) -> None:
    for name, value in CAPABILITY.items():
        assert response.get(name) == value, (name, response.status_code, response.headers)


# --- capability URLs -------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", CAPABILITY_PATHS)
def test_every_answer_under_a_capability_url_carries_its_headers(
    producer: Producer, strict_client: Client, path: str, method: str
) -> None:
    """The CSRF 403 of a page that does not take the method included: Django answers it
    before the view runs."""
    receipt_id = producer.publish()["id"]
    response = strict_client.generic(method, path.format(id=receipt_id))
    assert response.status_code < 500
    assert_capability_headers(response)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_the_csrf_403_of_the_receipt_page_carries_the_capability_headers(
    producer: Producer, strict_client: Client, method: str
) -> None:
    receipt_id = producer.publish()["id"]
    response = strict_client.generic(method, f"/run/{receipt_id}")
    assert response.status_code == 403
    assert_capability_headers(response)


@pytest.mark.parametrize(
    "path",
    [
        "/run/{short}",
        "/run/{short}/bundle.json",
        "/run/{id}/nothing-here",
        "/run/{id}/",
        "/api/receipt/{short}/verify",
        "/api/receipts/{short}",
    ],
)
def test_a_path_under_a_capability_prefix_that_no_route_serves_carries_them_too(
    producer: Producer, path: str
) -> None:
    receipt_id = producer.publish()["id"]
    response = producer.client.get(
        path.format(id=receipt_id, short=receipt_id[:-1]), headers=producer.headers()
    )
    assert response.status_code == 404
    assert_capability_headers(response)


@pytest.mark.parametrize("path", ["/run/{id}", "/run/{id}/bundle.json", "/api/receipt/{id}/verify"])
def test_the_redirect_to_https_carries_the_capability_headers(
    producer: Producer, settings: Any, path: str
) -> None:
    receipt_id = producer.publish()["id"]
    settings.SECURE_SSL_REDIRECT = True
    response = Client().get(path.format(id=receipt_id))  # plain http, a new handler
    assert response.status_code == 301
    assert response["Location"].startswith("https://")
    assert_capability_headers(response)


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/api/receipts/batch"), ("GET", "/api/receipts"), ("GET", "/healthz"),
     ("GET", "/")],
)  # fmt: skip
def test_a_path_that_holds_no_receipt_id_is_not_a_capability_url(
    producer: Producer, method: str, path: str
) -> None:
    response = producer.client.generic(method, path, headers=producer.headers())
    assert response.status_code < 500
    assert "X-Robots-Tag" not in response
    assert response.get("Cache-Control") != "no-store"


# --- the decisions route: 405 before CSRF ----------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_a_method_the_decisions_route_does_not_serve_is_a_405_before_the_csrf_check(
    producer: Producer, strict_client: Client, method: str
) -> None:
    receipt_id = producer.publish()["id"]
    response = strict_client.generic(method, f"/run/{receipt_id}/decisions")
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert_capability_headers(response)


def test_a_post_to_the_decisions_route_is_still_checked_for_its_csrf_token(
    producer: Producer, strict_client: Client
) -> None:
    receipt_id = producer.publish()["id"]
    response = strict_client.post(f"/run/{receipt_id}/decisions", {"conclusion": "accepted"})
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert_capability_headers(response)


# --- the public JSON routes: any origin, 404s included ----------------------------------------


@pytest.mark.parametrize("path", PUBLIC_JSON)
def test_every_answer_of_a_public_json_route_may_be_read_from_any_origin(
    producer: Producer, client: Client, path: str
) -> None:
    receipt_id = producer.publish()["id"]
    for method in ("GET", "POST"):
        response = client.generic(method, path.format(id=receipt_id))
        assert response.status_code in (200, 405), response.content
        assert response["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize(
    "malformed",
    ["not-an-id", "{short}", "{id}x", "{id_without_hyphens}", "%00", "{id}%2D"],
)
def test_the_404_of_a_malformed_id_on_the_verify_route_may_be_read_from_any_origin(
    producer: Producer, client: Client, malformed: str
) -> None:
    receipt_id = producer.publish()["id"]
    wrong = malformed.format(
        id=receipt_id, short=receipt_id[:-1], id_without_hyphens=receipt_id.replace("-", "")
    )
    response = client.get(f"/api/receipt/{wrong}/verify")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response["Access-Control-Allow-Origin"] == "*"
    assert_capability_headers(response)


def test_the_redirect_to_https_of_a_public_route_may_be_read_from_any_origin(
    producer: Producer, settings: Any
) -> None:
    receipt_id = producer.publish()["id"]
    settings.SECURE_SSL_REDIRECT = True
    for path in PUBLIC_JSON:
        response = Client().get(path.format(id=receipt_id))
        assert response.status_code == 301, path
        assert response["Access-Control-Allow-Origin"] == "*", path


def test_a_route_for_tenants_is_not_opened_to_other_origins(producer: Producer) -> None:
    receipt_id = producer.publish()["id"]
    for path in ("/api/receipts", f"/api/receipts/{receipt_id}", f"/run/{receipt_id}"):
        response = producer.client.get(path, headers=producer.headers())
        assert "Access-Control-Allow-Origin" not in response, path

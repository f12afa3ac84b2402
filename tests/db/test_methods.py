"""Methods a route does not serve: 405 problem+json with `Allow` on every API route, never
Django's CSRF page (the test client here enforces CSRF checks, as a real browser's session
would be checked); and every GET route answers HEAD."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import Producer, assert_problem

pytestmark = pytest.mark.db

# (path template, the methods it serves)
API_ROUTES = [
    ("/api/receipts", "GET, POST"),
    ("/api/receipts/batch", "POST"),
    ("/api/receipts/{id}", "GET"),
    ("/api/receipts/{id}/withdrawal", "POST"),
    ("/api/receipt/{id}/verify", "GET"),
    ("/.well-known/receipt-keys.json", "GET"),
    ("/api/log/checkpoint", "GET"),
    ("/api/log/consistency", "GET"),
    ("/api/openapi.json", "GET"),
    ("/healthz", "GET"),
]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@pytest.fixture
def strict_client() -> Client:
    return Client(enforce_csrf_checks=True)


@pytest.mark.parametrize(
    ("path", "method"),
    [(path, method) for path, allowed in API_ROUTES for method in METHODS
     if method not in allowed.split(", ")],
)
def test_a_method_an_api_route_does_not_serve_is_a_405_problem_never_a_csrf_page(
    producer: Producer, strict_client: Client, path: str, method: str
) -> None:
    receipt_id = producer.publish()["id"]
    response = strict_client.generic(
        method, path.format(id=receipt_id), headers=producer.headers()
    )
    assert_problem(response, 405, "method-not-allowed")
    allowed = dict(API_ROUTES)[path]
    assert response["Allow"] == allowed


@pytest.mark.parametrize(
    "path",
    [
        "/run/{id}",
        "/run/{id}/handoff.txt",
        "/api/receipt/{id}/verify",
        "/.well-known/receipt-keys.json",
        "/api/log/checkpoint",
        "/api/openapi.json",
        "/healthz",
        "/",
    ],
)
def test_every_get_route_answers_head_with_the_get_status_and_no_body(
    producer: Producer, client: Client, path: str
) -> None:
    receipt_id = producer.publish()["id"]
    get = client.get(path.format(id=receipt_id))
    head = client.head(path.format(id=receipt_id))
    assert head.status_code == get.status_code == 200
    assert head["Content-Type"] == get["Content-Type"]
    assert head.content == b""


def test_the_tenant_routes_answer_head_too(producer: Producer) -> None:
    receipt_id = producer.publish()["id"]
    for path in ("/api/receipts", f"/api/receipts/{receipt_id}"):
        response = producer.client.head(path, headers=producer.headers())
        assert response.status_code == 200
        assert response.content == b""

"""GET /api/receipts/<id>: one of the tenant's receipts, its summary and its evidence document."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from receiptsite.receipts.models import ApiKey, Receipt
from tests.conftest import (
    EXAMPLE_BODY,
    Producer,
    assert_problem,
    count_receipts,
    row_security_statements,
    tamper,
)

pytestmark = pytest.mark.db

SITE = "https://receipts.example.org"
UNKNOWN = "00000000-0000-4000-8000-000000000000"
CAPABILITY = {
    "Referrer-Policy": "same-origin",
    "X-Robots-Tag": "noindex",
    "Cache-Control": "no-store",
}




def assert_capability_headers(response: Any) -> None:
    for name, value in CAPABILITY.items():
        assert response[name] == value, name


def detail(producer: Producer, receipt_id: str) -> Any:
    return producer.client.get(f"/api/receipts/{receipt_id}", headers=producer.headers())


def headers_but_request_id(response: Any) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower() != "x-request-id"}


def test_it_answers_the_summary_and_the_stored_document(producer: Producer) -> None:
    answer = producer.publish()
    response = detail(producer, answer["id"])
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == [
        "id", "url", "verify_url", "output_hash", "recorded_at", "log_index", "workflow_id",
        "phase", "subject", "outcome", "document",
    ]
    stored = Receipt.objects.get(public_id=answer["id"])
    assert body["document"] == stored.document()
    assert body == {
        **answer,
        "workflow_id": "wf-7f3a",
        "phase": "end",
        "subject": {"type": "tool", "name": "website_audit"},
        "outcome": "succeeded",
        "document": stored.document(),
    }


def test_the_document_re_serialises_to_the_stored_canonical_bytes(producer: Producer) -> None:
    import rfc8785

    answer = producer.publish(result="café — ünïcödé ✓ 𝄞")
    document = detail(producer, answer["id"]).json()["document"]
    stored = Receipt.objects.get(public_id=answer["id"])
    assert rfc8785.dumps(document) == stored.raw_bytes()
    assert document["result"] == "café — ünïcödé ✓ 𝄞"
    assert document["id"] == answer["id"]
    assert document["workflow_id"] == EXAMPLE_BODY["workflow_id"]


def test_the_summary_equals_the_lists_summary(producer: Producer) -> None:
    answer = producer.publish()
    [summary] = producer.get("/api/receipts").json()["receipts"]
    body = detail(producer, answer["id"]).json()
    assert {k: v for k, v in body.items() if k != "document"} == summary


def test_a_start_has_a_null_outcome(producer: Producer) -> None:
    answer = producer.publish(phase="start", outcome=None)
    body = detail(producer, answer["id"]).json()
    assert body["outcome"] is None
    assert "outcome" not in body["document"]


def test_a_200_carries_the_capability_headers(producer: Producer) -> None:
    response = detail(producer, producer.publish()["id"])
    assert response.status_code == 200
    assert_capability_headers(response)
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Request-ID"]


# Stored bytes changed behind the site's back into something that is no JSON object.
NOT_A_DOCUMENT = [b"not json at all", b"\xff\xfe{", b"[1,2]", b""]


@pytest.mark.parametrize("stored", NOT_A_DOCUMENT, ids=["text", "not-utf8", "array", "empty"])
def test_bytes_that_are_no_document_are_shown_as_not_verifying(
    producer: Producer, stored: bytes
) -> None:
    answer = producer.publish()
    tamper(answer["id"], canonical_bytes=stored)
    response = detail(producer, answer["id"])
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    assert_capability_headers(response)
    assert response.json() == {
        **answer,
        "workflow_id": "wf-7f3a",
        "phase": "end",
        "subject": None,
        "outcome": "succeeded",
        "status": "invalid",
        "document": None,
    }
    verification = producer.client.get(f"/api/receipt/{answer['id']}/verify")
    assert verification.status_code == 200
    assert verification.json()["status"] == "invalid"


# --- not found, and another tenant's ---------------------------------------------------------


@pytest.mark.parametrize(
    "receipt_id",
    [UNKNOWN, "not-a-uuid", "00000000000040008000000000000000", "0" * 36, "123",
     "00000000-0000-4000-8000-00000000000g", "{00000000-0000-4000-8000-000000000000}"],
)
def test_an_unknown_or_malformed_id_is_a_404(producer: Producer, receipt_id: str) -> None:
    producer.publish()
    response = detail(producer, receipt_id)
    body = assert_problem(response, 404, "not-found")
    assert receipt_id not in json.dumps(body)
    assert_capability_headers(response)


def test_another_tenants_receipt_is_exactly_the_404_of_an_unknown_id(
    producer: Producer, other_producer: Producer
) -> None:
    theirs = other_producer.publish()["id"]
    producer.publish()
    answers = [detail(producer, theirs), detail(producer, UNKNOWN), detail(producer, "nope")]
    for response in answers:
        assert response.status_code == 404
        assert_capability_headers(response)
    assert answers[0].content == answers[1].content == answers[2].content
    assert (
        headers_but_request_id(answers[0])
        == headers_but_request_id(answers[1])
        == headers_but_request_id(answers[2])
    )
    assert theirs.encode() not in answers[0].content
    # Their receipt is there for them.
    assert detail(other_producer, theirs).status_code == 200


def test_the_owner_sees_it_under_an_uppercase_id(producer: Producer) -> None:
    answer = producer.publish()
    response = detail(producer, answer["id"].upper())
    assert response.status_code == 200
    assert response.json()["id"] == answer["id"]


def test_a_second_key_of_the_same_tenant_reads_it(producer: Producer, tenant: Any) -> None:
    answer = producer.publish()
    second = Producer(Client(), ApiKey.issue(tenant)[1])
    assert detail(second, answer["id"]).json()["document"]["id"] == answer["id"]


# --- keys and methods -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization", ["", "Bearer", "Bearer rk_000000000000_nope", "Basic abc", "Token x"]
)
def test_a_missing_or_unknown_key_is_a_401(
    client: Client, producer: Producer, authorization: str
) -> None:
    receipt_id = producer.publish()["id"]
    headers = {"Authorization": authorization} if authorization else {}
    response = client.get(f"/api/receipts/{receipt_id}", headers=headers)
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert_capability_headers(response)
    assert b"wf-7f3a" not in response.content


def test_a_revoked_key_is_a_401(producer: Producer) -> None:
    receipt_id = producer.publish()["id"]
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    response = detail(producer, receipt_id)
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_unknown_id_without_a_key_is_a_401_not_a_404(client: Client, db: None) -> None:
    assert_problem(client.get(f"/api/receipts/{UNKNOWN}"), 401, "unauthorized")


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_writing_methods_are_a_405(producer: Producer, method: str) -> None:
    answer = producer.publish()
    before = Receipt.objects.get(public_id=answer["id"]).raw_bytes()
    response = getattr(producer.client, method)(
        f"/api/receipts/{answer['id']}", data=json.dumps({"outcome": "failed"}),
        content_type="application/json", headers=producer.headers(),
    )
    assert_problem(response, 405, "method-not-allowed")
    assert response["Allow"] == "GET"
    assert_capability_headers(response)
    assert count_receipts() == 1
    assert Receipt.objects.get(public_id=answer["id"]).raw_bytes() == before


def test_head_answers_like_get_without_a_body(producer: Producer) -> None:
    answer = producer.publish()
    response = producer.client.head(f"/api/receipts/{answer['id']}", headers=producer.headers())
    assert response.status_code == 200
    assert response.content == b""
    assert_capability_headers(response)


def test_a_detail_takes_two_queries(
    producer: Producer, django_assert_max_num_queries: Any
) -> None:
    answer = producer.publish()
    # The key, the receipt, and the request's audit-log entry.
    with django_assert_max_num_queries(3 + row_security_statements("tenant")):
        assert detail(producer, answer["id"]).status_code == 200

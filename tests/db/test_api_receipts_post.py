"""POST /api/receipts: store one receipt, or say clearly why not and store nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from receiptsite.evidence.declaration import BOUNDARY
from receiptsite.receipts.models import ApiKey, Receipt
from tests.conftest import EXAMPLE_BODY, Producer, assert_problem, count_receipts, example_body

pytestmark = pytest.mark.db

SITE = "https://receipts.example.org"




def test_it_stores_a_receipt_and_answers_201(producer: Producer) -> None:
    response = producer.post(EXAMPLE_BODY)
    assert response.status_code == 201
    answer = response.json()
    assert set(answer) == {"id", "url", "verify_url", "output_hash", "recorded_at", "log_index"}
    assert answer["url"] == f"{SITE}/run/{answer['id']}"
    assert answer["verify_url"] == f"{SITE}/api/receipt/{answer['id']}/verify"
    assert answer["log_index"] == 0
    assert response["Location"] == answer["url"]
    assert "Idempotent-Replayed" not in response
    receipt = Receipt.objects.get(public_id=answer["id"])
    assert receipt.output_hash == answer["output_hash"]


def test_producers_need_no_csrf_token(api_key: str) -> None:
    client = Client(enforce_csrf_checks=True)
    headers = {"Authorization": f"Bearer {api_key}"}
    single = client.post("/api/receipts", data=json.dumps(EXAMPLE_BODY),
                         content_type="application/json", headers=headers)
    assert single.status_code == 201
    batch = client.post("/api/receipts/batch", data=json.dumps({"receipts": [EXAMPLE_BODY]}),
                        content_type="application/json", headers=headers)
    assert batch.status_code == 200


def test_the_document_is_the_producers_fields_plus_the_sites(producer: Producer) -> None:
    answer = producer.publish()
    doc = Receipt.objects.get(public_id=answer["id"]).document()
    for key, value in EXAMPLE_BODY.items():
        if key != "not_observed":
            assert doc[key] == value
    assert doc["schema"] == "receipt/v1"
    assert doc["id"] == answer["id"]
    assert doc["tenant"] == {"slug": "acme", "name": "Acme Corp"}
    assert doc["recorded_at"] == answer["recorded_at"]
    assert doc["publisher"]["key_prefix"] == producer.key[: ApiKey.PREFIX_LENGTH]
    assert doc["redactions"] == []
    assert doc["not_observed"] == [EXAMPLE_BODY["not_observed"][0], BOUNDARY["end"]]


def test_recorded_at_has_the_sites_timestamp_form(producer: Producer) -> None:
    import re

    answer = producer.publish()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", answer["recorded_at"])


def test_defaults_are_filled_in_and_nulls_are_absent(producer: Producer) -> None:
    body = example_body(attempt=None, step_id=None, metadata={"ticket": None, "n": 3})
    body["framework"]["version"] = None
    body["session_id"] = None
    response = producer.post(body)
    assert response.status_code == 201, response.content
    doc = Receipt.objects.get(public_id=response.json()["id"]).document()
    assert doc["attempt"] == {"number": 1}
    assert "step_id" not in doc
    assert "session_id" not in doc
    assert "version" not in doc["framework"]
    assert doc["metadata"] == {"ticket": None, "n": 3}


def test_a_start_gets_the_start_boundary_and_no_outcome(producer: Producer) -> None:
    answer = producer.publish(phase="start", outcome=None, not_observed=None)
    receipt = Receipt.objects.get(public_id=answer["id"])
    assert receipt.document()["not_observed"] == [BOUNDARY["start"]]
    assert receipt.outcome is None


def test_secrets_are_redacted_and_recorded(producer: Producer) -> None:
    token = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"
    answer = producer.publish(result=f"used {token} ok")
    doc = Receipt.objects.get(public_id=answer["id"]).document()
    assert doc["result"] == "used [REDACTED] ok"
    assert doc["redactions"] == [
        {"field": "/result", "reason": "secret", "removed_chars": len(token)}
    ]


def test_long_results_are_truncated_and_recorded(producer: Producer, settings: Any) -> None:
    answer = producer.publish(result="x" * 5000)
    doc = Receipt.objects.get(public_id=answer["id"]).document()
    assert len(doc["result"]) == settings.TEXT_LIMIT
    removed = 5000 - settings.TEXT_LIMIT + len(f"…[truncated {1000 + 25} chars]")
    assert doc["result"].endswith(f"…[truncated {removed} chars]")
    assert doc["redactions"] == [
        {"field": "/result", "reason": "truncated", "removed_chars": removed}
    ]


# --- idempotency -------------------------------------------------------------------------


def test_the_same_request_again_replays_the_first_answer(producer: Producer) -> None:
    first = producer.post(EXAMPLE_BODY)
    again = producer.post(EXAMPLE_BODY)
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert count_receipts() == 1


def test_the_same_key_with_another_request_is_refused(producer: Producer) -> None:
    first = producer.publish()
    response = producer.post(example_body(result="13 findings"))
    body = assert_problem(response, 422, "idempotency-key-reused")
    assert body["id"] == first["id"]
    assert body["url"] == first["url"]
    assert count_receipts() == 1
    assert Receipt.objects.get().document()["result"] == "12 findings"


def test_another_tenant_may_use_the_same_key(
    producer: Producer, other_producer: Producer
) -> None:
    first = producer.publish()
    second = other_producer.publish()
    assert first["id"] != second["id"]
    assert count_receipts() == 2


def test_receipts_without_a_key_are_never_replays(producer: Producer) -> None:
    producer.publish(idempotency_key=None)
    producer.publish(idempotency_key=None)
    assert count_receipts() == 2


# --- links ------------------------------------------------------------------------------


def test_links_by_key_resolve_to_ids_in_the_order_given(producer: Producer) -> None:
    a = producer.publish(idempotency_key="a")
    b = producer.publish(idempotency_key="b")
    c = producer.publish(idempotency_key="c")
    parent = producer.publish(
        idempotency_key="parent",
        phase="completion",
        links={"child_receipt_ids": [c["id"].upper()], "child_idempotency_keys": ["b", "a"]},
    )
    doc = Receipt.objects.get(public_id=parent["id"]).document()
    assert doc["links"] == {"child_receipt_ids": [c["id"], b["id"], a["id"]]}
    child = producer.publish(idempotency_key="child", links={"parent_idempotency_key": "parent"})
    assert Receipt.objects.get(public_id=child["id"]).document()["links"] == {
        "parent_receipt_id": parent["id"]
    }


def test_a_link_to_another_tenants_receipt_is_the_same_422_as_a_missing_one(
    producer: Producer, other_producer: Producer
) -> None:
    theirs = other_producer.publish()
    missing = "00000000-0000-4000-8000-000000000000"
    before = count_receipts()
    bodies = [
        producer.post(example_body(links={"parent_receipt_id": theirs["id"]})).json(),
        producer.post(example_body(links={"parent_receipt_id": missing})).json(),
    ]
    assert bodies[0]["errors"] == bodies[1]["errors"] == [
        {"field": "/links/parent_receipt_id", "message": bodies[0]["errors"][0]["message"]}
    ]
    assert bodies[0]["status"] == 422
    assert count_receipts() == before


def test_a_child_named_by_id_and_by_key_is_a_422(producer: Producer) -> None:
    a = producer.publish(idempotency_key="a")
    response = producer.post(
        example_body(
            idempotency_key="p",
            links={"child_receipt_ids": [a["id"]], "child_idempotency_keys": ["a"]},
        )
    )
    body = assert_problem(response, 422, "validation-error")
    assert body["errors"][0]["field"] == "/links/child_idempotency_keys/0"


# --- bad input: the order of checks and each status --------------------------------------


@pytest.mark.parametrize(
    "authorization",
    ["", "Bearer", "Bearer rk_000000000000_nope", "Basic abc", "bearer", "Token x"],
)
def test_a_missing_or_unknown_key_is_a_401(
    client: Client, tenant: Any, authorization: str
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = client.post(
        "/api/receipts", data=json.dumps(EXAMPLE_BODY), content_type="application/json",
        headers=headers,
    )
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert count_receipts() == 0


def test_a_revoked_key_is_a_401(producer: Producer) -> None:
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    response = producer.post(EXAMPLE_BODY)
    assert_problem(response, 401, "unauthorized")
    assert count_receipts() == 0


def test_a_key_with_a_right_prefix_and_wrong_secret_is_a_401(producer: Producer) -> None:
    producer.key = producer.key[:-4] + "AAAA"
    assert_problem(producer.post(EXAMPLE_BODY), 401, "unauthorized")


def test_the_key_is_checked_before_anything_else(client: Client, db: None) -> None:
    response = client.post("/api/receipts", data=b"\xff" * 300_000, content_type="text/plain")
    assert response.status_code == 401


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1",
     "application/jsonx", "multipart/form-data; boundary=x"],
)
def test_another_content_type_is_a_415(producer: Producer, content_type: str) -> None:
    response = producer.client.post(
        "/api/receipts", data=json.dumps(EXAMPLE_BODY), content_type=content_type,
        headers=producer.headers(),
    )
    assert_problem(response, 415, "unsupported-media-type")
    assert count_receipts() == 0


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8",
                                          "application/json; charset=UTF-8"])
def test_json_with_a_utf8_charset_is_accepted(producer: Producer, content_type: str) -> None:
    response = producer.client.post(
        "/api/receipts", data=json.dumps(EXAMPLE_BODY), content_type=content_type,
        headers=producer.headers(),
    )
    assert response.status_code == 201


def test_a_body_over_256_kib_is_a_413(producer: Producer) -> None:
    body = example_body(result="x" * (256 * 1024))
    response = producer.post(body)
    body_json = assert_problem(response, 413, "payload-too-large")
    assert "262144" in body_json["detail"]
    assert count_receipts() == 0


def test_a_body_over_djangos_own_limit_is_a_413_not_a_400(producer: Producer) -> None:
    response = producer.post(b'{"x": "' + b"y" * (6 * 1024 * 1024) + b'"}')
    assert_problem(response, 413, "payload-too-large")
    assert count_receipts() == 0


def test_a_body_just_under_the_limit_is_not_a_413(producer: Producer) -> None:
    body = example_body(result="")
    size = len(json.dumps(body).encode())
    body["result"] = "x" * (256 * 1024 - size)
    assert len(json.dumps(body).encode()) == 256 * 1024
    assert producer.post(body).status_code == 201


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b'{"a": 1,}', b"\xff\xfe{}", b'{"a": NaN}',
     b'{"workflow_id": "a", "workflow_id": "b"}', b'{"subject": {"name": "a", "name": "b"}}',
     '{"result": "caf\u00e9"}'.encode("latin-1")],
)
def test_a_body_that_is_not_utf8_json_is_a_400(producer: Producer, raw: bytes) -> None:
    assert_problem(producer.post(raw), 400, "malformed-json")
    assert count_receipts() == 0


def test_an_empty_body_is_a_400(producer: Producer) -> None:
    response = producer.client.post(
        "/api/receipts", data=b"", content_type="application/json",
        headers=producer.headers(), CONTENT_TYPE="application/json",
    )
    assert_problem(response, 400, "malformed-json")


def assert_invalid(response: Any, *fields: str) -> list[dict[str, str]]:
    body = assert_problem(response, 422, "validation-error")
    assert body["title"] == "The receipt is not valid"
    assert [e["field"] for e in body["errors"]] == list(fields)
    named = ", ".join(field or "(the document)" for field in fields)
    assert body["detail"] == f"{len(fields)} field(s) are not valid: {named}"
    assert count_receipts() == 0
    errors: list[dict[str, str]] = body["errors"]
    return errors


def test_the_example_rejection_is_word_for_word(producer: Producer) -> None:
    body = example_body(duration_ms=1.5, idempotency_key=None)
    body["colour"] = "blue"
    errors = assert_invalid(producer.post(body), "/duration_ms", "/colour")
    assert errors == [
        {"field": "/duration_ms", "message": "must be an integer (no fraction, no exponent)"},
        {"field": "/colour", "message": "is not a field of receipt/v1"},
    ]


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        (b"[]", [""]),
        (b'"text"', [""]),
        (b"42", [""]),
        (b"null", [""]),
    ],
)
def test_a_top_level_value_that_is_not_an_object_is_a_422(
    producer: Producer, raw: bytes, fields: list[str]
) -> None:
    assert_invalid(producer.post(raw), *fields)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workflow_id": None}, "/workflow_id"),
        ({"workflow_id": ""}, "/workflow_id"),
        ({"workflow_id": 7}, "/workflow_id"),
        ({"workflow_id": "w" * 201}, "/workflow_id"),
        ({"phase": "finished"}, "/phase"),
        ({"subject": {"type": "robot", "name": "x"}}, "/subject/type"),
        ({"subject": {"type": "tool", "name": "x", "colour": 1}}, "/subject/colour"),
        ({"attempt": {"number": 0}}, "/attempt/number"),
        ({"attempt": {"number": 1.0}}, "/attempt/number"),
        ({"attempt": {"number": True}}, "/attempt/number"),
        ({"duration_ms": -1}, "/duration_ms"),
        ({"duration_ms": 2**53}, "/duration_ms"),
        ({"duration_ms": "5"}, "/duration_ms"),
        ({"started_at": "2026-11-30 14:30"}, "/started_at"),
        ({"started_at": "2026-02-30T00:00:00Z"}, "/started_at"),
        ({"observed": ["x"] * 21}, "/observed"),
        ({"observed": ["x" * 501]}, "/observed/0"),
        ({"metadata": {"Bad Key": "x"}}, "/metadata/Bad Key"),
        ({"metadata": {"price": 1.5}}, "/metadata/price"),
        ({"metadata": {"nested": {"a": 1}}}, "/metadata/nested"),
        ({"idempotency_key": "has space"}, "/idempotency_key"),
        ({"idempotency_key": ""}, "/idempotency_key"),
        ({"outcome": "done"}, "/outcome"),
        ({"links": {"parent_receipt_id": "not-a-uuid"}}, "/links/parent_receipt_id"),
        ({"id": "00000000-0000-4000-8000-000000000000"}, "/id"),
        ({"recorded_at": "2026-11-30T14:30:00Z"}, "/recorded_at"),
        ({"redactions": []}, "/redactions"),
        ({"schema": "receipt/v1"}, "/schema"),
    ],
)
def test_each_bad_field_is_a_422_naming_it(
    producer: Producer, changes: dict[str, Any], field: str
) -> None:
    assert_invalid(producer.post(example_body(**changes)), field)


def test_outcome_on_a_start_is_a_422(producer: Producer) -> None:
    assert_invalid(producer.post(example_body(phase="start")), "/outcome")


def test_a_missing_outcome_on_an_end_is_a_422(producer: Producer) -> None:
    assert_invalid(producer.post(example_body(outcome=None)), "/outcome")


def test_a_lone_surrogate_is_a_422(producer: Producer) -> None:
    raw = json.dumps(example_body(result="PLACEHOLDER")).replace("PLACEHOLDER", "\\ud800")
    assert_invalid(producer.post(raw.encode()), "/result")


@pytest.mark.parametrize("number", ["9007199254740992", "-9007199254740992", "1e3", "1.0",
                                    "10000000000000000000000"])
def test_an_unsafe_or_non_integer_number_is_a_422(producer: Producer, number: str) -> None:
    raw = json.dumps(example_body(duration_ms=12345)).replace("12345", number)
    assert_invalid(producer.post(raw.encode()), "/duration_ms")


def test_every_offending_field_is_named(producer: Producer) -> None:
    body = example_body(workflow_id="", duration_ms="x", outcome="nope")
    body["extra"] = 1
    assert_invalid(producer.post(body), "/workflow_id", "/outcome", "/duration_ms", "/extra")

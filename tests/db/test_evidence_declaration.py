"""What derives from the one declaration of receipt/v1 (evidence.py): validation of every
string field, the stored columns and what verification vouches for, the fields redaction
scans, and the page's labels. Each test walks the declaration, so a field added there is
covered here without a new test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import models
from django.test import Client

from receiptsite.evidence import declaration as evidence
from receiptsite.evidence.kinds import (
    NUL_MESSAGE,
    SECRET_MESSAGE,
    Field,
    Kind,
    ListOf,
    Metadata,
    Object,
    ReceiptId,
    Text,
    Timestamp,
)
from receiptsite.evidence.redaction import free_texts, redact
from receiptsite.receipts.models import Receipt
from tests.conftest import Producer, assert_problem, example_body, tamper

pytestmark = pytest.mark.db

SECRET = "sk-proj-Ab3dEf6hIj9kLmNoPq12"


def string_fields(obj: Object = evidence.DOCUMENT, path: str = "") -> Iterator[tuple[str, Field]]:
    """(JSON Pointer, field) of every string-holding field of the declaration (enums aside)."""
    for member in obj.fields:
        here = f"{path}/{member.name}"
        if isinstance(member.kind, Object):
            yield from string_fields(member.kind, here)
        elif isinstance(member.kind, (Text, ListOf, Metadata, ReceiptId, Timestamp)):
            yield here, member


def holds(kind: Kind) -> Kind:
    return kind.item if isinstance(kind, ListOf) else kind


def is_identifier(kind: Kind) -> bool:
    return isinstance(holds(kind), Text) and not holds(kind).free  # type: ignore[attr-defined]


def is_free_text(kind: Kind) -> bool:
    inner = holds(kind)
    return isinstance(inner, Metadata) or (isinstance(inner, Text) and inner.free)


def body_with(pointer: str, value: str) -> dict[str, Any]:
    """The example body with the string at `pointer` set to `value` (lists and metadata get
    one entry holding it)."""
    body = example_body(links=None)
    names = pointer.strip("/").split("/")
    target = body
    for name in names[:-1]:
        target = target.setdefault(name, {})
    field = names[-1]
    kind = dict(string_fields())[pointer].kind
    if isinstance(kind, ListOf):
        target[field] = [value]
    elif isinstance(kind, Metadata):
        target[field] = {"note": value}
    else:
        target[field] = value
    return body


def where_it_lands(pointer: str) -> str:
    kind = dict(string_fields())[pointer].kind
    if isinstance(kind, ListOf):
        return f"{pointer}/0"
    if isinstance(kind, Metadata):
        return f"{pointer}/note"
    return pointer


IDENTIFIERS = [pointer for pointer, member in string_fields() if is_identifier(member.kind)]
FREE_TEXTS = [pointer for pointer, member in string_fields() if is_free_text(member.kind)]


def test_the_declaration_knows_which_fields_are_identifiers_and_which_free_text() -> None:
    # The contract's own lists, checked against what the declaration derives.
    assert set(FREE_TEXTS) == {
        "/attempt/retry_reason",
        "/input_summary",
        "/result",
        "/observed",
        "/not_observed",
        "/metadata",
    }
    assert {"/workflow_id", "/subject/name", "/operation_ref", "/session_id", "/actor",
            "/framework/run_id", "/idempotency_key", "/links/parent_idempotency_key",
    "/links/child_idempotency_keys"} <= set(IDENTIFIERS)


@pytest.mark.parametrize("pointer", IDENTIFIERS)
def test_a_secret_in_an_identifier_is_refused_and_never_echoed(
    producer: Producer, pointer: str
) -> None:
    response = producer.post(body_with(pointer, SECRET))
    body = assert_problem(response, 422, "validation-error")
    assert {"field": where_it_lands(pointer), "message": SECRET_MESSAGE} in body["errors"]
    assert SECRET.encode() not in response.content
    assert Receipt.objects.count() == 0


@pytest.mark.parametrize("pointer", FREE_TEXTS)
def test_a_secret_in_free_text_is_redacted_where_it_stands(
    producer: Producer, client: Client, pointer: str
) -> None:
    answer = producer.publish(**body_with(pointer, f"x {SECRET} y"))
    document = producer.get(f"/api/receipts/{answer['id']}").json()["document"]
    assert SECRET not in str(document)
    assert {"field": where_it_lands(pointer), "reason": "secret",
            "removed_chars": len(SECRET)} in document["redactions"]


@pytest.mark.parametrize("pointer", [pointer for pointer, _ in string_fields()])
def test_a_nul_character_in_any_string_is_a_422_on_every_database(
    producer: Producer, pointer: str
) -> None:
    response = producer.post(body_with(pointer, "a\x00b"))
    body = assert_problem(response, 422, "validation-error")
    assert [e["field"] for e in body["errors"]] == [where_it_lands(pointer)]
    assert body["errors"][0]["message"] in (NUL_MESSAGE, *(
        # an idempotency key's characters are checked by their own rule
        [e["message"] for e in body["errors"] if "visible ASCII" in e["message"]]
    ))
    assert Receipt.objects.count() == 0


@pytest.mark.parametrize("name", [column.name for column in evidence.LIST_FILTERS])
def test_a_nul_character_in_a_list_filter_is_a_400(producer: Producer, name: str) -> None:
    body = assert_problem(producer.get("/api/receipts", **{name: "a\x00b"}), 400,
                          "bad-query-parameter")
    assert body["errors"] == [{"field": name, "message": "must not contain U+0000"}]


# --- stored columns ----------------------------------------------------------------------------


def test_the_receipts_table_has_exactly_the_declared_columns() -> None:
    for column in evidence.COLUMNS:
        field = Receipt._meta.get_field(column.name)
        assert isinstance(field, models.CharField), column.name
        assert field.max_length == column.max_length, column.name
        assert field.null == column.null, column.name
        assert field.blank == (not column.required), column.name


def test_every_stored_column_is_filled_from_the_document(producer: Producer) -> None:
    body = example_body(session_id="sess-1", trace_id="trace-1")
    answer = producer.publish(**body)
    receipt = Receipt.objects.get(public_id=answer["id"])
    document = receipt.document()
    for column in evidence.COLUMNS:
        assert getattr(receipt, column.name) == column.value_in(document), column.name
    columns = {column.name: getattr(receipt, column.name) for column in evidence.COLUMNS}
    assert columns["session_id"] == "sess-1"
    assert columns["trace_id"] == "trace-1"
    assert columns["framework_name"] == "langchain"


@pytest.mark.parametrize("column", evidence.COLUMNS, ids=lambda c: c.name)
def test_a_tampered_column_makes_the_receipt_invalid_naming_it(
    producer: Producer, client: Client, column: evidence.StoredColumn
) -> None:
    answer = producer.publish(session_id="sess-1", trace_id="trace-1")
    changed = "tampered" if column.name != "idempotency_key" else "other-key"
    tamper(answer["id"], **{column.name: changed})
    verdict = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert verdict["status"] == "invalid"
    check = next(c for c in verdict["checks"] if c["name"] == "record_matches")
    assert check["result"] == "fail"
    assert column.name in check["detail"]
    page = client.get(f"/run/{answer['id']}")
    assert b"does not verify" in page.content


# --- redaction reads the declaration -----------------------------------------------------------


def test_redaction_scans_every_free_text_the_declaration_marks_in_the_contracts_order() -> None:
    producer = {
        "workflow_id": "wf",
        "phase": "end",
        "subject": {"type": "tool", "name": "t"},
        "attempt": {"number": 2, "retry_reason": SECRET},
        "input_summary": SECRET,
        "result": SECRET,
        "observed": [SECRET],
        "not_observed": [SECRET],
        "metadata": {"zeta": SECRET, "alpha": SECRET},
    }
    pointers = [pointer for pointer, *_ in free_texts(producer)]
    assert pointers == [
        "/input_summary",
        "/result",
        "/observed/0",
        "/not_observed/0",
        "/attempt/retry_reason",
        "/metadata/alpha",
        "/metadata/zeta",
    ]
    redacted, redactions = redact(producer)
    assert [r["field"] for r in redactions] == pointers
    assert SECRET not in str(redacted)


# --- the page's labels -------------------------------------------------------------------------


def test_the_page_labels_the_fields_as_the_declaration_does(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish(session_id="sess-42", actor="ops@acme", operation_ref="op-9")
    page = client.get(f"/run/{answer['id']}").content.decode()
    for name, value in [("session_id", "sess-42"), ("actor", "ops@acme"), ("operation_ref",
                                                                           "op-9")]:
        label = str(evidence.DOCUMENT.member(name).label)
        assert f"<dt>{label}</dt><dd><code>{value}</code></dd>" in page
    duration = str(evidence.DOCUMENT.member("duration_ms").label)
    assert f"<dt>{duration}</dt><dd>67000 ms</dd>" in page

"""Parsing, validation, normalisation and assembly of the evidence document (no database)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from receiptsite.api.strictjson import BadJSON, parse_json
from receiptsite.evidence.declaration import BOUNDARY
from receiptsite.evidence.document import (
    DocumentInvalid,
    Draft,
    LinkRefs,
    evidence_document,
    producer_with_links,
    validate,
)
from receiptsite.evidence.kinds import join_pointer, json_copy
from receiptsite.evidence.redaction import redact
from receiptsite.lib.rfc3339 import is_rfc3339, parse_rfc3339
from tests.examples import EXAMPLE_BODY, EXAMPLE_CANONICAL_B64, EXAMPLE_HASH

pytestmark = pytest.mark.unit

MAX = 2**53 - 1
INTEGER = "must be an integer (no fraction, no exponent)"
UNKNOWN = "is not a field of receipt/v1"
SITE = "is set by the site, not the producer"
REQUIRED = "is required"
SURROGATE = "contains a lone surrogate"
TIMESTAMP = "must be an RFC 3339 date-time with an offset, like 2026-11-30T14:31:07Z"
RECEIPT_ID = "must be a receipt id: a hyphenated UUID"
KEY_CHARS = "must use only visible ASCII characters (U+0021 to U+007E, no spaces)"
METADATA_KEY = (
    "is not an allowed metadata key (a lowercase letter, then up to 63 of a-z, 0-9, '_', '.' "
    "and '-')"
)
METADATA_VALUE = "must be a string, an integer (no fraction, no exponent), a boolean or null"
PHASES = "must be one of start, end, completion, confirmation, handoff"
OUTCOMES = "must be one of succeeded, failed, timed_out, uncertain"
SUBJECT_TYPES = "must be one of tool, task, chain, agent_run, model, external"

UUID_A = "f5245d22-e650-49ae-8876-f1a335f309bc"
UUID_B = "0b7c2f0e-3c1d-4e5f-9a8b-7c6d5e4f3a2b"

class _Absent:
    """A field left out; named alike in every process, so that test ids are stable (pytest-
    xdist's workers must collect the same ids)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


END_BOUNDARY = (
    "This records what the agent runtime reported to this site. It does not show that any "
    "effect outside that report happened (an email received, a payment settled, a write "
    "accepted)."
)


def minimal(**changes: Any) -> dict[str, Any]:
    """The smallest valid body, with fields replaced (or removed with ABSENT)."""
    doc: dict[str, Any] = {
        "workflow_id": "wf-1",
        "phase": "end",
        "subject": {"type": "tool", "name": "search"},
        "outcome": "succeeded",
    }
    for key, value in changes.items():
        if value is ABSENT:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def errors_of(payload: object) -> list[tuple[str, str]]:
    with pytest.raises(DocumentInvalid) as caught:
        validate(payload)
    return [(error["field"], error["message"]) for error in caught.value.errors]


def build_example_document() -> dict[str, Any]:
    draft = validate(parse_json(json.dumps(EXAMPLE_BODY).encode()))
    producer, redactions = redact(producer_with_links(draft, None, []))
    return evidence_document(
        producer,
        receipt_id=UUID_A,
        tenant_slug="acme",
        tenant_name="Acme Corp",
        recorded_at="2026-11-30T09:31:42.062797Z",
        key_prefix="rk_6dac8a669810",
        redactions=redactions,
    )


# --------------------------------------------------------------------------------------------
# parse_json


def test_it_parses_a_json_object() -> None:
    assert parse_json(b'{"a": [1, 2.5, "x", true, null]}') == {"a": [1, 2.5, "x", True, None]}


def test_it_parses_a_non_object_top_level_value_for_validation_to_refuse() -> None:
    assert parse_json(b"[1]") == [1]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xef\xbb\xbf{}", id="utf-8 byte order mark"),
        pytest.param(b'{"a": "\xff"}', id="not utf-8"),
        pytest.param(b'{"a": "\xed\xa0\x80"}', id="surrogate encoded as utf-8 bytes"),
        pytest.param('{"a": 1}'.encode("utf-16"), id="utf-16"),
        pytest.param(b"", id="empty body"),
        pytest.param(b"{", id="truncated json"),
        pytest.param(b"{'a': 1}", id="single quotes"),
        pytest.param(b'{"a": 1,}', id="trailing comma"),
        pytest.param(b'{"a": "line\nbreak"}', id="raw control character in a string"),
        pytest.param(b'{"a": 1, "a": 2}', id="duplicate key"),
        pytest.param(b'{"a": {"b": 1, "b": 1}}', id="duplicate nested key"),
        pytest.param(b'{"a": [{"b": 1, "b": 2}]}', id="duplicate key inside a list"),
        pytest.param(b'{"a": NaN}', id="NaN"),
        pytest.param(b'{"a": Infinity}', id="Infinity"),
        pytest.param(b'{"a": -Infinity}', id="minus Infinity"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested too deeply"),
    ],
)
def test_it_refuses_a_body_that_is_not_strict_utf8_json(body: bytes) -> None:
    with pytest.raises(BadJSON) as caught:
        parse_json(body)
    assert caught.value.message.endswith(".")


def test_it_names_the_duplicate_key() -> None:
    with pytest.raises(BadJSON) as caught:
        parse_json(b'{"phase": "end", "phase": "start"}')
    assert caught.value.message == 'The key "phase" appears more than once in one object.'


def test_it_refuses_a_byte_order_mark_in_plain_words() -> None:
    with pytest.raises(BadJSON) as caught:
        parse_json(b"\xef\xbb\xbf{}")
    assert caught.value.message == (
        "The body starts with a byte order mark; send UTF-8 JSON without one."
    )


def test_it_lets_a_lone_surrogate_escape_through_for_validation_to_name() -> None:
    assert parse_json(b'{"a": "\\ud800"}') == {"a": "\ud800"}


def test_it_keeps_a_proper_surrogate_pair_escape_as_one_character() -> None:
    assert parse_json(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}


def test_it_parses_large_integers_as_int_and_floats_as_float() -> None:
    parsed = parse_json(b'{"a": 9007199254740993, "b": 1.0, "c": 1e3}')
    assert parsed == {"a": 9007199254740993, "b": 1.0, "c": 1000.0}
    assert isinstance(parsed, dict)
    assert [type(parsed[key]) for key in "abc"] == [int, float, float]


def test_it_parses_a_huge_integer_literal_as_an_out_of_range_int() -> None:
    parsed = parse_json(b'{"duration_ms": ' + b"9" * 5000 + b"}")
    assert isinstance(parsed, dict)
    assert isinstance(parsed["duration_ms"], int)
    assert parsed["duration_ms"] > MAX


def test_it_rejects_a_huge_integer_as_out_of_range_rather_than_as_bad_json() -> None:
    payload = parse_json(
        json.dumps(minimal()).encode()[:-1] + b', "duration_ms": -' + b"9" * 5000 + b"}"
    )
    assert errors_of(payload) == [("/duration_ms", f"must be between 0 and {MAX}")]


# --------------------------------------------------------------------------------------------
# validate: what passes, and how it is normalised


def test_it_accepts_the_example_body_and_keeps_every_value_as_sent() -> None:
    draft = validate(copy.deepcopy(EXAMPLE_BODY))
    assert draft == Draft(producer=EXAMPLE_BODY, links=None)


def test_it_fills_in_attempt_and_not_observed_when_not_sent() -> None:
    assert validate(minimal()).producer == {
        "workflow_id": "wf-1",
        "attempt": {"number": 1},
        "phase": "end",
        "subject": {"type": "tool", "name": "search"},
        "outcome": "succeeded",
        "not_observed": [],
    }


def test_it_treats_null_as_absent_at_every_depth() -> None:
    payload = minimal(
        step_id=None,
        attempt={"number": None, "prior_attempt_id": None, "retry_reason": None},
        subject={"type": "tool", "name": "search", "version": None},
        framework={"name": None},
        started_at=None,
        duration_ms=None,
        observed=None,
        not_observed=None,
        links=None,
        idempotency_key=None,
    )
    assert validate(payload) == Draft(
        producer={
            "workflow_id": "wf-1",
            "attempt": {"number": 1},
            "phase": "end",
            "subject": {"type": "tool", "name": "search"},
            "framework": {},
            "outcome": "succeeded",
            "not_observed": [],
        },
        links=None,
    )


def test_it_keeps_null_as_a_metadata_value() -> None:
    producer = validate(minimal(metadata={"reviewed": None, "ok": True, "n": -3})).producer
    assert producer["metadata"] == {"reviewed": None, "ok": True, "n": -3}


def test_it_treats_a_null_outcome_on_a_start_as_absent() -> None:
    assert "outcome" not in validate(minimal(phase="start", outcome=None)).producer


def test_it_accepts_a_start_without_outcome() -> None:
    assert validate(minimal(phase="start", outcome=ABSENT)).producer["phase"] == "start"


def test_it_keeps_timestamps_exactly_as_sent() -> None:
    producer = validate(
        minimal(started_at="2026-11-30t14:30:00.5+05:30", ended_at="2026-11-30T09:00:00.000z")
    ).producer
    assert (producer["started_at"], producer["ended_at"]) == (
        "2026-11-30t14:30:00.5+05:30",
        "2026-11-30T09:00:00.000z",
    )


def test_it_lowercases_linked_ids_and_takes_links_out_of_the_producer_part() -> None:
    draft = validate(
        minimal(
            links={
                "parent_receipt_id": UUID_A.upper(),
                "child_receipt_ids": [UUID_B.upper()],
                "child_idempotency_keys": ["wf-1/child/end/1"],
            }
        )
    )
    assert "links" not in draft.producer
    assert draft.links == LinkRefs(
        parent_receipt_id=UUID_A,
        parent_idempotency_key=None,
        child_receipt_ids=(UUID_B,),
        child_idempotency_keys=("wf-1/child/end/1",),
    )


def test_it_records_an_empty_links_object_as_sent() -> None:
    assert validate(minimal(links={})).links == LinkRefs(None, None, (), ())


def test_it_accepts_a_parent_named_by_idempotency_key() -> None:
    links = validate(minimal(links={"parent_idempotency_key": "wf-1/parent"})).links
    assert links == LinkRefs(None, "wf-1/parent", (), ())


EDGE_CASES: list[Any] = [
    pytest.param({"workflow_id": "x"}, id="workflow_id of 1"),
    pytest.param({"workflow_id": "x" * 200}, id="workflow_id of 200"),
    pytest.param({"workflow_id": "\U0001f600" * 200}, id="200 astral code points"),
    pytest.param({"step_id": ""}, id="empty step_id"),
    pytest.param({"step_id": "x" * 200}, id="step_id of 200"),
    pytest.param({"attempt": {"number": 1}}, id="attempt number 1"),
    pytest.param({"attempt": {"number": MAX}}, id="attempt number 2^53-1"),
    pytest.param({"attempt": {"prior_attempt_id": "x" * 200}}, id="prior_attempt_id 200"),
    pytest.param({"attempt": {"retry_reason": "x" * 500}}, id="retry_reason 500"),
    pytest.param({"subject": {"type": "agent_run", "name": "x" * 200}}, id="subject name"),
    pytest.param({"subject": {"type": "model", "name": "m", "version": "v" * 100}}, id="ver"),
    pytest.param({"framework": {"name": "n" * 50, "tool_call_id": "t" * 200}}, id="fw"),
    pytest.param({"session_id": "s" * 200, "actor": "", "trace_id": "t" * 200}, id="corr"),
    pytest.param({"request_id": "r" * 200}, id="request_id of 200"),
    pytest.param({"phase": "completion"}, id="completion"),
    pytest.param({"phase": "confirmation", "outcome": "uncertain"}, id="confirmation"),
    pytest.param({"phase": "handoff", "outcome": "timed_out"}, id="handoff"),
    pytest.param({"outcome": "failed"}, id="failed"),
    pytest.param({"duration_ms": 0}, id="duration 0"),
    pytest.param({"duration_ms": MAX}, id="duration 2^53-1"),
    pytest.param({"input_summary": "x" * 10_000, "result": ""}, id="long free text"),
    pytest.param({"observed": ["o" * 500] * 20}, id="20 observed of 500"),
    pytest.param({"not_observed": ["n" * 500] * 20}, id="20 not_observed of 500"),
    pytest.param({"observed": []}, id="empty observed"),
    pytest.param({"operation_ref": "o" * 200}, id="operation_ref of 200"),
    pytest.param({"idempotency_key": "!"}, id="key of 1"),
    pytest.param({"idempotency_key": "~" * 200}, id="key of 200"),
    pytest.param({"idempotency_key": "".join(map(chr, range(0x21, 0x7F)))}, id="all ascii"),
    pytest.param({"metadata": {f"k{i}": i for i in range(20)}}, id="20 metadata keys"),
    pytest.param({"metadata": {"a" + "b" * 63: "x"}}, id="64-char metadata key"),
    pytest.param({"metadata": {"a.b-c_d9": "x" * 500}}, id="metadata string of 500"),
    pytest.param({"metadata": {"big": MAX, "small": -MAX}}, id="safe integer bounds"),
    pytest.param({"metadata": {}}, id="empty metadata"),
    pytest.param(
        {
            "links": {
                "child_receipt_ids": [
                    f"{i:08x}-0000-4000-8000-000000000000" for i in range(50)
                ],
                "child_idempotency_keys": [f"k{i}" for i in range(50)],
            }
        },
        id="100 children in all",
    ),
]


@pytest.mark.parametrize("changes", EDGE_CASES)
def test_it_accepts_values_at_the_edge_of_their_limits(changes: dict[str, Any]) -> None:
    payload = minimal(**changes)
    producer = validate(copy.deepcopy(payload)).producer
    for key, value in changes.items():
        if key != "links":
            assert producer[key] == (value if key != "attempt" else {"number": 1, **value})


# --------------------------------------------------------------------------------------------
# validate: what fails


def test_it_rejects_the_documented_example_exactly() -> None:
    payload = dict(EXAMPLE_BODY, duration_ms=1.5, colour="red")
    del payload["idempotency_key"]
    with pytest.raises(DocumentInvalid) as caught:
        validate(payload)
    assert caught.value.errors == [
        {"field": "/duration_ms", "message": "must be an integer (no fraction, no exponent)"},
        {"field": "/colour", "message": "is not a field of receipt/v1"},
    ]


@pytest.mark.parametrize("payload", [[], ["a"], "x", 1, 1.5, True, None])
def test_it_rejects_a_top_level_value_that_is_not_an_object(payload: object) -> None:
    assert errors_of(payload) == [("", "must be a JSON object")]


BAD_FIELDS: list[Any] = [
    # workflow_id
    ({"workflow_id": ABSENT}, [("/workflow_id", REQUIRED)]),
    ({"workflow_id": None}, [("/workflow_id", REQUIRED)]),
    ({"workflow_id": ""}, [("/workflow_id", "must be 1 to 200 characters long")]),
    ({"workflow_id": "x" * 201}, [("/workflow_id", "must be 1 to 200 characters long")]),
    ({"workflow_id": "\U0001f600" * 201}, [("/workflow_id", "must be 1 to 200 characters long")]),
    ({"workflow_id": 7}, [("/workflow_id", "must be a string")]),
    ({"workflow_id": ["wf"]}, [("/workflow_id", "must be a string")]),
    # step_id
    ({"step_id": "x" * 201}, [("/step_id", "must be at most 200 characters long")]),
    ({"step_id": False}, [("/step_id", "must be a string")]),
    # attempt
    ({"attempt": "2"}, [("/attempt", "must be a JSON object")]),
    ({"attempt": [1]}, [("/attempt", "must be a JSON object")]),
    ({"attempt": {"number": 0}}, [("/attempt/number", f"must be between 1 and {MAX}")]),
    ({"attempt": {"number": -1}}, [("/attempt/number", f"must be between 1 and {MAX}")]),
    ({"attempt": {"number": MAX + 1}}, [("/attempt/number", f"must be between 1 and {MAX}")]),
    ({"attempt": {"number": 1.0}}, [("/attempt/number", INTEGER)]),
    ({"attempt": {"number": True}}, [("/attempt/number", INTEGER)]),
    ({"attempt": {"number": "1"}}, [("/attempt/number", INTEGER)]),
    (
        {"attempt": {"prior_attempt_id": "x" * 201}},
        [("/attempt/prior_attempt_id", "must be at most 200 characters long")],
    ),
    (
        {"attempt": {"retry_reason": "x" * 501}},
        [("/attempt/retry_reason", "must be at most 500 characters long")],
    ),
    ({"attempt": {"id": "a"}}, [("/attempt/id", UNKNOWN)]),
    # phase
    ({"phase": ABSENT}, [("/phase", REQUIRED)]),
    ({"phase": "begin", "outcome": ABSENT}, [("/phase", PHASES)]),
    ({"phase": "END"}, [("/phase", PHASES)]),
    ({"phase": 1}, [("/phase", PHASES)]),
    # subject
    ({"subject": ABSENT}, [("/subject", REQUIRED)]),
    ({"subject": None}, [("/subject", REQUIRED)]),
    ({"subject": "tool"}, [("/subject", "must be a JSON object")]),
    ({"subject": {}}, [("/subject/type", REQUIRED), ("/subject/name", REQUIRED)]),
    ({"subject": {"type": "robot", "name": "x"}}, [("/subject/type", SUBJECT_TYPES)]),
    (
        {"subject": {"type": "tool", "name": ""}},
        [("/subject/name", "must be 1 to 200 characters long")],
    ),
    (
        {"subject": {"type": "tool", "name": "x" * 201}},
        [("/subject/name", "must be 1 to 200 characters long")],
    ),
    (
        {"subject": {"type": "tool", "name": "x", "version": "v" * 101}},
        [("/subject/version", "must be at most 100 characters long")],
    ),
    ({"subject": {"type": "tool", "name": "x", "colour": "red"}}, [("/subject/colour", UNKNOWN)]),
    # framework
    ({"framework": "langchain"}, [("/framework", "must be a JSON object")]),
    (
        {"framework": {"name": "n" * 51}},
        [("/framework/name", "must be at most 50 characters long")],
    ),
    *[
        (
            {"framework": {name: "x" * 201}},
            [(f"/framework/{name}", "must be at most 200 characters long")],
        )
        for name in ("version", "run_id", "parent_run_id", "tool_call_id")
    ],
    ({"framework": {"run": "1"}}, [("/framework/run", UNKNOWN)]),
    # correlation ids
    *[
        ({name: "x" * 201}, [(f"/{name}", "must be at most 200 characters long")])
        for name in ("session_id", "actor", "trace_id", "request_id")
    ],
    ({"actor": {"name": "ann"}}, [("/actor", "must be a string")]),
    # outcome
    ({"phase": "start"}, [("/outcome", "must not be sent on a start record")]),
    *[
        ({"phase": phase, "outcome": ABSENT}, [("/outcome", REQUIRED)])
        for phase in ("end", "completion", "confirmation", "handoff")
    ],
    ({"outcome": None}, [("/outcome", REQUIRED)]),
    ({"outcome": "ok"}, [("/outcome", OUTCOMES)]),
    ({"outcome": "Succeeded"}, [("/outcome", OUTCOMES)]),
    # timestamps
    *[
        ({"started_at": value}, [("/started_at", TIMESTAMP)])
        for value in (
            "2026-11-30T14:30:00",  # no offset
            "2026-11-30 14:30:00Z",  # space instead of T
            "2026-11-30",  # date only
            "14:30:00Z",  # time only
            "2026-02-29T00:00:00Z",  # not a leap year
            "1900-02-29T00:00:00Z",  # century, not a leap year
            "2026-04-31T00:00:00Z",  # April has 30 days
            "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z",
            "2026-11-00T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T14:60:00Z",
            "2026-11-30T14:30:61Z",
            "2026-11-30T14:30:00+24:00",
            "2026-11-30T14:30:00+05:60",
            "2026-11-30T14:30:00+0530",
            "2026-11-30T14:30:00.Z",
            "2026-11-30T14:30Z",
            "26-11-30T14:30:00Z",
            "2026-11-30T14:30:00Z\n",
            "\u0662\u0660\u0662\u0666-11-30T14:30:00Z",  # Arabic-Indic digits
            "",
        )
    ],
    ({"ended_at": "yesterday"}, [("/ended_at", TIMESTAMP)]),
    ({"ended_at": 1764513067}, [("/ended_at", "must be a string")]),
    # duration_ms
    ({"duration_ms": 1.5}, [("/duration_ms", INTEGER)]),
    ({"duration_ms": 1.0}, [("/duration_ms", INTEGER)]),
    ({"duration_ms": 1e3}, [("/duration_ms", INTEGER)]),
    ({"duration_ms": True}, [("/duration_ms", INTEGER)]),
    ({"duration_ms": "5"}, [("/duration_ms", INTEGER)]),
    ({"duration_ms": -1}, [("/duration_ms", f"must be between 0 and {MAX}")]),
    ({"duration_ms": MAX + 1}, [("/duration_ms", f"must be between 0 and {MAX}")]),
    # free text
    ({"input_summary": {"url": "x"}}, [("/input_summary", "must be a string")]),
    ({"result": 12}, [("/result", "must be a string")]),
    # observed / not_observed
    *[
        case
        for name in ("observed", "not_observed")
        for case in (
            ({name: "one thing"}, [(f"/{name}", "must be a list of strings")]),
            ({name: ["x"] * 21}, [(f"/{name}", "must have at most 20 entries")]),
            ({name: ["ok", "x" * 501]}, [(f"/{name}/1", "must be at most 500 characters long")]),
            ({name: ["ok", 3]}, [(f"/{name}/1", "must be a string")]),
            ({name: [None]}, [(f"/{name}/0", "must be a string")]),
        )
    ],
    # operation_ref
    ({"operation_ref": "x" * 201}, [("/operation_ref", "must be at most 200 characters long")]),
    # links
    ({"links": [UUID_A]}, [("/links", "must be a JSON object")]),
    ({"links": {"parent_receipt_id": "abc"}}, [("/links/parent_receipt_id", RECEIPT_ID)]),
    (
        {"links": {"parent_receipt_id": UUID_A.replace("-", "")}},
        [("/links/parent_receipt_id", RECEIPT_ID)],
    ),
    (
        {"links": {"parent_receipt_id": "{" + UUID_A + "}"}},
        [("/links/parent_receipt_id", RECEIPT_ID)],
    ),
    ({"links": {"parent_receipt_id": 5}}, [("/links/parent_receipt_id", "must be a string")]),
    (
        {"links": {"child_receipt_ids": UUID_A}},
        [("/links/child_receipt_ids", "must be a list of receipt ids")],
    ),
    (
        {"links": {"child_receipt_ids": [UUID_A, "nope"]}},
        [("/links/child_receipt_ids/1", RECEIPT_ID)],
    ),
    (
        {
            "links": {
                "child_receipt_ids": [f"{i:08x}-0000-4000-8000-000000000000" for i in range(101)]
            }
        },
        [("/links/child_receipt_ids", "must have at most 100 entries")],
    ),
    (
        {"links": {"child_receipt_ids": [UUID_A, UUID_B, UUID_A.upper()]}},
        [("/links/child_receipt_ids/2", "repeats the entry at /links/child_receipt_ids/0")],
    ),
    (
        {"links": {"child_idempotency_keys": ["k1", "k1"]}},
        [
            (
                "/links/child_idempotency_keys/1",
                "repeats the entry at /links/child_idempotency_keys/0",
            )
        ],
    ),
    (
        {"links": {"child_idempotency_keys": ["has space"]}},
        [("/links/child_idempotency_keys/0", KEY_CHARS)],
    ),
    (
        {"links": {"parent_idempotency_key": ""}},
        [("/links/parent_idempotency_key", "must be 1 to 200 characters long")],
    ),
    (
        {"links": {"parent_receipt_id": UUID_A, "parent_idempotency_key": "wf/parent"}},
        [
            (
                "/links",
                "names the parent twice: send parent_receipt_id or parent_idempotency_key, "
                "not both",
            )
        ],
    ),
    (
        {
            "links": {
                "child_receipt_ids": [f"{i:08x}-0000-4000-8000-000000000000" for i in range(51)],
                "child_idempotency_keys": [f"k{i}" for i in range(50)],
            }
        },
        [("/links", "must name at most 100 child receipts in all")],
    ),
    ({"links": {"parent": UUID_A}}, [("/links/parent", UNKNOWN)]),
    # idempotency_key
    ({"idempotency_key": ""}, [("/idempotency_key", "must be 1 to 200 characters long")]),
    ({"idempotency_key": "k" * 201}, [("/idempotency_key", "must be 1 to 200 characters long")]),
    ({"idempotency_key": "has space"}, [("/idempotency_key", KEY_CHARS)]),
    ({"idempotency_key": "tab\there"}, [("/idempotency_key", KEY_CHARS)]),
    ({"idempotency_key": "del\x7f"}, [("/idempotency_key", KEY_CHARS)]),
    ({"idempotency_key": "café"}, [("/idempotency_key", KEY_CHARS)]),
    ({"idempotency_key": 42}, [("/idempotency_key", "must be a string")]),
    # metadata
    ({"metadata": ["ticket"]}, [("/metadata", "must be a JSON object")]),
    ({"metadata": {f"k{i}": i for i in range(21)}}, [("/metadata", "must have at most 20 keys")]),
    ({"metadata": {"Ticket": "x"}}, [("/metadata/Ticket", METADATA_KEY)]),
    ({"metadata": {"1st": "x"}}, [("/metadata/1st", METADATA_KEY)]),
    ({"metadata": {"": "x"}}, [("/metadata/", METADATA_KEY)]),
    ({"metadata": {"a" + "b" * 64: "x"}}, [("/metadata/a" + "b" * 64, METADATA_KEY)]),
    ({"metadata": {"a b": "x"}}, [("/metadata/a b", METADATA_KEY)]),
    ({"metadata": {"a\n": "x"}}, [("/metadata/a\n", METADATA_KEY)]),
    ({"metadata": {"a/b": "x"}}, [("/metadata/a~1b", METADATA_KEY)]),
    ({"metadata": {"a": 1.5}}, [("/metadata/a", METADATA_VALUE)]),
    ({"metadata": {"a": 2.0}}, [("/metadata/a", METADATA_VALUE)]),
    ({"metadata": {"a": [1]}}, [("/metadata/a", METADATA_VALUE)]),
    ({"metadata": {"a": {"b": 1}}}, [("/metadata/a", METADATA_VALUE)]),
    ({"metadata": {"a": "x" * 501}}, [("/metadata/a", "must be at most 500 characters long")]),
    ({"metadata": {"a": MAX + 1}}, [("/metadata/a", f"must be between -{MAX} and {MAX}")]),
    ({"metadata": {"a": -MAX - 1}}, [("/metadata/a", f"must be between -{MAX} and {MAX}")]),
    # site fields
    *[({name: "x"}, [(f"/{name}", SITE)]) for name in ("schema", "id", "tenant", "recorded_at")],
    ({"publisher": {"key_prefix": "rk_x"}}, [("/publisher", SITE)]),
    ({"redactions": []}, [("/redactions", SITE)]),
    ({"id": None}, [("/id", SITE)]),
    # unknown keys
    ({"colour": "red"}, [("/colour", UNKNOWN)]),
    ({"colour": None}, [("/colour", UNKNOWN)]),
    ({"Workflow_id": "wf"}, [("/Workflow_id", UNKNOWN)]),
    ({"a/b~c": 1}, [("/a~1b~0c", UNKNOWN)]),
    ({"": 1}, [("/", UNKNOWN)]),
    # lone surrogates, in values and in keys
    ({"workflow_id": "wf\ud800"}, [("/workflow_id", SURROGATE)]),
    ({"step_id": "\udfff"}, [("/step_id", SURROGATE)]),
    ({"phase": "\ud800"}, [("/phase", SURROGATE)]),
    ({"subject": {"type": "tool", "name": "a\udc00b"}}, [("/subject/name", SURROGATE)]),
    ({"started_at": "\ud800"}, [("/started_at", SURROGATE)]),
    ({"result": "ok\ud800"}, [("/result", SURROGATE)]),
    ({"observed": ["fine", "\ud800"]}, [("/observed/1", SURROGATE)]),
    ({"idempotency_key": "k\ud800"}, [("/idempotency_key", SURROGATE)]),
    ({"links": {"parent_receipt_id": "\ud800"}}, [("/links/parent_receipt_id", SURROGATE)]),
    ({"metadata": {"note": "\ud800"}}, [("/metadata/note", SURROGATE)]),
    ({"metadata": {"k\ud800": "x"}}, [("/metadata/k\ufffd", SURROGATE)]),
    ({"\ud800": 1}, [("/\ufffd", SURROGATE)]),
    ({"subject": {"type": "tool", "name": "x", "\udc00": 1}}, [("/subject/\ufffd", SURROGATE)]),
]


@pytest.mark.parametrize(
    ("changes", "expected"),
    BAD_FIELDS,
    ids=[json.dumps(changes, default=str)[:60] for changes, _ in BAD_FIELDS],
)
def test_it_rejects_a_bad_field_with_its_pointer_and_message(
    changes: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert errors_of(minimal(**changes)) == expected


def test_it_names_every_offending_field_in_table_order_then_unknown_keys_as_sent() -> None:
    payload = {
        "zebra": 1,
        "metadata": {"Bad": 1},
        "duration_ms": -5,
        "id": UUID_A,
        "phase": "start",
        "outcome": "failed",
        "subject": {"extra": 1, "name": "", "type": "x"},
        "attempt": {"retry_reason": 5, "number": 0},
        "apple": 2,
    }
    assert errors_of(payload) == [
        ("/workflow_id", REQUIRED),
        ("/attempt/number", f"must be between 1 and {MAX}"),
        ("/attempt/retry_reason", "must be a string"),
        ("/subject/type", SUBJECT_TYPES),
        ("/subject/name", "must be 1 to 200 characters long"),
        ("/subject/extra", UNKNOWN),
        ("/outcome", "must not be sent on a start record"),
        ("/duration_ms", f"must be between 0 and {MAX}"),
        ("/metadata/Bad", METADATA_KEY),
        ("/zebra", UNKNOWN),
        ("/id", SITE),
        ("/apple", UNKNOWN),
    ]


def test_it_names_every_bad_entry_of_a_list_as_well_as_its_length() -> None:
    assert errors_of(minimal(observed=[1] * 21)) == [
        ("/observed", "must have at most 20 entries"),
        *[(f"/observed/{i}", "must be a string") for i in range(21)],
    ]


def test_it_does_not_require_outcome_when_the_phase_itself_is_wrong() -> None:
    assert errors_of(minimal(phase="done", outcome=ABSENT)) == [("/phase", PHASES)]


def test_it_still_checks_outcome_values_when_the_phase_is_wrong() -> None:
    assert errors_of(minimal(phase="done", outcome="ok")) == [
        ("/phase", PHASES),
        ("/outcome", OUTCOMES),
    ]


# --------------------------------------------------------------------------------------------
# RFC 3339


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-30T14:31:07Z",
        "2026-11-30t14:31:07z",
        "2026-11-30T14:31:07.123456Z",
        "2026-11-30T14:31:07.1234567890+05:30",
        "2026-11-30T14:31:07-00:00",
        "2026-11-30T14:31:07+23:59",
        "2024-02-29T00:00:00Z",
        "2000-02-29T00:00:00Z",
        "2026-12-31T23:59:60Z",
        "0000-01-01T00:00:00Z",
    ],
)
def test_it_recognises_an_rfc3339_date_time(value: str) -> None:
    assert is_rfc3339(value) is True


@pytest.mark.parametrize(
    "value",
    ["2026-11-30T14:31:07", "2023-02-29T00:00:00Z", "2026-11-31T00:00:00Z", "2026-11-30T14:31Z"],
)
def test_it_refuses_what_is_not_an_rfc3339_date_time(value: str) -> None:
    assert is_rfc3339(value) is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-30T14:31:07Z", datetime(2026, 11, 30, 14, 31, 7, tzinfo=UTC)),
        ("2026-11-30t14:31:07z", datetime(2026, 11, 30, 14, 31, 7, tzinfo=UTC)),
        (
            "2026-11-30T14:31:07.5+05:30",
            datetime(
                2026, 11, 30, 14, 31, 7, 500000, tzinfo=timezone(timedelta(hours=5, minutes=30))
            ),
        ),
        (
            "2026-11-30T14:31:07.1234569-01:00",
            datetime(2026, 11, 30, 14, 31, 7, 123456, tzinfo=timezone(timedelta(hours=-1))),
        ),
        ("2026-12-31T23:59:60Z", datetime(2027, 1, 1, 0, 0, 0, tzinfo=UTC)),
    ],
)
def test_it_parses_an_rfc3339_date_time_to_an_aware_datetime(
    value: str, expected: datetime
) -> None:
    parsed = parse_rfc3339(value)
    assert parsed == expected
    assert parsed.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize(
    "value",
    ["", "2026-11-30", "2026-11-30T14:31:07", "0000-01-01T00:00:00Z", "9999-12-31T23:59:60Z"],
)
def test_it_raises_value_error_for_what_it_cannot_parse(value: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(value)


# --------------------------------------------------------------------------------------------
# Links resolved, and the evidence document


def test_it_leaves_links_out_when_none_were_sent() -> None:
    assert "links" not in producer_with_links(validate(minimal()), None, [])


def test_it_puts_resolved_ids_in_links_and_never_the_key_forms() -> None:
    draft = validate(
        minimal(links={"parent_idempotency_key": "p", "child_idempotency_keys": ["c1", "c2"]})
    )
    producer = producer_with_links(draft, UUID_A, [UUID_B, UUID_A])
    assert producer["links"] == {"parent_receipt_id": UUID_A, "child_receipt_ids": [UUID_B, UUID_A]}


def test_it_leaves_out_the_parts_of_links_that_name_nothing() -> None:
    only_parent = validate(minimal(links={"parent_receipt_id": UUID_A}))
    only_children = validate(minimal(links={"child_receipt_ids": [UUID_B]}))
    empty = validate(minimal(links={"child_receipt_ids": []}))
    assert producer_with_links(only_parent, UUID_A, [])["links"] == {"parent_receipt_id": UUID_A}
    assert producer_with_links(only_children, None, [UUID_B])["links"] == {
        "child_receipt_ids": [UUID_B]
    }
    assert producer_with_links(empty, None, [])["links"] == {}


def test_it_does_not_change_the_draft_when_adding_links() -> None:
    draft = validate(minimal(links={"parent_receipt_id": UUID_A}))
    before = copy.deepcopy(draft)
    producer_with_links(draft, UUID_A, [])["attempt"]["number"] = 9
    assert draft == before


def test_it_builds_the_canonical_bytes_of_the_example_exactly() -> None:
    data = rfc8785.dumps(build_example_document())
    assert base64.b64encode(data).decode() == EXAMPLE_CANONICAL_B64
    assert hashlib.sha256(data).hexdigest() == EXAMPLE_HASH
    assert len(data) == 1059


def test_it_adds_the_site_fields_and_appends_the_boundary_statement() -> None:
    producer = validate(minimal(phase="start", outcome=ABSENT, not_observed=["mine"])).producer
    redactions = [{"field": "/result", "reason": "secret", "removed_chars": 5}]
    document = evidence_document(
        producer,
        receipt_id=UUID_A,
        tenant_slug="acme",
        tenant_name="Acme Corp",
        recorded_at="2026-11-30T09:31:42.062797Z",
        key_prefix="rk_abc",
        redactions=redactions,
    )
    assert document == {
        "workflow_id": "wf-1",
        "attempt": {"number": 1},
        "phase": "start",
        "subject": {"type": "tool", "name": "search"},
        "not_observed": [
            "mine",
            "A start record shows that the step was invoked. It cannot show its result.",
        ],
        "schema": "receipt/v1",
        "id": UUID_A,
        "tenant": {"slug": "acme", "name": "Acme Corp"},
        "recorded_at": "2026-11-30T09:31:42.062797Z",
        "publisher": {"key_prefix": "rk_abc"},
        "redactions": redactions,
    }
    assert producer["not_observed"] == ["mine"]


@pytest.mark.parametrize(
    ("phase", "statement"),
    [
        ("start", "A start record shows that the step was invoked. It cannot show its result."),
        ("end", END_BOUNDARY),
        ("completion", END_BOUNDARY),
        (
            "confirmation",
            "This records the confirmation the runtime observed from the provider; it does not "
            "show anything the provider did not confirm.",
        ),
        (
            "handoff",
            "This records what was handed over and when. It does not show that the recipient "
            "reviewed or accepted it.",
        ),
    ],
)
def test_it_has_one_boundary_statement_for_each_phase(phase: str, statement: str) -> None:
    assert BOUNDARY[phase] == statement


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=30,
)


def containers(value: Any) -> Iterator[Any]:
    """Every object and array in `value`, outermost first."""
    if isinstance(value, (dict, list)):
        yield value
        for item in value.values() if isinstance(value, dict) else value:
            yield from containers(item)


@given(JSON_VALUES)
@hyp_settings(max_examples=200)
def test_json_copy_is_deepcopy_with_no_part_shared(value: Any) -> None:
    """What ingest copies before changing it (the producer's part, its redaction, the
    document): equal to the original, and no object or array of it is the original's, so
    that changing the copy anywhere leaves the original as it was."""
    copied = json_copy(value)
    assert copied == copy.deepcopy(value)
    originals = {id(part) for part in containers(value)}
    assert not any(id(part) in originals for part in containers(copied))
    before = copy.deepcopy(value)
    for part in containers(copied):
        if isinstance(part, dict):
            part["changed"] = True
        else:
            part.append("changed")
    assert value == before


@hyp_settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["", "/metadata", "/links/0"]),
    st.one_of(
        st.integers(min_value=0, max_value=10_000),
        st.text(st.characters(categories=["L", "N", "P", "S", "Zs", "Cs"]), max_size=12),
        st.text(alphabet="ab~/01", max_size=8),
    ),
)
def test_a_joined_pointer_names_the_token_and_can_be_written_as_utf_8(
    parent: str, token: int | str
) -> None:
    # RFC 6901: "~" is written "~0" and "/" "~1"; a lone surrogate (which no UTF-8 can hold)
    # is shown as U+FFFD.
    pointer = join_pointer(parent, token)
    pointer.encode("utf-8")
    assert pointer.startswith(parent + "/")
    last = pointer[len(parent) + 1 :]
    assert "/" not in last
    expected = str(token) if isinstance(token, int) else "".join(
        "\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in token
    )
    assert last.replace("~1", "/").replace("~0", "~") == expected

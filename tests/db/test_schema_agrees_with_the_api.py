"""The JSON Schema published at /api/openapi.json and the API give the same verdict.

One corpus of documents, valid and invalid: the document tests' own cases plus documents that
hypothesis generates around the contract's fields. Each goes to the API (POST /api/receipts,
201 or 422) and to `jsonschema` against the schema the site serves. They must agree, except
where the schema's own description says JSON Schema cannot express a rule; those exceptions
are named one by one below, and each is recognised by the API's own error message.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receiptsite.evidence.kinds import (
    INTEGER_MESSAGE,
    METADATA_VALUE_MESSAGE,
    SECRET_MESSAGE,
    SURROGATE_MESSAGE,
)
from tests.conftest import Producer
from tests.unit.test_document import ABSENT, BAD_FIELDS, EDGE_CASES, MAX, minimal

pytestmark = pytest.mark.db

# The rules the schema's description lists as beyond JSON Schema, as the API words them.
LINK_MISSING = "names no receipt of this tenant"
LINK_TWICE = "names a child that is already linked"
CHILDREN_IN_ALL = "must name at most 100 child receipts in all"


def schema_of(client: Client) -> dict[str, Any]:
    spec = client.get("/api/openapi.json").json()
    schema: dict[str, Any] = spec["components"]["schemas"]["ReceiptIn"]
    return schema


def has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(has_integral_float(v) for v in value)
    return False


def api_verdict(producer: Producer, document: Any) -> tuple[bool, list[dict[str, str]], str]:
    """(accepted, the validation errors, the problem type's slug) for one document."""
    # ASCII escapes: a lone surrogate travels as \ud800, which is JSON, not as bad UTF-8.
    response = producer.post(json.dumps(document))
    assert response.status_code in (201, 422), response.content
    if response.status_code == 201:
        return True, [], ""
    answer = response.json()
    return False, answer.get("errors", []), answer["type"].rsplit("/", 1)[-1]


def repeats_in_another_case(document: Any) -> bool:
    links = document.get("links") if isinstance(document, dict) else None
    children = links.get("child_receipt_ids") if isinstance(links, dict) else None
    if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
        return False
    return len({c.lower() for c in children}) < len(set(children))


def listed_exception(document: Any, errors: list[dict[str, str]], slug: str) -> str | None:
    """Which of the schema's listed exceptions explains an API refusal the schema allows."""
    if slug == "idempotency-key-reused":
        return "idempotency"
    messages = {error["message"] for error in errors}
    if repeats_in_another_case(document):
        messages = {m for m in messages if not m.startswith("repeats the entry at")}
    explained = {SURROGATE_MESSAGE, SECRET_MESSAGE, LINK_MISSING, LINK_TWICE, CHILDREN_IN_ALL}
    if has_integral_float(document):  # 1.0 is no integer, in any field that takes one
        explained |= {INTEGER_MESSAGE, METADATA_VALUE_MESSAGE}
    if messages <= explained:
        return ", ".join(sorted(messages)) or "a child repeated in another case"
    return None


def assert_agree(producer: Producer, validator: Any, document: Any) -> None:
    schema_valid = validator.is_valid(document)
    accepted, errors, slug = api_verdict(producer, copy.deepcopy(document))
    if schema_valid == accepted:
        return
    if schema_valid and not accepted and listed_exception(document, errors, slug):
        return
    detail = [e.message for e in validator.iter_errors(document)][:3]
    raise AssertionError(
        f"schema says {'valid' if schema_valid else 'invalid'} {detail}, "
        f"the API says {'201' if accepted else f'422 {errors}'} for {document!r}"
    )


@pytest.fixture(scope="module")
def validator() -> Any:
    # The schema as the site serves it (a public route that reads no database), checked and
    # compiled once for the module: compiling it was a third of each test's time.
    schema = schema_of(Client())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def corpus() -> list[Any]:
    """The document tests' cases: the values at the edge of their limits, every bad field."""
    documents: list[Any] = []
    for case in EDGE_CASES:
        documents.append(minimal(**case.values[0]))
    for changes, _ in BAD_FIELDS:
        documents.append(minimal(**changes))
    documents += [[], ["a"], "x", 1, 1.5, True, None]
    return documents


def test_the_schema_is_a_valid_json_schema_with_the_outcome_rule(validator: Any) -> None:
    start = minimal(phase="start", outcome=ABSENT)
    assert validator.is_valid(start)
    assert not validator.is_valid(minimal(phase="start"))  # outcome refused on a start
    assert not validator.is_valid(minimal(outcome=ABSENT))  # required on an end
    assert validator.is_valid(minimal(phase="start", outcome=None))  # null is absent


@pytest.mark.parametrize("index", range(len(corpus())))
def test_the_api_and_the_schema_agree_on_the_document_tests_cases(
    producer: Producer, validator: Any, index: int
) -> None:
    document = corpus()[index]
    # Keys must not collide across cases: each case is its own request.
    if isinstance(document, dict) and "idempotency_key" in document:
        document = {**document, "idempotency_key": f"{document['idempotency_key']}"}
    assert_agree(producer, validator, document)


def test_the_listed_exceptions_really_are_refused_by_the_api(
    producer: Producer, validator: Any
) -> None:
    # Each exception of the schema's description, shown once: the schema allows the document,
    # the API refuses it, with the message that names the rule.
    cases = [
        (minimal(duration_ms=1.0), INTEGER_MESSAGE),
        (minimal(workflow_id="sk-proj-Ab3dEf6hIj9kLmNoPq12"), SECRET_MESSAGE),
        (minimal(links={"parent_receipt_id": "f5245d22-e650-49ae-8876-f1a335f309bc"}),
         LINK_MISSING),
    ]
    for document, message in cases:
        assert validator.is_valid(document)
        accepted, errors, _ = api_verdict(producer, document)
        assert not accepted
        assert message in {error["message"] for error in errors}


# --- generated documents ------------------------------------------------------------------------

SHORT_TEXT = st.text(max_size=8)
LONGISH = st.one_of(
    SHORT_TEXT,
    st.integers(0, 3).map(lambda n: "x" * (199 + n)),
    st.integers(0, 3).map(lambda n: "y" * (499 + n)),
    st.integers(0, 3).map(lambda n: "z" * (49 + n)),
    st.integers(0, 3).map(lambda n: "v" * (99 + n)),
    st.just(""),
    st.just("a\x00b"),
)
ANY_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**60), 2**60),
    st.sampled_from([0, 1, -1, MAX, MAX + 1, -MAX, -MAX - 1, 1.5, 2.0, -0.0]),
    SHORT_TEXT,
)
ANY_JSON = st.recursive(
    ANY_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SHORT_TEXT, inner, max_size=3),
    max_leaves=6,
)
STRING_ISH = st.one_of(LONGISH, ANY_JSON)
UUIDS = st.sampled_from(
    ["f5245d22-e650-49ae-8876-f1a335f309bc", "0b7c2f0e-3c1d-4e5f-9a8b-7c6d5e4f3a2b", "nope"]
)
TIMESTAMPS = st.sampled_from(
    [
        "2026-11-30T14:31:07Z",
        "2026-11-30T14:31:07.123+05:30",
        "2026-11-30 14:31:07Z",
        "2026-11-30T14:31:07",
        "2026-02-30T00:00:00Z",
        "yesterday",
    ]
)
KEYS = st.one_of(LONGISH, st.sampled_from(["a b", "k\u00e9", "ok/1", "!"]))


def objects(members: dict[str, Any], extra: bool = True) -> Any:
    """Objects with some of `members` (each from its strategy), sometimes an unknown key."""
    names = sorted(members)
    unknown = st.sampled_from(["colour", "Bad", "id"]) if extra else st.nothing()
    return st.builds(
        lambda chosen, values, stray: {
            **{name: values[name] for name in chosen},
            **({stray[0]: stray[1]} if stray else {}),
        },
        st.sets(st.sampled_from(names), max_size=len(names)),
        st.fixed_dictionaries({name: members[name] for name in names}),
        st.one_of(st.none(), st.tuples(unknown, ANY_SCALAR)) if extra else st.none(),
    )


FIELDS: dict[str, Any] = {
    "workflow_id": STRING_ISH,
    "step_id": STRING_ISH,
    "attempt": st.one_of(
        objects(
            {
                "number": st.one_of(st.integers(-1, 3), ANY_SCALAR),
                "prior_attempt_id": STRING_ISH,
                "retry_reason": STRING_ISH,
            }
        ),
        ANY_SCALAR,
    ),
    "phase": st.one_of(
        st.sampled_from(["start", "end", "completion", "confirmation", "handoff", "End"]),
        ANY_SCALAR,
    ),
    "subject": st.one_of(
        objects(
            {
                "type": st.sampled_from(
                    ["tool", "task", "chain", "agent_run", "model", "external", "robot"]
                ),
                "name": STRING_ISH,
                "version": STRING_ISH,
            }
        ),
        ANY_SCALAR,
    ),
    "framework": objects(
        dict.fromkeys(("name", "version", "run_id", "parent_run_id", "tool_call_id"), STRING_ISH)
    ),
    "session_id": STRING_ISH,
    "actor": STRING_ISH,
    "trace_id": STRING_ISH,
    "request_id": STRING_ISH,
    "outcome": st.one_of(
        st.sampled_from(["succeeded", "failed", "timed_out", "uncertain", "ok"]), st.none()
    ),
    "started_at": st.one_of(TIMESTAMPS, ANY_SCALAR),
    "ended_at": TIMESTAMPS,
    "duration_ms": st.one_of(st.sampled_from([0, -1, MAX, MAX + 1, 1.0, 2.5]), ANY_SCALAR),
    "input_summary": st.one_of(SHORT_TEXT, st.just("i" * 5000), ANY_SCALAR),
    "result": st.one_of(SHORT_TEXT, ANY_SCALAR),
    "observed": st.one_of(st.lists(STRING_ISH, max_size=22), ANY_SCALAR),
    "not_observed": st.lists(LONGISH, max_size=3),
    "operation_ref": STRING_ISH,
    "links": objects(
        {
            "parent_receipt_id": UUIDS,
            "child_receipt_ids": st.lists(UUIDS, max_size=3),
            "parent_idempotency_key": KEYS,
            "child_idempotency_keys": st.lists(KEYS, max_size=3),
        }
    ),
    "idempotency_key": KEYS,
    "metadata": st.one_of(
        st.dictionaries(
            st.sampled_from(["ticket", "a.b-c_d9", "Bad", "9x", "k" * 65, "ok"]),
            st.one_of(ANY_SCALAR, LONGISH, st.lists(ANY_SCALAR, max_size=1)),
            max_size=4,
        ),
        st.dictionaries(st.text(alphabet="abc", min_size=1, max_size=3), st.booleans(),
                        min_size=19, max_size=22),
        ANY_SCALAR,
    ),
    # Site fields and strangers.
    "recorded_at": TIMESTAMPS,
    "colour": ANY_SCALAR,
}

DOCUMENTS = st.builds(
    lambda changes: minimal(**changes),
    st.dictionaries(
        st.sampled_from(sorted(FIELDS)),
        st.none(),  # replaced below by the field's own strategy
        max_size=4,
    ).flatmap(
        lambda chosen: st.fixed_dictionaries(
            {name: st.one_of(st.just(ABSENT), FIELDS[name]) for name in chosen}
        )
    ),
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=DOCUMENTS)
def test_the_api_and_the_schema_agree_on_generated_documents(
    producer: Producer, validator: Any, document: dict[str, Any]
) -> None:
    assert_agree(producer, validator, document)

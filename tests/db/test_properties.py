"""Properties that hold for every input, checked on inputs hypothesis generates: the canonical
form is idempotent and blind to key order and whitespace; every document the API accepts
verifies; any one changed byte of a stored receipt is caught by verify and by the page."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import rfc8785
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receiptsite.integrity.canonical import canonical_bytes, is_canonical
from receiptsite.receipts.models import Receipt
from tests.conftest import Producer, tamper
from tests.db.test_schema_agrees_with_the_api import DOCUMENTS
from tests.unit.test_document import MAX, minimal

pytestmark = pytest.mark.db

# The examples share one test database (function-scoped fixtures run once per test). No
# deadline: the suite runs on busy machines, and speed is for bench/.
WITH_THE_DATABASE = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- the canonical form -------------------------------------------------------------------------

# JSON values RFC 8785 serialises: finite numbers within ±(2**53 - 1) and text without lone
# surrogates (hypothesis's text leaves those out). Beyond 2**53 an integral float (1e16) is
# written as an integer literal, which json.loads reads back as an int outside the safe range
# that RFC 8785 refuses; receipt/v1 takes integers only, within that range.
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-MAX, MAX),
        st.floats(-MAX, MAX, allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=20,
)
WHITESPACE = st.text(alphabet=" \t\n\r", max_size=3)


def loosely(value: Any, rnd: random.Random, ws: list[str]) -> str:
    """`value` serialised as JSON by hand: keys in a random order, random whitespace between
    tokens (drawn from `ws`), strings escaped or not at random."""

    def gap() -> str:
        return rnd.choice(ws)

    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        members = [f"{gap()}{json.dumps(k, ensure_ascii=rnd.random() < 0.5)}{gap()}:"
                   f"{gap()}{loosely(value[k], rnd, ws)}{gap()}" for k in keys]
        return "{" + ",".join(members) + "}" if members else "{" + gap() + "}"
    if isinstance(value, list):
        items = [f"{gap()}{loosely(item, rnd, ws)}{gap()}" for item in value]
        return "[" + ",".join(items) + "]" if items else "[" + gap() + "]"
    return json.dumps(value, ensure_ascii=rnd.random() < 0.5)


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES)
def test_the_canonical_form_is_idempotent(value: Any) -> None:
    once = canonical_bytes(value)
    assert canonical_bytes(json.loads(once)) == once
    assert is_canonical(once)


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES, rnd=st.randoms(use_true_random=False),
       ws=st.lists(WHITESPACE, min_size=1, max_size=4))
def test_the_canonical_form_ignores_key_order_whitespace_and_escapes(
    value: Any, rnd: random.Random, ws: list[str]
) -> None:
    text = loosely(value, rnd, ws)
    assert canonical_bytes(json.loads(text)) == canonical_bytes(value)
    # ...and the same holds for the bytes of the form as well as for its parse.
    assert canonical_bytes(json.loads(text.encode())) == canonical_bytes(value)


# Characters where a fast serialiser could part from RFC 8785: escapes, the controls, DEL,
# U+2028, the private-use area just below the surrogates' UTF-16 range, lone surrogates, and
# characters beyond the BMP (RFC 8785 sorts keys by UTF-16 code units).
EDGY_TEXT = st.text(
    alphabet=st.sampled_from(
        ['a', 'B', '"', "\\", "/", "\x00", "\x1f", "\x7f", "\u2028", "\ud800", "\udfff",
         "\ue000", "\uffff", "\U00010000", "\U0001f600", "é"]
    ),
    max_size=4,
)
EDGY_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**60), 2**60),
        st.floats(allow_nan=True, allow_infinity=True), EDGY_TEXT,
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(EDGY_TEXT, inner, max_size=5),
    max_leaves=20,
)


def _outcome(serialise: Any, value: Any) -> bytes | str:
    try:
        return bytes(serialise(value))
    except Exception as error:  # noqa: BLE001 - the kind of refusal is what is compared
        return type(error).__name__


@settings(max_examples=400, deadline=None)
@given(value=EDGY_VALUES)
def test_canonical_bytes_is_rfc8785_byte_for_byte_or_refuses_as_it_does(value: Any) -> None:
    # canonical_bytes takes the C JSON encoder where it writes what RFC 8785 writes, and the
    # rfc8785 library (the reference) otherwise: the two must never be told apart.
    assert _outcome(canonical_bytes, value) == _outcome(rfc8785.dumps, value)


def test_the_edgy_values_reach_both_paths_and_the_key_order_rfc8785_asks_for() -> None:
    # The property above would prove little if every value took the same path.
    assert canonical_bytes({"\U0001f600": 1, "\ue000": 2}) == rfc8785.dumps(
        {"\U0001f600": 1, "\ue000": 2}
    )
    assert canonical_bytes({"\U0001f600": 1, "\ue000": 2}).index(b"\xf0") < canonical_bytes(
        {"\U0001f600": 1, "\ue000": 2}).index(b"\xee")  # UTF-16 order: U+1F600 sorts first
    assert canonical_bytes({"a": 1.5}) == b'{"a":1.5}'
    assert _outcome(canonical_bytes, {"a": "\ud800"}) == "CanonicalizationError"


def test_the_loose_serialiser_really_varies_order_and_whitespace() -> None:
    # The property above would be empty if `loosely` always wrote the canonical form.
    value = {"b": [1, {"d": "é", "c": None}], "a": True}
    texts = {loosely(value, random.Random(seed), [" ", "\n\t", ""]) for seed in range(20)}
    assert len(texts) > 10
    assert any(t.index('"b"') < t.index('"a"') for t in texts)
    assert all(canonical_bytes(json.loads(t)) == canonical_bytes(value) for t in texts)


# --- accepted documents verify ------------------------------------------------------------------

# Any text but NUL, which no stored text may hold, and lone surrogates (documented refusals).
CHARACTERS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
TEXT = st.text(CHARACTERS, min_size=1, max_size=40)
METADATA_KEYS = st.from_regex(r"[a-z][a-z0-9_.\-]{0,12}", fullmatch=True)

# Documents meant to be accepted: the smallest valid body with free text, numbers and
# metadata of every kind around it.
ACCEPTABLE = st.builds(
    lambda fields, end: minimal(**fields, **end),
    st.fixed_dictionaries(
        {},
        optional={
            "workflow_id": TEXT,
            "step_id": TEXT,
            "actor": TEXT,
            "result": st.text(CHARACTERS, max_size=200),
            "input_summary": st.text(CHARACTERS, max_size=200),
            "observed": st.lists(TEXT, max_size=3, unique=True),
            "not_observed": st.lists(TEXT, max_size=3, unique=True),
            "duration_ms": st.integers(0, MAX),
            "subject": st.fixed_dictionaries(
                {"type": st.sampled_from(["tool", "task", "chain", "agent_run", "model"]),
                 "name": TEXT},
                optional={"version": TEXT},
            ),
            "metadata": st.dictionaries(
                METADATA_KEYS,
                st.one_of(st.none(), st.booleans(), st.integers(-MAX, MAX),
                          st.text(CHARACTERS, max_size=20)),
                max_size=4,
            ),
        },
    ),
    st.one_of(
        st.fixed_dictionaries({"phase": st.just("start"), "outcome": st.none()}),
        st.fixed_dictionaries(
            {"phase": st.sampled_from(["end", "completion", "confirmation", "handoff"]),
             "outcome": st.sampled_from(["succeeded", "failed", "timed_out", "uncertain"])}
        ),
    ),
)


def assert_verifies(client: Client, receipt_id: str) -> None:
    body = client.get(f"/api/receipt/{receipt_id}/verify").json()
    assert body["status"] == "valid", body["checks"]


@WITH_THE_DATABASE
@given(document=ACCEPTABLE)
def test_every_acceptable_document_is_accepted_and_verifies(
    producer: Producer, client: Client, document: dict[str, Any]
) -> None:
    response = producer.post(document)
    assert response.status_code == 201, (document, response.content)
    assert_verifies(client, response.json()["id"])


@WITH_THE_DATABASE
@given(document=DOCUMENTS)
def test_any_document_the_api_accepts_verifies(
    producer: Producer, client: Client, document: dict[str, Any]
) -> None:
    # The schema test's documents, mostly refused: whatever gets through must verify
    # (a replay, 200, names a receipt stored by an earlier example).
    response = producer.post(json.dumps(document))
    assert response.status_code in (200, 201, 422), response.content
    if response.status_code != 422:
        assert_verifies(client, response.json()["id"])


# --- one changed byte is caught -----------------------------------------------------------------


@pytest.fixture
def stored(producer: Producer) -> Receipt:
    return Receipt.objects.get(public_id=producer.publish()["id"])


class Restore(Exception):
    """Raised to roll the tampering back, so each example starts from the stored receipt."""


def changed(data: bytes, position: float, change: int) -> bytes:
    """`data` with the byte at `position` (0 to 1 of its length) moved by `change` (1 to 255,
    modulo 256: never the same byte)."""
    out = bytearray(data)
    at = int(position * len(out))
    out[at] = (out[at] + change) % 256
    return bytes(out)


def reads_as_json(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data.decode("utf-8")), dict)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError alike
        return False


@WITH_THE_DATABASE
@given(position=st.floats(0, 1, exclude_max=True), change=st.integers(1, 255))
def test_any_one_changed_byte_fails_verify_and_warns_on_the_page(
    stored: Receipt, client: Client, position: float, change: int
) -> None:
    receipt_id = stored.uuid
    data = changed(stored.raw_bytes(), position, change)
    with pytest.raises(Restore), transaction.atomic():
        tamper(receipt_id, canonical_bytes=data)
        body = client.get(f"/api/receipt/{receipt_id}/verify").json()
        assert body["status"] == "invalid", body["checks"]
        # Bytes that no longer read as a JSON object: see the test below.
        if reads_as_json(data):
            page = client.get(f"/run/{receipt_id}")
            assert page.status_code == 200
            assert "does not verify" in page.content.decode()
        raise Restore
    assert_verifies(client, receipt_id)  # the example's change is gone again


@pytest.mark.parametrize(("position", "change"), [(0.0, 0x80 - ord("{")), (0.5, 0x80)])
def test_the_page_warns_when_the_changed_bytes_are_no_json_at_all(
    stored: Receipt, client: Client, position: float, change: int
) -> None:
    data = changed(stored.raw_bytes(), position, change)
    assert not reads_as_json(data)
    tamper(stored.uuid, canonical_bytes=data)
    assert client.get(f"/api/receipt/{stored.uuid}/verify").json()["status"] == "invalid"
    page = client.get(f"/run/{stored.uuid}")
    assert page.status_code == 200
    assert "does not verify" in page.content.decode()
    handoff = client.get(f"/run/{stored.uuid}/handoff.txt")
    assert handoff.status_code == 200 and stored.url in handoff.content.decode()

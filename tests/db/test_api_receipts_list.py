"""GET /api/receipts: the tenant's receipts, newest first, filtered and keyset-paginated."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from django.core import signing as django_signing
from django.test import Client

from receiptsite.receipts import services
from receiptsite.receipts.models import ApiKey
from tests.conftest import Producer, assert_problem, row_security_statements, tamper

pytestmark = pytest.mark.db

SITE = "https://receipts.example.org"
SUMMARY_KEYS = [
    "id", "url", "verify_url", "output_hash", "recorded_at", "log_index", "workflow_id",
    "phase", "subject", "outcome",
]




def listed(producer: Producer, query: str = "") -> dict[str, Any]:
    """The list answer for a raw query string (given as it goes on the wire)."""
    response = producer.client.get(
        "/api/receipts" + (f"?{query}" if query else ""), headers=producer.headers()
    )
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"receipts", "next_cursor"}
    return body


def ids(producer: Producer, query: str = "") -> list[str]:
    return [r["id"] for r in listed(producer, query)["receipts"]]


def publish_many(producer: Producer, count: int, **changes: Any) -> list[str]:
    """Publish `count` receipts (no idempotency key); their ids in storage order."""
    return [producer.publish(idempotency_key=None, **changes)["id"] for _ in range(count)]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """Set the time the site records for the next receipts: push datetimes on the list."""
    times: list[datetime] = []
    monkeypatch.setattr(services, "timezone", SimpleNamespace(now=lambda: times.pop(0)))
    return times


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# --- order and shape ------------------------------------------------------------------------


def test_an_empty_tenant_gets_an_empty_list_and_no_cursor(producer: Producer) -> None:
    assert listed(producer) == {"receipts": [], "next_cursor": None}


def test_receipts_come_newest_first(producer: Producer) -> None:
    stored = publish_many(producer, 4)
    assert ids(producer) == stored[::-1]


def test_the_order_is_storage_order_even_when_the_clock_goes_back(
    producer: Producer, clock: list[datetime]
) -> None:
    clock += [at("2026-11-30T12:00:00+00:00"), at("2026-11-30T10:00:00+00:00"),
              at("2026-11-30T11:00:00+00:00")]
    stored = publish_many(producer, 3)
    assert ids(producer) == stored[::-1]


def test_a_summary_has_exactly_the_documented_fields(producer: Producer) -> None:
    answer = producer.publish()
    [summary] = listed(producer)["receipts"]
    assert list(summary) == SUMMARY_KEYS
    assert summary == {
        **answer,
        "workflow_id": "wf-7f3a",
        "phase": "end",
        "subject": {"type": "tool", "name": "website_audit"},
        "outcome": "succeeded",
    }
    assert summary["url"] == f"{SITE}/run/{answer['id']}"
    assert summary["verify_url"] == f"{SITE}/api/receipt/{answer['id']}/verify"


@pytest.mark.parametrize("stored", [b"not json at all", b"\xff\xfe{", b"[1,2]", b""])
def test_a_receipt_whose_bytes_are_no_document_is_listed_as_not_verifying(
    producer: Producer, stored: bytes
) -> None:
    first, changed, last = (producer.publish(idempotency_key=None) for _ in range(3))
    tamper(changed["id"], canonical_bytes=stored)
    summaries = listed(producer)["receipts"]
    assert [s["id"] for s in summaries] == [last["id"], changed["id"], first["id"]]
    usual = {
        "workflow_id": "wf-7f3a",
        "phase": "end",
        "subject": {"type": "tool", "name": "website_audit"},
        "outcome": "succeeded",
    }
    assert summaries[0] == {**last, **usual}
    assert summaries[2] == {**first, **usual}
    assert summaries[1] == {**changed, **usual, "subject": None, "status": "invalid"}
    assert list(summaries[1]) == [*SUMMARY_KEYS, "status"]


def test_a_start_has_a_null_outcome(producer: Producer) -> None:
    producer.publish(phase="start", outcome=None, idempotency_key=None)
    [summary] = listed(producer)["receipts"]
    assert summary["phase"] == "start"
    assert "outcome" in summary
    assert summary["outcome"] is None


def test_the_subject_is_the_documents_subject_with_its_version(producer: Producer) -> None:
    producer.publish(subject={"type": "model", "name": "gpt", "version": "2026-01"})
    [summary] = listed(producer)["receipts"]
    assert summary["subject"] == {"type": "model", "name": "gpt", "version": "2026-01"}


def test_log_indexes_follow_the_storage_order(producer: Producer) -> None:
    publish_many(producer, 3)
    assert [r["log_index"] for r in listed(producer)["receipts"]] == [2, 1, 0]


# --- filters --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "changes"),
    [
        ("workflow_id", "wf-other", {"workflow_id": "wf-other"}),
        ("session_id", "sess-1", {"session_id": "sess-1"}),
        ("subject_name", "send_email", {"subject": {"type": "tool", "name": "send_email"}}),
        ("phase", "confirmation", {"phase": "confirmation"}),
        ("outcome", "failed", {"outcome": "failed"}),
    ],
)
def test_each_filter_is_an_exact_match(
    producer: Producer, name: str, value: str, changes: dict[str, Any]
) -> None:
    plain = publish_many(producer, 2)
    wanted = publish_many(producer, 2, **changes)
    assert ids(producer, f"{name}={value}") == wanted[::-1]
    assert ids(producer) == (plain + wanted)[::-1]
    if name not in ("phase", "outcome"):  # those two are checked against their lists
        # Exact: neither a prefix, nor another case, nor a longer value matches.
        assert ids(producer, f"{name}={value[:-1]}") == []
        assert ids(producer, f"{name}={value}x") == []
        assert ids(producer, f"{name}={value.upper()}") == []


def test_an_end_filtered_by_phase_start_is_not_listed(producer: Producer) -> None:
    start = producer.publish(phase="start", outcome=None, idempotency_key="s")["id"]
    producer.publish(idempotency_key="e")
    assert ids(producer, "phase=start") == [start]


def test_filters_combine(producer: Producer) -> None:
    a = producer.publish(idempotency_key="a", workflow_id="wf-1", outcome="failed")["id"]
    producer.publish(idempotency_key="b", workflow_id="wf-1", outcome="succeeded")
    producer.publish(idempotency_key="c", workflow_id="wf-2", outcome="failed")
    assert ids(producer, "workflow_id=wf-1&outcome=failed") == [a]


def test_a_filter_value_is_percent_decoded(producer: Producer) -> None:
    wanted = producer.publish(workflow_id="run 7/α&β", idempotency_key="k")["id"]
    producer.publish(idempotency_key="other")
    assert ids(producer, "workflow_id=run%207%2F%CE%B1%26%CE%B2") == [wanted]


@pytest.mark.parametrize(
    "name", ["workflow_id", "session_id", "subject_name", "phase", "outcome", "since", "until",
             "cursor", "limit"]
)
def test_an_empty_parameter_counts_as_absent(producer: Producer, name: str) -> None:
    stored = publish_many(producer, 3)
    assert ids(producer, f"{name}=") == stored[::-1]


# --- since and until ------------------------------------------------------------------------


@pytest.fixture
def three_hours(producer: Producer, clock: list[datetime]) -> list[str]:
    """Receipts recorded at 10:00, 11:00 and 12:00 UTC on 2026-11-30."""
    clock += [at(f"2026-11-30T{hour}:00:00+00:00") for hour in (10, 11, 12)]
    stored = publish_many(producer, 3)
    assert [r["recorded_at"] for r in listed(producer)["receipts"]] == [
        "2026-11-30T12:00:00.000000Z", "2026-11-30T11:00:00.000000Z",
        "2026-11-30T10:00:00.000000Z",
    ]
    return stored


def test_since_is_inclusive(producer: Producer, three_hours: list[str]) -> None:
    ten, eleven, twelve = three_hours
    assert ids(producer, "since=2026-11-30T11:00:00Z") == [twelve, eleven]
    assert ids(producer, "since=2026-11-30T11:00:00.000001Z") == [twelve]


def test_until_is_exclusive(producer: Producer, three_hours: list[str]) -> None:
    ten, eleven, twelve = three_hours
    assert ids(producer, "until=2026-11-30T11:00:00Z") == [ten]
    assert ids(producer, "until=2026-11-30T11:00:00.000001Z") == [eleven, ten]


def test_since_and_until_together_make_a_half_open_window(
    producer: Producer, three_hours: list[str]
) -> None:
    ten, eleven, twelve = three_hours
    assert ids(producer, "since=2026-11-30T11:00:00Z&until=2026-11-30T12:00:00Z") == [eleven]
    assert ids(producer, "since=2026-11-30T11:00:00Z&until=2026-11-30T11:00:00Z") == []


def test_an_offset_is_honoured_when_percent_encoded(
    producer: Producer, three_hours: list[str]
) -> None:
    ten, eleven, twelve = three_hours
    # 13:00+02:00 is 11:00Z; "+" must travel as %2B (a bare "+" in a query means a space).
    assert ids(producer, "since=2026-11-30T13%3A00%3A00%2B02%3A00") == [twelve, eleven]
    assert ids(producer, "until=2026-11-30T13:00:00%2B02:00") == [ten]
    assert ids(producer, "until=2026-11-30T06:00:00-05:00") == [ten]  # 11:00Z
    # The test client encodes "+" itself, as a careful caller would.
    answer = producer.get("/api/receipts", since="2026-11-30T13:00:00+02:00").json()
    assert [r["id"] for r in answer["receipts"]] == [twelve, eleven]


def test_a_fraction_and_a_lowercase_z_are_accepted(
    producer: Producer, three_hours: list[str]
) -> None:
    ten, eleven, twelve = three_hours
    assert ids(producer, "since=2026-11-30t11:59:59.999999999z") == [twelve]


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2026-11-30",
        "2026-11-30T11:00:00",  # no offset
        "2026-11-30 11:00:00Z",
        "2026-11-30T11:00Z",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T11:00:00+2:00",
        "2026-11-30T11:00:00+02:00x",
        "1764500000",
        "2026-11-30T13:00:00 ",
        "2026-11-30T13:00:00  02:00",
    ],
)
@pytest.mark.parametrize("name", ["since", "until"])
def test_a_bad_since_or_until_is_a_400(producer: Producer, name: str, value: str) -> None:
    producer.publish()
    body = assert_problem(producer.get("/api/receipts", **{name: value}), 400,
                          "bad-query-parameter")
    assert body["errors"][0]["field"] == name


def test_an_unencoded_plus_in_an_offset_is_read_as_the_offset_sign(
    producer: Producer, three_hours: list[str]
) -> None:
    ten, eleven, twelve = three_hours
    # A bare "+" in a query string decodes to a space; the site takes it back as the sign
    # rather than answering for another instant.
    assert ids(producer, "since=2026-11-30T13:00:00+02:00") == [twelve, eleven]
    assert ids(producer, "until=2026-11-30T13:00:00+02:00") == [ten]


# --- pagination -----------------------------------------------------------------------------


def test_limit_cuts_the_page_and_hands_out_a_cursor(producer: Producer) -> None:
    stored = publish_many(producer, 3)
    page = listed(producer, "limit=2")
    assert [r["id"] for r in page["receipts"]] == stored[:0:-1]
    assert isinstance(page["next_cursor"], str) and page["next_cursor"]


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 11])
def test_walking_the_cursor_visits_every_receipt_exactly_once(
    producer: Producer, limit: int
) -> None:
    stored = publish_many(producer, 11)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        response = producer.get("/api/receipts", **params)
        assert response.status_code == 200, response.content
        page = response.json()
        pages += 1
        assert 1 <= len(page["receipts"]) <= limit
        seen += [r["id"] for r in page["receipts"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(page["receipts"]) == limit
    assert seen == stored[::-1]
    assert pages == -(-11 // limit)


def test_a_page_that_ends_exactly_at_the_last_receipt_has_a_null_cursor(
    producer: Producer,
) -> None:
    publish_many(producer, 4)
    assert listed(producer, "limit=4")["next_cursor"] is None
    first = listed(producer, "limit=2")
    second = producer.get("/api/receipts", limit=2, cursor=first["next_cursor"]).json()
    assert len(second["receipts"]) == 2
    assert second["next_cursor"] is None


def test_the_cursor_keeps_the_filters_applied(producer: Producer) -> None:
    wanted = publish_many(producer, 3, workflow_id="wf-x")
    publish_many(producer, 3, workflow_id="wf-y")
    first = listed(producer, "workflow_id=wf-x&limit=2")
    assert [r["id"] for r in first["receipts"]] == wanted[:0:-1]
    second = producer.get("/api/receipts", workflow_id="wf-x", limit=2,
                          cursor=first["next_cursor"]).json()
    assert [r["id"] for r in second["receipts"]] == wanted[:1]
    assert second["next_cursor"] is None


def test_receipts_stored_while_walking_do_not_shift_the_pages(producer: Producer) -> None:
    stored = publish_many(producer, 4)
    first = listed(producer, "limit=2")
    newer = publish_many(producer, 2)
    second = producer.get("/api/receipts", limit=2, cursor=first["next_cursor"]).json()
    assert [r["id"] for r in second["receipts"]] == stored[1::-1]
    assert second["next_cursor"] is None
    assert ids(producer, "limit=2") == newer[::-1]


def test_the_default_page_is_50_and_the_largest_200(producer: Producer) -> None:
    publish_many(producer, 51)
    page = listed(producer)
    assert len(page["receipts"]) == 50
    assert page["next_cursor"] is not None
    whole = listed(producer, "limit=200")
    assert len(whole["receipts"]) == 51
    assert whole["next_cursor"] is None


@pytest.mark.parametrize(
    "limit", ["0", "201", "-1", "abc", "1.5", "1e1", " 5", "5 ", "+5", "0x10", "²", "٣",
              "9" * 5000]
)
def test_a_bad_limit_is_a_400(producer: Producer, limit: str) -> None:
    producer.publish()
    body = assert_problem(producer.get("/api/receipts", limit=limit), 400,
                          "bad-query-parameter")
    assert body["errors"] == [{"field": "limit", "message": body["errors"][0]["message"]}]


@pytest.mark.parametrize(
    "cursor", ["abc", "1", "not:a:cursor", "%00", "é", "'; DROP TABLE receipts_receipt; --"]
)
def test_a_malformed_cursor_is_a_400(producer: Producer, cursor: str) -> None:
    producer.publish()
    body = assert_problem(producer.get("/api/receipts", cursor=cursor), 400,
                          "bad-query-parameter")
    assert body["errors"][0]["field"] == "cursor"


def test_a_tampered_cursor_is_a_400(producer: Producer) -> None:
    publish_many(producer, 3)
    cursor = listed(producer, "limit=1")["next_cursor"]
    value, _, signature = cursor.rpartition(":")
    forged_value = django_signing.dumps(10**6, salt="receiptsite.receipts.cursor").rpartition(":")
    tampered = [
        cursor[:-1] + ("A" if cursor[-1] != "A" else "B"),
        f"{forged_value[0]}:{signature}",  # another position with the old signature
        django_signing.dumps(10**6),  # signed, but not as a cursor
        django_signing.dumps("x", salt="receiptsite.receipts.cursor", key="another-secret"),
    ]
    for bad in tampered:
        body = assert_problem(producer.get("/api/receipts", cursor=bad), 400,
                              "bad-query-parameter")
        assert body["errors"][0]["field"] == "cursor"


@pytest.mark.parametrize("phase", ["finished", "START", "End", " start"])
def test_an_unknown_phase_is_a_400(producer: Producer, phase: str) -> None:
    producer.publish()
    body = assert_problem(producer.get("/api/receipts", phase=phase), 400,
                          "bad-query-parameter")
    assert body["errors"][0]["field"] == "phase"


@pytest.mark.parametrize("outcome", ["success", "SUCCEEDED", "null", "pending"])
def test_an_unknown_outcome_is_a_400(producer: Producer, outcome: str) -> None:
    producer.publish()
    body = assert_problem(producer.get("/api/receipts", outcome=outcome), 400,
                          "bad-query-parameter")
    assert body["errors"][0]["field"] == "outcome"


# --- tenants and keys -----------------------------------------------------------------------


def test_only_the_callers_tenant_receipts_appear(
    producer: Producer, other_producer: Producer
) -> None:
    theirs = [other_producer.publish(idempotency_key=None)["id"] for _ in range(3)]
    mine = publish_many(producer, 2)
    more_theirs = other_producer.publish()["id"]
    assert ids(producer) == mine[::-1]
    assert ids(other_producer) == [more_theirs, *theirs[::-1]]
    # Not through a filter that matches their receipts, nor on a later page.
    assert ids(producer, "workflow_id=wf-7f3a") == mine[::-1]
    first = listed(producer, "limit=1")
    second = producer.get("/api/receipts", limit=1, cursor=first["next_cursor"]).json()
    assert second == {"receipts": [listed(producer)["receipts"][1]], "next_cursor": None}


def test_another_tenants_cursor_shows_nothing_of_theirs(
    producer: Producer, other_producer: Producer
) -> None:
    mine = publish_many(producer, 2)
    for _ in range(3):
        other_producer.publish(idempotency_key=None)
    their_cursor = listed(other_producer, "limit=1")["next_cursor"]
    page = producer.get("/api/receipts", cursor=their_cursor).json()
    assert [r["id"] for r in page["receipts"]] == mine[::-1]


def test_a_second_key_of_the_same_tenant_sees_the_same_receipts(
    producer: Producer, tenant: Any
) -> None:
    stored = publish_many(producer, 2)
    second = Producer(Client(), ApiKey.issue(tenant)[1])
    assert ids(second) == stored[::-1]


@pytest.mark.parametrize(
    "authorization", ["", "Bearer", "Bearer rk_000000000000_nope", "Basic abc", "Token x"]
)
def test_a_missing_or_unknown_key_is_a_401(
    client: Client, producer: Producer, authorization: str
) -> None:
    producer.publish()
    headers = {"Authorization": authorization} if authorization else {}
    response = client.get("/api/receipts", headers=headers)
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "wf-7f3a" not in response.content.decode()


def test_a_revoked_key_is_a_401(producer: Producer) -> None:
    producer.publish()
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    response = producer.get("/api/receipts")
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_key_is_checked_before_the_parameters(client: Client, db: None) -> None:
    assert_problem(client.get("/api/receipts", {"limit": "abc"}), 401, "unauthorized")


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_other_methods_are_a_405(producer: Producer, method: str) -> None:
    response = getattr(producer.client, method)("/api/receipts", headers=producer.headers())
    assert_problem(response, 405, "method-not-allowed")
    assert response["Allow"] == "GET, POST"


# --- cost -----------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [5, 50])
def test_a_list_takes_two_queries_whatever_the_page_size(
    producer: Producer, count: int, django_assert_max_num_queries: Any
) -> None:
    publish_many(producer, count)
    # One to authenticate the key (with its tenant), one for the page (with log indexes), and
    # the request's audit-log entry.
    with django_assert_max_num_queries(3 + row_security_statements("tenant")):
        page = listed(producer, f"limit={count}")
    assert len(page["receipts"]) == count
    with django_assert_max_num_queries(3 + row_security_statements("tenant")):
        listed(producer, "limit=2&workflow_id=wf-7f3a&phase=end&outcome=succeeded")

"""POST /api/receipts/batch: up to 500 receipts in one body, each answered as if posted alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from receiptsite.receipts.models import ApiKey, Receipt
from tests.conftest import EXAMPLE_BODY, Producer, assert_problem, count_receipts, example_body

pytestmark = pytest.mark.db

SITE = "https://receipts.example.org"
BATCH = "/api/receipts/batch"
ANSWER_KEYS = {"id", "url", "verify_url", "output_hash", "recorded_at", "log_index"}




def assert_item_problem(item: dict[str, Any], status: int, slug: str) -> None:
    assert item["status"] == status
    assert item["type"] == f"{SITE}/problems/{slug}"
    assert item["title"] and item["detail"]
    assert "replayed" not in item


def assert_stored(item: dict[str, Any], replayed: bool = False) -> Receipt:
    assert set(item) == ANSWER_KEYS | {"status", "replayed"}
    assert item["status"] == 201
    assert item["replayed"] is replayed
    assert item["url"] == f"{SITE}/run/{item['id']}"
    assert item["verify_url"] == f"{SITE}/api/receipt/{item['id']}/verify"
    receipt = Receipt.objects.get(public_id=item["id"])
    assert receipt.output_hash == item["output_hash"]
    assert receipt.log_index == item["log_index"]
    return receipt


def batch(producer: Producer, items: Any) -> Any:
    return producer.post({"receipts": items}, path=BATCH)


def results(producer: Producer, items: list[Any]) -> list[dict[str, Any]]:
    response = batch(producer, items)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["results"]
    assert len(body["results"]) == len(items)
    out: list[dict[str, Any]] = body["results"]
    return out


def keyed(key: str, **changes: Any) -> dict[str, Any]:
    return example_body(idempotency_key=key, **changes)


# --- stored items ---------------------------------------------------------------------------


def test_each_item_is_stored_and_answered_in_order(producer: Producer) -> None:
    items = [keyed(f"k{i}", workflow_id=f"wf-{i}") for i in range(3)]
    answers = results(producer, items)
    for i, item in enumerate(answers):
        receipt = assert_stored(item)
        assert receipt.workflow_id == f"wf-{i}"
        assert item["log_index"] == i
    assert count_receipts() == 3
    assert len({item["id"] for item in answers}) == 3


def test_a_stored_item_is_the_same_document_a_single_post_makes(producer: Producer) -> None:
    [item] = results(producer, [EXAMPLE_BODY])
    via_batch = Receipt.objects.get(public_id=item["id"]).document()
    single = producer.publish(idempotency_key="another")
    via_post = Receipt.objects.get(public_id=single["id"]).document()
    for field in ("id", "recorded_at", "idempotency_key"):
        via_batch.pop(field), via_post.pop(field)
    assert via_batch == via_post


def test_an_item_posted_before_is_replayed_with_the_first_answer(producer: Producer) -> None:
    first = producer.publish()
    [item] = results(producer, [EXAMPLE_BODY])
    assert_stored(item, replayed=True)
    assert {k: item[k] for k in ANSWER_KEYS} == first
    assert count_receipts() == 1


def test_a_repeated_item_in_one_batch_is_replayed(producer: Producer) -> None:
    answers = results(producer, [EXAMPLE_BODY, keyed("other"), EXAMPLE_BODY])
    assert_stored(answers[0], replayed=False)
    assert_stored(answers[1], replayed=False)
    assert_stored(answers[2], replayed=True)
    assert {k: answers[2][k] for k in ANSWER_KEYS} == {k: answers[0][k] for k in ANSWER_KEYS}
    assert count_receipts() == 2


def test_the_same_batch_again_replays_every_item(producer: Producer) -> None:
    items = [keyed("a"), keyed("b")]
    first = results(producer, items)
    again = results(producer, items)
    assert [i["replayed"] for i in again] == [True, True]
    assert [{**i, "replayed": True} for i in first] == again
    assert count_receipts() == 2


def test_items_without_a_key_are_never_replays(producer: Producer) -> None:
    body = example_body(idempotency_key=None)
    answers = results(producer, [body, body])
    assert [i["replayed"] for i in answers] == [False, False]
    assert answers[0]["id"] != answers[1]["id"]
    assert count_receipts() == 2


# --- rejected items among stored ones ---------------------------------------------------------


def test_an_invalid_item_gets_its_own_422_and_its_neighbours_are_stored(
    producer: Producer,
) -> None:
    bad = keyed("bad", duration_ms=1.5)
    bad["colour"] = "blue"
    answers = results(producer, [keyed("a"), bad, keyed("c")])
    assert_stored(answers[0])
    assert_item_problem(answers[1], 422, "validation-error")
    assert answers[1]["errors"] == [
        {"field": "/duration_ms", "message": "must be an integer (no fraction, no exponent)"},
        {"field": "/colour", "message": "is not a field of receipt/v1"},
    ]
    assert_stored(answers[2])
    assert count_receipts() == 2
    assert not Receipt.objects.filter(idempotency_key="bad").exists()


def test_an_items_422_is_the_one_a_single_post_gives(producer: Producer) -> None:
    bad = keyed("bad", phase="start")
    [item] = results(producer, [bad])
    single = producer.post(bad)
    assert single.status_code == 422
    assert item == single.json()
    assert item["errors"] == [{"field": "/outcome", "message": item["errors"][0]["message"]}]
    assert count_receipts() == 0


@pytest.mark.parametrize("item", [42, "text", None, [], [EXAMPLE_BODY], True])
def test_an_item_that_is_not_an_object_is_a_422(producer: Producer, item: Any) -> None:
    answers = results(producer, [keyed("a"), item, keyed("c")])
    assert_stored(answers[0])
    assert_item_problem(answers[1], 422, "validation-error")
    assert answers[1]["errors"][0]["field"] == ""
    assert_stored(answers[2])
    assert count_receipts() == 2


def test_a_reused_key_with_another_body_gets_the_reused_problem(producer: Producer) -> None:
    first = producer.publish()
    changed = example_body(result="13 findings")
    answers = results(producer, [keyed("before"), changed, keyed("after")])
    assert_stored(answers[0])
    assert_item_problem(answers[1], 422, "idempotency-key-reused")
    assert answers[1]["id"] == first["id"]
    assert answers[1]["url"] == first["url"]
    assert_stored(answers[2])
    assert count_receipts() == 3
    assert Receipt.objects.get(public_id=first["id"]).document()["result"] == "12 findings"


def test_a_reused_key_inside_one_batch_names_the_earlier_item(producer: Producer) -> None:
    answers = results(producer, [EXAMPLE_BODY, example_body(result="13 findings")])
    stored = assert_stored(answers[0])
    assert_item_problem(answers[1], 422, "idempotency-key-reused")
    assert answers[1]["id"] == answers[0]["id"]
    assert answers[1]["url"] == answers[0]["url"]
    assert count_receipts() == 1
    assert stored.document()["result"] == "12 findings"


def test_an_item_over_256_kib_is_a_413_and_the_others_are_stored(producer: Producer) -> None:
    big = keyed("big", result="x" * (256 * 1024))
    answers = results(producer, [keyed("a"), big, keyed("c")])
    assert_stored(answers[0])
    assert_item_problem(answers[1], 413, "payload-too-large")
    assert "262144" in answers[1]["detail"]
    assert_stored(answers[2])
    assert count_receipts() == 2
    assert not Receipt.objects.filter(idempotency_key="big").exists()


def test_an_item_just_under_256_kib_is_stored(producer: Producer) -> None:
    body = keyed("near", result="")
    size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    body["result"] = "x" * (256 * 1024 - size)
    [item] = results(producer, [body])
    assert_stored(item)


def test_a_link_to_another_tenants_receipt_is_the_items_422(
    producer: Producer, other_producer: Producer
) -> None:
    theirs = other_producer.publish()
    answers = results(
        producer, [keyed("x", links={"parent_receipt_id": theirs["id"]}), keyed("y")]
    )
    assert_item_problem(answers[0], 422, "validation-error")
    assert answers[0]["errors"][0]["field"] == "/links/parent_receipt_id"
    assert_stored(answers[1])
    assert count_receipts() == 2  # theirs and y


# --- order -----------------------------------------------------------------------------------


def test_a_later_item_may_link_to_an_earlier_one_by_key(producer: Producer) -> None:
    answers = results(
        producer,
        [
            keyed("run/start", phase="start", outcome=None),
            keyed("run/end", links={"parent_idempotency_key": "run/start"}),
            keyed("run/done", phase="completion",
                  links={"child_idempotency_keys": ["run/end", "run/start"]}),
        ],
    )
    start, end, done = (assert_stored(item) for item in answers)
    assert end.document()["links"] == {"parent_receipt_id": answers[0]["id"]}
    assert done.document()["links"] == {
        "child_receipt_ids": [answers[1]["id"], answers[0]["id"]]
    }
    assert [a["log_index"] for a in answers] == [0, 1, 2]


def test_an_earlier_item_cannot_link_to_a_later_one(producer: Producer) -> None:
    answers = results(
        producer,
        [keyed("child", links={"parent_idempotency_key": "parent"}), keyed("parent")],
    )
    assert_item_problem(answers[0], 422, "validation-error")
    assert answers[0]["errors"][0]["field"] == "/links/parent_idempotency_key"
    assert_stored(answers[1])
    assert count_receipts() == 1


def test_a_link_to_a_rejected_item_is_rejected_too(producer: Producer) -> None:
    answers = results(
        producer,
        [keyed("parent", outcome="nope"),
         keyed("child", links={"parent_idempotency_key": "parent"})],
    )
    assert_item_problem(answers[0], 422, "validation-error")
    assert_item_problem(answers[1], 422, "validation-error")
    assert count_receipts() == 0


def test_500_items_are_accepted(producer: Producer) -> None:
    items = [example_body(idempotency_key=f"k{i}", workflow_id=f"wf-{i}") for i in range(500)]
    answers = results(producer, items)
    assert [a["log_index"] for a in answers] == list(range(500))
    assert all(a["status"] == 201 and a["replayed"] is False for a in answers)
    assert count_receipts() == 500


def test_items_inserted_in_several_statements_keep_their_rows_and_log_places(
    producer: Producer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receipts of a batch are inserted in as many statements as the database's limit on
    parameters asks (Receipt.objects.insert, three here): each receipt gets its own row, in
    order, and each log entry points at its own receipt, which verifies."""
    from django.db import connection

    monkeypatch.setattr(connection.ops, "bulk_batch_size", lambda fields, objs: 2)
    items = [keyed(f"k{i}", workflow_id=f"wf-{i}") for i in range(5)]
    answers = results(producer, items)
    for i, item in enumerate(answers):
        receipt = assert_stored(item)
        assert receipt.workflow_id == f"wf-{i}"
        assert receipt.log_entry.index == i == item["log_index"]
        assert client.get(f"/api/receipt/{item['id']}/verify").json()["status"] == "valid"
    assert count_receipts() == 5


@pytest.mark.skipif(
    "postgres" not in __import__("os").environ.get("DATABASE_URL", ""),
    reason="UNNEST is PostgreSQL's (run with DATABASE_URL)",
)
def test_on_postgresql_each_table_of_a_batch_takes_one_insert_of_arrays(
    producer: Producer, client: Client
) -> None:
    """The receipts, log entries, log nodes and heads of a batch are each inserted by one
    statement of one array per column (lib/rows.py), not one statement per row nor one
    parameter per value; what they store still verifies."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode

    items = [keyed(f"k{i}", workflow_id=f"wf-{i}") for i in range(6)]
    with CaptureQueriesContext(connection) as queries:
        answers = results(producer, items)
    for model in (Receipt, LogEntry, LogNode, Checkpoint):
        table = connection.ops.quote_name(model._meta.db_table)
        inserts = [q["sql"] for q in queries if f"INSERT INTO {table}" in q["sql"]]
        assert len(inserts) == 1, (model.__name__, inserts)
        assert "UNNEST(" in inserts[0] and "times:" not in inserts[0], inserts[0]
    for i, item in enumerate(answers):
        receipt = assert_stored(item)
        assert receipt.workflow_id == f"wf-{i}" and receipt.log_entry.index == i
        assert client.get(f"/api/receipt/{item['id']}/verify").json()["status"] == "valid"


# --- the whole body -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"receipts": []},
        {"receipts": [EXAMPLE_BODY] * 501},
        [EXAMPLE_BODY],
        "receipts",
        42,
        None,
        {},
        {"receipts": [EXAMPLE_BODY], "extra": 1},
        {"receipts": [EXAMPLE_BODY], "dry_run": False},
        {"receipts": EXAMPLE_BODY},
        {"receipts": "x"},
        {"receipts": None},
        {"Receipts": [EXAMPLE_BODY]},
    ],
    ids=["empty", "501", "a-list", "a-string", "a-number", "null", "no-key", "extra-key",
         "extra-false-key", "an-object", "a-string-list", "null-list", "wrong-case"],
)
def test_a_body_of_another_shape_is_a_422_and_stores_nothing(
    producer: Producer, body: Any
) -> None:
    response = producer.post(json.dumps(body), path=BATCH)
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"][0]["field"] == "/receipts"
    assert count_receipts() == 0


def test_a_body_over_5_mib_is_a_413_and_stores_nothing(producer: Producer) -> None:
    item = keyed("x", result="x" * (200 * 1024))
    items = [{**item, "idempotency_key": f"k{i}"} for i in range(26)]
    raw = json.dumps({"receipts": items})
    assert len(raw) > 5 * 1024 * 1024
    body = assert_problem(producer.post(raw, path=BATCH), 413, "payload-too-large")
    assert str(5 * 1024 * 1024) in body["detail"]
    assert count_receipts() == 0


def test_a_body_just_under_5_mib_is_not_a_413(producer: Producer) -> None:
    items = [keyed(f"k{i}", result="") for i in range(21)]
    raw = json.dumps({"receipts": items})
    pad = 5 * 1024 * 1024 - len(raw)
    # Pad with insignificant whitespace between the last item and the closing bracket.
    raw = raw[:-2] + " " * pad + raw[-2:]
    assert len(raw) == 5 * 1024 * 1024
    response = producer.post(raw, path=BATCH)
    assert response.status_code == 200, response.content[:300]
    assert count_receipts() == 21


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b'{"receipts": [],}', b"\xff\xfe{}",
     b'{"receipts": [{"workflow_id": "a", "workflow_id": "b"}]}', b'{"receipts": [NaN]}',
     '{"receipts": [{"result": "caf\u00e9"}]}'.encode("latin-1")],
)
def test_malformed_json_is_a_400_and_stores_nothing(producer: Producer, raw: bytes) -> None:
    assert_problem(producer.post(raw, path=BATCH), 400, "malformed-json")
    assert count_receipts() == 0


def test_an_empty_body_is_a_400(producer: Producer) -> None:
    response = producer.client.post(
        BATCH, data=b"", content_type="application/json", headers=producer.headers(),
        CONTENT_TYPE="application/json",
    )
    assert_problem(response, 400, "malformed-json")
    assert count_receipts() == 0


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1",
     "multipart/form-data; boundary=x", "application/jsonl"],
)
def test_another_content_type_is_a_415(producer: Producer, content_type: str) -> None:
    response = producer.client.post(
        BATCH, data=json.dumps({"receipts": [EXAMPLE_BODY]}), content_type=content_type,
        headers=producer.headers(),
    )
    assert_problem(response, 415, "unsupported-media-type")
    assert count_receipts() == 0


@pytest.mark.parametrize(
    "authorization", ["", "Bearer", "Bearer rk_000000000000_nope", "Basic abc"]
)
def test_a_missing_or_unknown_key_is_a_401(
    client: Client, tenant: Any, authorization: str
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = client.post(
        BATCH, data=json.dumps({"receipts": [EXAMPLE_BODY]}), content_type="application/json",
        headers=headers,
    )
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert count_receipts() == 0


def test_a_revoked_key_is_a_401(producer: Producer) -> None:
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    response = batch(producer, [EXAMPLE_BODY])
    assert_problem(response, 401, "unauthorized")
    assert count_receipts() == 0


def test_the_key_is_checked_before_the_body(client: Client, db: None) -> None:
    response = client.post(BATCH, data=b"\xff" * 1000, content_type="text/plain")
    assert_problem(response, 401, "unauthorized")


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_other_methods_are_a_405(producer: Producer, method: str) -> None:
    response = getattr(producer.client, method)(BATCH, headers=producer.headers())
    assert_problem(response, 405, "method-not-allowed")
    assert response["Allow"] == "POST"


def test_receipts_of_a_batch_belong_to_the_callers_tenant(
    producer: Producer, other_producer: Producer
) -> None:
    [item] = results(producer, [EXAMPLE_BODY])
    receipt = Receipt.objects.get(public_id=item["id"])
    assert receipt.tenant.slug == "acme"
    assert receipt.document()["publisher"]["key_prefix"] == producer.key[: ApiKey.PREFIX_LENGTH]
    # Another tenant's same key is its own, fresh receipt.
    [theirs] = results(other_producer, [EXAMPLE_BODY])
    assert theirs["replayed"] is False
    assert theirs["id"] != item["id"]


@pytest.mark.parametrize(
    ("bad", "pointer"),
    [
        ({"result": "ok \ud800"}, "/result"),
        ({"workflow_id": "wf\x00"}, "/workflow_id"),
        ({"subject": {"type": "tool", "name": "a\x00b"}}, "/subject/name"),
        ({"session_id": "s\x00"}, "/session_id"),
    ],
)
def test_an_item_with_a_lone_surrogate_or_a_nul_gets_its_own_422(
    producer: Producer, bad: dict[str, Any], pointer: str
) -> None:
    items = [
        example_body(idempotency_key="b/1"),
        {**example_body(idempotency_key="b/2"), **bad},
        example_body(idempotency_key="b/3"),
    ]
    body = json.dumps({"receipts": items}, ensure_ascii=True)  # \ud800 as an escape
    response = producer.post(body, path=BATCH)
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [201, 422, 201]
    assert [e["field"] for e in results[1]["errors"]] == [pointer]
    assert Receipt.objects.count() == 2

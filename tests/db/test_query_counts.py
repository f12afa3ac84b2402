"""What the hot routes cost in SQL, pinned: each test fails when a route's query count grows.

Also what their caches may not do: serve a receipt changed behind the site's back as if it
were unchanged, and what a batch must do once: sign one checkpoint for all its receipts.
"""

from __future__ import annotations

import base64
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from receiptsite.receipts.models import Checkpoint, Receipt, SignedCheckpoint
from tests.conftest import Producer, command_line, example_body, tamper

pytestmark = pytest.mark.db

# Statements per request on (SQLite, PostgreSQL). Transaction control (BEGIN, COMMIT,
# SAVEPOINT) is not counted: it is no query the code chose to run. On PostgreSQL the
# row-level security scope costs statements of its own (receipts/rowsecurity.py): a public
# route with a receipt id sets and clears `app.receipt_ids` (2), a tenant route sets
# `app.tenant_id` (1); its writes also take the log's advisory lock (1).
PUBLIC = {
    # the receipt with its tenant, key and log entry, and the latest signed checkpoint, in one
    # (ledger/verification.verifiable); the proof
    "verify": (2, 4),
    # verify's two, and the hand-off's follow-up note
    "page": (3, 5),
    # the page's: verify's two (a receipt that does not verify says so on its first line),
    # and the follow-up note
    "handoff": (3, 5),
    # the log's head, the keys, the keys' history (its statements: one table more, one
    # query, however long the history), and the logs it continues (`continuelog`)
    "keys": (4, 4),
    "checkpoint": (1, 1),
    "consistency": (2, 2),
    # the latest signed checkpoint and the configured key's status, in one (log.readiness)
    "healthz": (1, 1),
}
# The offline bundle: the verify route's statements and the keys document's, nothing more.
PUBLIC["bundle"] = (
    PUBLIC["verify"][0] + PUBLIC["keys"][0],
    PUBLIC["verify"][1] + PUBLIC["keys"][1],
)
# The page of a receipt with links reads them in one more query (and, on PostgreSQL, names
# them in the row-level security scope first).
LINKS = (1, 2)
# A receipt whose signing key is compromised: its appended signatures (ledger/signatures.py)
# in one more query, on the verify route and the page (and the bundle, which holds a verify).
COMPROMISED_KEY = (1, 1)
# Every tenant route also writes its line of the API audit log.
TENANT = {
    # the key; under the lock: the log's state, the idempotency key, the insert, then the
    # append (head, frontier, entry, nodes, head row, signed note); the audit line
    "ingest": (10, 12),
    # the same statements for 1 or 500 items: the items' idempotency keys in one query
    # before the lock (the items are made and signed before it) and once more under it (to
    # see that nothing was stored under them meanwhile), one insert of every receipt (SQLite
    # splits a long one), one append for all of them
    "batch": (11, 13),
    # the key, the page of receipts with their log entries, the audit line
    "list": (3, 4),
    "detail": (3, 4),
}

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def queries_of(send: Any) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = send()
    sql = [q["sql"] for q in captured.captured_queries]
    return response, [s for s in sql if not s.upper().startswith(CONTROL)]


def on_this_database(counts: tuple[int, int]) -> int:
    return counts[connection.vendor == "postgresql"]


def pinned(table: dict[str, tuple[int, int]], route: str) -> int:
    return on_this_database(table[route])


@pytest.fixture
def stored(producer: Producer) -> dict[str, Any]:
    producer.publish(idempotency_key="first")
    return producer.publish(idempotency_key="second")


def public_requests(receipt_id: str) -> dict[str, str]:
    return {
        "verify": f"/api/receipt/{receipt_id}/verify",
        "page": f"/run/{receipt_id}",
        "handoff": f"/run/{receipt_id}/handoff.txt",
        "bundle": f"/run/{receipt_id}/bundle.json",
        "keys": "/.well-known/receipt-keys.json",
        "checkpoint": "/api/log/checkpoint",
        "consistency": "/api/log/consistency?first=1&second=2",
        "healthz": "/healthz",
    }


@pytest.mark.parametrize("route", list(PUBLIC))
def test_each_public_route_runs_its_pinned_queries(
    client: Client, stored: dict[str, Any], route: str
) -> None:
    path = public_requests(stored["id"])[route]
    client.get(path)  # the first answer may fill per-process caches: the second is pinned
    response, sql = queries_of(lambda: client.get(path))
    assert response.status_code == 200, response.content
    assert len(sql) == pinned(PUBLIC, route), "\n".join(sql)


def test_the_page_of_a_linked_receipt_reads_its_links_in_one_more_query(
    client: Client, producer: Producer, stored: dict[str, Any]
) -> None:
    parent_id = stored["id"]
    child = producer.publish(idempotency_key="grandchild")
    linked = producer.publish(
        idempotency_key="linked", links={"child_receipt_ids": [parent_id, child["id"]]}
    )
    client.get(f"/run/{linked['id']}")
    response, sql = queries_of(lambda: client.get(f"/run/{linked['id']}"))
    assert response.status_code == 200
    assert len(sql) == pinned(PUBLIC, "page") + on_this_database(LINKS), "\n".join(sql)


@pytest.mark.parametrize("route", ["verify", "page"])
def test_a_receipt_signed_again_after_a_key_compromise_costs_one_more_query(
    client: Client, stored: dict[str, Any], route: str, settings: Any, tmp_path: Path
) -> None:
    from django.core.management import call_command

    from receiptsite.ledger import keyring

    # compromisekey writes the new key in place of the compromised one: in a copy.
    copy = tmp_path / "signing-key.pem"
    copy.write_bytes(Path(settings.SIGNING_KEY_FILE).read_bytes())
    settings.SIGNING_KEY_FILE = str(copy)
    # Compromised as of now: both receipts were logged before, and are signed again.
    call_command(
        "compromisekey", *command_line(keyring.configured().kid, at=_now()), stdout=StringIO()
    )
    path = public_requests(stored["id"])[route]
    client.get(path)
    response, sql = queries_of(lambda: client.get(path))
    assert response.status_code == 200, response.content
    if route == "verify":
        assert response.json()["status"] == "valid"
    expected = pinned(PUBLIC, route) + on_this_database(COMPROMISED_KEY)
    assert len(sql) == expected, "\n".join(sql)


def _now() -> str:
    from django.utils import timezone

    from receiptsite.receipts.models import format_timestamp

    return format_timestamp(timezone.now())


def test_ingest_runs_its_pinned_queries(producer: Producer) -> None:
    producer.publish(idempotency_key="first")
    response, sql = queries_of(lambda: producer.post(example_body(idempotency_key="second")))
    assert response.status_code == 201, response.content
    assert len(sql) == pinned(TENANT, "ingest"), "\n".join(sql)


@pytest.mark.parametrize("size", [1, 100])
def test_a_batch_runs_as_many_queries_whatever_its_size(producer: Producer, size: int) -> None:
    producer.publish(idempotency_key="first")
    items = [example_body(idempotency_key=f"item-{i}") for i in range(size)]
    response, sql = queries_of(
        lambda: producer.post({"receipts": items}, path="/api/receipts/batch")
    )
    assert response.status_code == 200, response.content
    assert all(item["status"] == 201 for item in response.json()["results"])
    assert len(sql) == pinned(TENANT, "batch"), "\n".join(sql)


@pytest.mark.parametrize("size", [1, 100])
def test_a_batch_reads_every_item_s_links_in_one_query_whatever_its_size(
    producer: Producer, size: int
) -> None:
    # Each item names a stored receipt by its id and by its idempotency key, and the item
    # before it by its key: one look-up for all (it was one per item).
    parent = producer.publish(idempotency_key="parent")
    items = [
        example_body(idempotency_key=f"item-{i}", links={
            "parent_receipt_id": parent["id"],
            "child_idempotency_keys": ["parent"] + ([f"item-{i - 1}"] if i else []),
        })
        for i in range(size)
    ]  # fmt: skip
    response, sql = queries_of(
        lambda: producer.post({"receipts": items}, path="/api/receipts/batch")
    )
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [item["status"] for item in results] == [201] * size, results
    assert len(sql) == pinned(TENANT, "batch") + 1, "\n".join(sql)
    last = Receipt.objects.get(public_id=results[-1]["id"])
    links = json.loads(bytes(last.canonical_bytes))["links"]
    assert links["parent_receipt_id"] == parent["id"]
    expected = [parent["id"]] + ([results[-2]["id"]] if size > 1 else [])
    assert links["child_receipt_ids"] == expected


@pytest.mark.parametrize(
    "query",
    [
        "", "?subject_name=website_audit", "?outcome=succeeded", "?phase=end",
        "?workflow_id=wf-7f3a", "?limit=1",
    ],
)
def test_the_list_runs_its_pinned_queries(producer: Producer, query: str) -> None:
    for i in range(3):
        producer.publish(idempotency_key=f"k{i}")
    response, sql = queries_of(lambda: producer.get(f"/api/receipts{query}"))
    assert response.status_code == 200, response.content
    assert response.json()["receipts"]
    assert len(sql) == pinned(TENANT, "list"), "\n".join(sql)


def test_the_detail_runs_its_pinned_queries(producer: Producer, stored: dict[str, Any]) -> None:
    response, sql = queries_of(lambda: producer.get(f"/api/receipts/{stored['id']}"))
    assert response.status_code == 200, response.content
    assert len(sql) == pinned(TENANT, "detail"), "\n".join(sql)


# --- caches keyed by the bytes never serve a changed row as unchanged -------------------------


def test_a_row_changed_after_it_was_served_is_invalid_and_the_page_warns(
    client: Client, stored: dict[str, Any]
) -> None:
    receipt_id = stored["id"]
    for _ in range(2):  # served, so whatever may be cached of it is cached
        assert client.get(f"/api/receipt/{receipt_id}/verify").json()["status"] == "valid"
        assert "alert-bad" not in client.get(f"/run/{receipt_id}").content.decode()

    tamper(receipt_id, workflow_id="wf-forged")

    answer = client.get(f"/api/receipt/{receipt_id}/verify").json()
    assert answer["status"] == "invalid"
    failed = {c["name"] for c in answer["checks"] if c["result"] == "fail"}
    assert failed == {"record_matches"}
    page = client.get(f"/run/{receipt_id}").content.decode()
    assert "alert-bad" in page
    assert "record_matches" in page


def test_bytes_changed_after_they_were_served_are_invalid_and_the_page_warns(
    client: Client, stored: dict[str, Any]
) -> None:
    receipt_id = stored["id"]
    for _ in range(2):
        assert client.get(f"/api/receipt/{receipt_id}/verify").json()["status"] == "valid"
        assert "alert-bad" not in client.get(f"/run/{receipt_id}").content.decode()
    verified = client.get(f"/api/receipt/{receipt_id}/verify").json()
    original = base64.b64decode(verified["canonical_bytes"])
    forged = original.replace(b"wf-7f3a", b"wf-7f3b")
    assert forged != original

    tamper(receipt_id, canonical_bytes=forged)

    answer = client.get(f"/api/receipt/{receipt_id}/verify").json()
    assert answer["status"] == "invalid"
    failed = {c["name"] for c in answer["checks"] if c["result"] == "fail"}
    assert {"hash", "signature", "log_inclusion"} <= failed
    page = client.get(f"/run/{receipt_id}").content.decode()
    assert "alert-bad" in page
    assert "wf-7f3b" in page  # the page shows the bytes as stored now, not as served before


# --- a batch signs once -----------------------------------------------------------------------


def test_a_batch_of_100_signs_one_checkpoint_that_includes_every_receipt(
    client: Client, producer: Producer
) -> None:
    producer.publish(idempotency_key="before")
    signed_before = SignedCheckpoint.objects.count()
    heads_before = Checkpoint.objects.count()
    items = [example_body(idempotency_key=f"item-{i}") for i in range(100)]
    response = producer.post({"receipts": items}, path="/api/receipts/batch")
    assert response.status_code == 200, response.content
    results = response.json()["results"]

    assert SignedCheckpoint.objects.count() == signed_before + 1
    assert Checkpoint.objects.count() == heads_before + 100  # every size keeps its root
    assert [item["log_index"] for item in results] == list(range(1, 101))
    signed = client.get("/api/log/checkpoint").content.decode()
    assert signed.split("\n")[1] == "101"
    for item in (results[0], results[57], results[-1]):
        answer = client.get(f"/api/receipt/{item['id']}/verify").json()
        assert answer["status"] == "valid", answer["checks"]
        assert answer["log"]["tree_size"] == 101
    assert json.loads(client.get("/healthz").content) == {"status": "ok"}


def test_while_the_log_is_refused_a_batch_answers_each_item_as_if_posted_alone(
    producer: Producer, settings: Any
) -> None:
    producer.publish(idempotency_key="a")
    state = Path(settings.LOG_STATE_FILE)
    remembered = json.loads(state.read_text())
    state.write_text(json.dumps({**remembered, "tree_size": 10}))  # a restore from a backup
    signed = SignedCheckpoint.objects.count()
    items = [example_body(idempotency_key="b"), {"phase": "nonsense"}]
    response = producer.post({"receipts": items}, path="/api/receipts/batch")
    assert response.status_code == 200
    assert [item["status"] for item in response.json()["results"]] == [503, 422]
    assert Receipt.objects.count() == 1
    assert SignedCheckpoint.objects.count() == signed

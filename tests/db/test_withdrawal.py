"""Withdrawal: POST /api/receipts/<id>/withdrawal (and the admin's action) erases a receipt's
content and keeps its place in the log; the page and the verification answer 410; the list
and the detail show it withdrawn; the database permits this one change, and only after a
withdrawal record exists; the content leaves SQLite's files (the database file and its
write-ahead log), as read from the disk; and the receipt's idempotency key stays spent: a POST
under it again is refused (410) and stores nothing, the withdrawal keeping a keyed hash of the
key, never the key."""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import json
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import Error, IntegrityError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receiptsite.integrity import keys, merkle
from receiptsite.integrity.canonical import canonical_bytes
from receiptsite.ledger import keyring
from receiptsite.receipts.models import (
    Checkpoint,
    LogEntry,
    LogNode,
    Receipt,
    SignedCheckpoint,
    Withdrawal,
    WithdrawalStatement,
)
from receiptsite.withdrawal import withdrawals as service
from tests.conftest import SITE, Producer, assert_problem, example_body, lift_guard
from tests.db import test_immutability as immutability
from tests.db.test_immutability import STATEMENTS, snapshot
from tests.db.test_query_counts import PUBLIC, pinned, public_requests, queries_of
from tests.db.test_reads_never_write import WRITES
from tests.livesite import is_postgres, suite_database_url

migration_0015 = importlib.import_module(
    "receiptsite.receipts.migrations.0015_withdrawal_ties_and_statements"
)

pytestmark = pytest.mark.db

WITHDRAWN_SUMMARY_KEYS = [
    "id",
    "url",
    "verify_url",
    "output_hash",
    "recorded_at",
    "log_index",
    "workflow_id",
    "phase",
    "subject",
    "outcome",
    "withdrawn_at",
]


def withdraw(producer: Producer, receipt_id: str, body: Any = None, **extra: str) -> Any:
    if body is None:
        body = {"reason": "personal_data", "note": "It names a customer."}
    return producer.post(json.dumps(body), path=f"/api/receipts/{receipt_id}/withdrawal", **extra)


def leaf_of(receipt: Receipt) -> bytes:
    return bytes(LogNode.objects.get(key=LogNode.node_key(0, receipt.log_entry.index)).hash)


# --- the tenant's route ------------------------------------------------------------------------


def test_it_withdraws_the_receipt_and_erases_its_content(producer: Producer) -> None:
    answer = producer.publish()
    stored = Receipt.objects.get(public_id=answer["id"])
    leaf, index = leaf_of(stored), stored.log_entry.index
    response = withdraw(producer, answer["id"])
    assert response.status_code == 201, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["id", "withdrawn_at", "reason"]
    record = Withdrawal.objects.get()
    assert body == {
        "id": answer["id"],
        "withdrawn_at": record.withdrawn_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reason": "personal_data",
    }
    assert "Idempotent-Replayed" not in response
    assert (record.withdrawn_by, record.note, record.tenant_id) == (
        "publisher",
        "It names a customer.",
        stored.tenant_id,
    )
    erased = Receipt.objects.get(public_id=answer["id"])
    assert erased.raw_bytes() == b""
    for column in (
        "workflow_id",
        "session_id",
        "phase",
        "subject_name",
        "framework_name",
        "trace_id",
        "request_hash",
    ):
        assert getattr(erased, column) == "", column
    assert erased.outcome is None and erased.idempotency_key is None
    # What stays: the id, the tenant, recorded_at, the output hash, the leaf and its place.
    for kept in (
        "public_id",
        "tenant_id",
        "api_key_id",
        "recorded_at",
        "output_hash",
        "signing_key_id",
    ):
        assert getattr(erased, kept) == getattr(stored, kept), kept
    assert bytes(erased.signature) == bytes(stored.signature)
    assert erased.log_entry.index == index and leaf_of(erased) == leaf


def test_a_second_withdrawal_replays_the_first_answer(producer: Producer) -> None:
    answer = producer.publish()
    first = withdraw(producer, answer["id"])
    again = withdraw(producer, answer["id"], {"reason": "legal"})
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Withdrawal.objects.get().reason == "personal_data"


def test_another_tenants_receipt_is_the_same_404_as_an_unknown_one(
    producer: Producer, other_producer: Producer
) -> None:
    answer = producer.publish()
    theirs = withdraw(other_producer, answer["id"])
    unknown = withdraw(other_producer, "0b7a6f5e-7c1d-4e0a-9d8b-3f2e1a0c9b8d")
    assert_problem(theirs, 404, "not-found")
    assert theirs.json() == unknown.json()
    assert not Withdrawal.objects.exists()
    assert Receipt.objects.get(public_id=answer["id"]).raw_bytes()


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"reason": "boredom"}, ["/reason"]),
        ({"note": "no reason given"}, ["/reason"]),
        ({"reason": "other", "note": "x" * 501}, ["/note"]),
        ({"reason": 3, "note": ["a list"]}, ["/reason", "/note"]),
        ({"reason": "other", "by": "someone"}, ["/by"]),
        (["personal_data"], [""]),
        ("personal_data", [""]),
    ],
)
def test_a_bad_body_is_a_422_naming_each_field_and_changes_nothing(
    producer: Producer, body: Any, fields: list[str]
) -> None:
    answer = producer.publish()
    response = withdraw(producer, answer["id"], body)
    problem = assert_problem(response, 422, "validation-error")
    assert [e["field"] for e in problem["errors"]] == fields
    assert not Withdrawal.objects.exists()
    assert Receipt.objects.get(public_id=answer["id"]).raw_bytes()


def test_a_note_of_500_characters_and_no_note_are_both_fine(producer: Producer) -> None:
    first, second = producer.publish(), producer.publish(idempotency_key="k/2")
    longest = withdraw(producer, first["id"], {"reason": "other", "note": "é" * 500})
    assert longest.status_code == 201
    assert withdraw(producer, second["id"], {"reason": "secret"}).status_code == 201
    assert sorted(Withdrawal.objects.values_list("note", flat=True)) == ["", "é" * 500]


def test_a_secret_in_the_note_is_redacted_before_it_is_stored(producer: Producer) -> None:
    answer = producer.publish()
    token = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    response = withdraw(producer, answer["id"], {"reason": "secret", "note": f"held {token}"})
    assert response.status_code == 201
    assert Withdrawal.objects.get().note == "held [REDACTED]"


def test_the_body_is_read_as_every_json_body_is(producer: Producer) -> None:
    answer = producer.publish()
    path = f"/api/receipts/{answer['id']}/withdrawal"
    assert_problem(producer.post("{", path=path), 400, "malformed-json")
    text = producer.client.post(
        path, data="reason=other", content_type="text/plain", headers=producer.headers()
    )
    assert_problem(text, 415, "unsupported-media-type")
    big = json.dumps({"reason": "other", "note": "x" * (service.MAX_BYTES + 1)})
    assert_problem(producer.post(big, path=path), 413, "payload-too-large")
    assert_problem(
        Client().post(path, data="{}", content_type="application/json"), 401, "unauthorized"
    )
    wrong = producer.client.get(path, headers=producer.headers())
    assert_problem(wrong, 405, "method-not-allowed")
    assert wrong["Allow"] == "POST"
    assert not Withdrawal.objects.exists()


def test_the_request_is_in_the_api_audit_log(producer: Producer) -> None:
    answer = producer.publish()
    withdraw(producer, answer["id"])
    withdraw(producer, answer["id"], {"reason": "nonsense"})
    entries = producer.get("/api/audit-logs").json()["entries"]
    assert [(e["route"], e["status"], e["receipt_ids"]) for e in entries[:2]] == [
        ("POST /api/receipts/{id}/withdrawal", 422, []),
        ("POST /api/receipts/{id}/withdrawal", 201, [answer["id"]]),
    ]


# --- a retry of a withdrawn receipt's idempotency key ---------------------------------------

# A key that holds personal data, as producers' keys sometimes do.
PERSONAL_KEY = "invoice/jane.doe@example.org/1"


def stored_state() -> tuple[int, int, int, int]:
    """What a refused retry must leave as it was: the receipts, the log's leaves, its tree
    heads and their signatures."""
    return (
        Receipt.objects.count(),
        LogEntry.objects.count(),
        Checkpoint.objects.count(),
        SignedCheckpoint.objects.count(),
    )


def withdrawn_receipt(producer: Producer, key: str = PERSONAL_KEY) -> dict[str, Any]:
    answer = producer.publish(idempotency_key=key)
    assert withdraw(producer, answer["id"]).status_code == 201
    return answer


def assert_withdrawn_problem(body: dict[str, Any], withdrawn: dict[str, Any]) -> None:
    assert body["type"] == f"{SITE}/problems/withdrawn" and body["status"] == 410
    assert body["title"] and body["detail"]
    assert (body["id"], body["url"]) == (withdrawn["id"], withdrawn["url"])
    assert withdrawn["id"] not in body["detail"] and PERSONAL_KEY not in body["detail"]


def test_the_same_post_again_after_a_withdrawal_is_410_and_stores_nothing(
    producer: Producer,
) -> None:
    withdrawn = withdrawn_receipt(producer)
    before = stored_state()
    again = producer.post(example_body(idempotency_key=PERSONAL_KEY))
    assert_withdrawn_problem(assert_problem(again, 410, "withdrawn"), withdrawn)
    # Another document under the key is refused alike: the key is spent, whatever it sends.
    other = producer.post(example_body(idempotency_key=PERSONAL_KEY, result="something else"))
    assert_withdrawn_problem(assert_problem(other, 410, "withdrawn"), withdrawn)
    assert stored_state() == before
    assert Receipt.objects.get(public_id=withdrawn["id"]).raw_bytes() == b""
    entries = producer.get("/api/audit-logs").json()["entries"]
    refused: tuple[Any, ...] = ("POST /api/receipts", 410, f"{SITE}/problems/withdrawn", [])
    assert [
        (e["route"], e["status"], e["problem_type"], e["receipt_ids"]) for e in entries[:2]
    ] == [refused, refused]


def test_the_refusal_costs_what_a_replay_costs(producer: Producer) -> None:
    # The withdrawal is found by the idempotency look-up itself, in the same one statement.
    kept = producer.publish(idempotency_key="kept/1")
    withdrawn_receipt(producer)
    replay, replayed = queries_of(
        lambda: producer.post(example_body(idempotency_key="kept/1"))
    )
    assert replay.status_code == 201 and replay.json() == kept
    refusal, refused = queries_of(
        lambda: producer.post(example_body(idempotency_key=PERSONAL_KEY))
    )
    assert refusal.status_code == 410
    assert len(refused) == len(replayed), "\n".join(refused)


def test_in_a_batch_only_the_withdrawn_keys_item_is_410(producer: Producer) -> None:
    withdrawn = withdrawn_receipt(producer)
    before = stored_state()
    response = producer.post(
        {
            "receipts": [
                example_body(idempotency_key="batch/1"),
                example_body(idempotency_key=PERSONAL_KEY),
                example_body(idempotency_key="batch/2"),
            ]
        },
        path="/api/receipts/batch",
    )
    assert response.status_code == 200, response.content
    first, refused, last = response.json()["results"]
    assert (first["status"], last["status"]) == (201, 201)
    assert_withdrawn_problem(refused, withdrawn)
    assert stored_state()[:2] == (before[0] + 2, before[1] + 2)
    stored = set(Receipt.objects.values_list("idempotency_key", flat=True))
    assert stored == {"batch/1", "batch/2", None}  # None: the withdrawn one, its key erased
    # A batch of that item alone stores nothing, and appends nothing to the log.
    before = stored_state()
    alone = producer.post(
        {"receipts": [example_body(idempotency_key=PERSONAL_KEY)]}, path="/api/receipts/batch"
    )
    assert alone.status_code == 200
    [result] = alone.json()["results"]
    assert_withdrawn_problem(result, withdrawn)
    assert stored_state() == before


def test_another_tenant_may_use_the_key_after_the_first_withdrew(
    producer: Producer, other_producer: Producer
) -> None:
    withdrawn = withdrawn_receipt(producer)
    theirs = other_producer.post(example_body(idempotency_key=PERSONAL_KEY))
    assert theirs.status_code == 201, theirs.content
    batch = other_producer.post(
        {"receipts": [example_body(idempotency_key=PERSONAL_KEY)]}, path="/api/receipts/batch"
    )
    assert batch.json()["results"][0]["status"] == 201  # replayed: their own receipt
    assert batch.json()["results"][0]["id"] == theirs.json()["id"]
    assert Receipt.objects.filter(idempotency_key=PERSONAL_KEY).count() == 1
    # The first tenant's key stays spent.
    ours = producer.post(example_body(idempotency_key=PERSONAL_KEY))
    assert_withdrawn_problem(assert_problem(ours, 410, "withdrawn"), withdrawn)


def test_the_withdrawal_keeps_a_keyed_hash_of_the_key_and_never_the_key(
    producer: Producer, settings: Any
) -> None:
    withdrawn = withdrawn_receipt(producer)
    record = Withdrawal.objects.get()
    expected = service.idempotency_key_hash(record.tenant_id, PERSONAL_KEY)
    assert record.idempotency_key_hash == expected
    assert len(expected) == 64 and expected != hashlib.sha256(PERSONAL_KEY.encode()).hexdigest()
    # Keyed by the site's secret and by the tenant: neither a guess of the key alone nor the
    # same key of another tenant gives it.
    assert service.idempotency_key_hash(record.tenant_id + 1, PERSONAL_KEY) != expected
    settings.SECRET_KEY = "another secret key"
    assert service.idempotency_key_hash(record.tenant_id, PERSONAL_KEY) != expected
    receipt = Receipt.objects.get(public_id=withdrawn["id"])
    for table, pk in (("receipts_withdrawal", record.pk), ("receipts_receipt", receipt.pk)):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [pk])
            row = cursor.fetchone()
        text = repr([bytes(v) if isinstance(v, memoryview) else v for v in row])
        assert PERSONAL_KEY not in text and "jane.doe" not in text, table


def test_after_a_rotation_the_old_secret_in_the_fallbacks_still_refuses_the_key(
    producer: Producer, settings: Any
) -> None:
    withdrawn = withdrawn_receipt(producer)
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the rotated secret key", [old]
    again = producer.post(example_body(idempotency_key=PERSONAL_KEY))
    assert_withdrawn_problem(assert_problem(again, 410, "withdrawn"), withdrawn)
    # Once the old secret is dropped the site cannot know the key any more (README).
    settings.SECRET_KEY_FALLBACKS = []
    assert producer.post(example_body(idempotency_key=PERSONAL_KEY)).status_code == 201


# --- what the routes show afterwards ----------------------------------------------------------


def test_the_list_and_the_detail_show_it_withdrawn_without_a_document(
    producer: Producer,
) -> None:
    kept = producer.publish(idempotency_key="kept/1")
    answer = producer.publish()
    withdrawn_at = withdraw(producer, answer["id"]).json()["withdrawn_at"]
    detail = producer.get(f"/api/receipts/{answer['id']}")
    assert detail.status_code == 200
    body = detail.json()
    assert list(body) == WITHDRAWN_SUMMARY_KEYS
    assert body == {
        **answer,
        "workflow_id": None,
        "phase": None,
        "subject": None,
        "outcome": None,
        "withdrawn_at": withdrawn_at,
    }
    listed = producer.get("/api/receipts").json()["receipts"]
    assert listed[0] == body
    assert "withdrawn_at" not in listed[1] and listed[1]["id"] == kept["id"]
    # The erased columns match no filter any more.
    assert producer.get("/api/receipts", workflow_id="wf-7f3a").json()["receipts"] == [listed[1]]


def test_the_verification_answers_410_with_the_kept_leaf_and_a_proof_that_verifies(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    producer.publish(idempotency_key="after/1")  # the tree grows past the withdrawn leaf
    stored = Receipt.objects.get(public_id=answer["id"])
    leaf = leaf_of(stored)
    withdrawn_at = withdraw(producer, answer["id"]).json()["withdrawn_at"]
    producer.publish(idempotency_key="after/2")
    response = client.get(f"/api/receipt/{answer['id']}/verify")
    assert response.status_code == 410
    assert response["Content-Type"] == "application/json"
    assert response["Access-Control-Allow-Origin"] == "*"
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert list(body) == [
        "receipt_id",
        "status",
        "withdrawn_at",
        "reason",
        "leaf_hash",
        "log",
        "output_hash",
        "signature",
        "checks",
        "statement",
    ]
    assert body["receipt_id"] == answer["id"] and body["status"] == "withdrawn"
    assert body["withdrawn_at"] == withdrawn_at and body["reason"] == "personal_data"
    assert base64.b64decode(body["leaf_hash"]) == leaf
    log = body["log"]
    assert log["index"] == stored.log_entry.index and log["tree_size"] == 3
    assert log["checkpoint"] == client.get("/api/log/checkpoint").content.decode()
    proof = [base64.b64decode(p) for p in log["inclusion_proof"]]
    root = base64.b64decode(log["root_hash"])
    assert merkle.verify_inclusion(leaf, log["index"], log["tree_size"], proof, root)
    assert not merkle.verify_inclusion(merkle.leaf_hash(b""), log["index"], 3, proof, root)


def test_the_page_answers_410_in_plain_words(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    withdraw(producer, answer["id"])
    page = client.get(f"/run/{answer['id']}")
    assert page.status_code == 410
    assert page["Referrer-Policy"] == "same-origin" and page["Cache-Control"] == "no-store"
    text = page.content.decode()
    assert "This receipt was withdrawn" in text
    assert "by the publisher, for personal data." in text
    assert "Its place in the tamper-evident log is kept" in text
    assert "website_audit" not in text and "wf-7f3a" not in text
    chinese = client.get(f"/run/{answer['id']}?lang=zh-hans")
    assert chinese.status_code == 410
    assert "此收据已撤回" in chinese.content.decode()
    handoff = client.get(f"/run/{answer['id']}/handoff.txt")
    assert handoff.status_code == 410 and b"withdrawn" in handoff.content
    # The hand-off names the withdrawal's signed statement, as the page and the verify answer do.
    stated = client.get(f"/api/receipt/{answer['id']}/verify").json()["statement"]["hash"]
    assert f"its SHA-256: {stated} " in handoff.content.decode()


@pytest.mark.skipif(is_postgres(suite_database_url()), reason="an SQLite setting")
def test_sqlite_overwrites_what_the_erasure_frees(producer: Producer) -> None:
    # Some builds of SQLite (Debian's) overwrite freed content by default, others do not: the
    # erasing connection turns it on whatever the build.
    answer = producer.publish()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA secure_delete = OFF")
        withdraw(producer, answer["id"])
        cursor.execute("PRAGMA secure_delete")
        assert cursor.fetchone() == (1,)


def test_reading_a_withdrawn_receipt_writes_nothing_but_the_tenants_audit_lines(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    withdraw(producer, answer["id"])
    reads = [
        (client, f"/api/receipt/{answer['id']}/verify"),
        (client, f"/run/{answer['id']}"),
        (client, f"/run/{answer['id']}/handoff.txt"),
        (producer.client, f"/api/receipts/{answer['id']}"),
        (producer.client, "/api/receipts"),
    ]
    with CaptureQueriesContext(connection) as queries:
        statuses = [who.get(path, headers=producer.headers()).status_code for who, path in reads]
    assert statuses == [410, 410, 410, 200, 200]
    writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(WRITES)]
    assert len(writes) == 2 and all('INSERT INTO "audit_auditentry"' in w for w in writes)


def test_checklog_still_proves_the_whole_tree(producer: Producer, capsys: Any) -> None:
    answers = [producer.publish(idempotency_key=f"k/{i}") for i in range(3)]
    withdraw(producer, answers[1]["id"])
    call_command("checklog")
    assert "OK: 3 leaves" in capsys.readouterr().out


@pytest.mark.parametrize("route", ["verify", "page", "handoff"])
def test_a_withdrawn_receipt_costs_at_most_one_query_more_than_a_normal_one(
    producer: Producer, client: Client, route: str
) -> None:
    normal = producer.publish(idempotency_key="normal/1")
    answer = producer.publish()
    withdraw(producer, answer["id"])
    path = public_requests(answer["id"])[route]
    client.get(path)
    response, sql = queries_of(lambda: client.get(path))
    assert response.status_code == 410, response.content
    assert len(sql) <= pinned(PUBLIC, route) + 1, "\n".join(sql)
    client.get(public_requests(normal["id"])[route])
    response, sql = queries_of(lambda: client.get(public_requests(normal["id"])[route]))
    assert response.status_code == 200 and len(sql) == pinned(PUBLIC, route)


def test_a_list_with_withdrawn_receipts_costs_one_query_more(producer: Producer) -> None:
    for i in range(3):
        producer.publish(idempotency_key=f"list/{i}")
    _, plain = queries_of(lambda: producer.get("/api/receipts"))
    withdraw(producer, producer.publish()["id"])
    response, sql = queries_of(lambda: producer.get("/api/receipts"))
    assert response.status_code == 200 and len(sql) == len(plain) + 1, "\n".join(sql)


# --- the auditor's action ---------------------------------------------------------------------


@pytest.fixture
def auditor(db: None) -> User:
    user = User.objects.create_user("auditor", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="Auditors"))
    return user


def test_an_auditor_withdraws_from_the_admin_after_a_confirmation_page(
    producer: Producer, auditor: User
) -> None:
    answer = producer.publish()
    stored = Receipt.objects.get(public_id=answer["id"])
    desk = Client()
    desk.force_login(auditor)
    changelist = "/admin/receipts/receipt/"
    chosen = {"action": "withdraw_receipts", "_selected_action": [str(stored.pk)]}
    confirm = desk.post(changelist, chosen)
    assert confirm.status_code == 200
    assert b"Withdraw 1 receipt" in confirm.content
    assert not Withdrawal.objects.exists()  # nothing happens before the confirmation
    bad = desk.post(changelist, {**chosen, "confirm": "yes", "reason": "whim", "note": ""})
    assert bad.status_code == 200 and not Withdrawal.objects.exists()
    done = desk.post(
        changelist, {**chosen, "confirm": "yes", "reason": "legal", "note": "A court order."}
    )
    assert done.status_code == 302
    record = Withdrawal.objects.get()
    assert (record.withdrawn_by, record.auditor, record.reason, record.api_key) == (
        "auditor",
        auditor,
        "legal",
        None,
    )
    assert Receipt.objects.get(pk=stored.pk).raw_bytes() == b""
    page = Client().get(f"/run/{answer['id']}")
    assert page.status_code == 410 and b"by an auditor, for a legal reason." in page.content
    assert desk.get(f"/admin/receipts/receipt/{stored.pk}/change/").status_code == 200


def test_staff_without_the_permission_cannot_withdraw(producer: Producer) -> None:
    answer = producer.publish()
    stored = Receipt.objects.get(public_id=answer["id"])
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_receipt"))
    desk = Client()
    desk.force_login(viewer)
    desk.post(
        "/admin/receipts/receipt/",
        {
            "action": "withdraw_receipts",
            "_selected_action": [str(stored.pk)],
            "confirm": "yes",
            "reason": "legal",
            "note": "",
        },
    )
    assert not Withdrawal.objects.exists()


# --- the database permits the erasure only after a withdrawal ------------------------------


def erase_sql(receipt: Receipt) -> str:
    sets = ", ".join(
        f'"{f.column}" = '
        + (
            "NULL"
            if service.erased_value(f) is None
            else ("X''" if connection.vendor == "sqlite" else "''::bytea")
            if isinstance(service.erased_value(f), bytes)
            else "''"
        )
        for f in service.erased_fields(Receipt)
    )
    return f"UPDATE receipts_receipt SET {sets} WHERE id = {receipt.pk}"


def assert_refused(sql: str) -> None:
    before = snapshot("receipts_receipt")
    with (
        pytest.raises(Error, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    assert snapshot("receipts_receipt") == before


def test_the_database_refuses_an_erasure_without_a_withdrawal(producer: Producer) -> None:
    stored = Receipt.objects.get(public_id=producer.publish()["id"])
    assert_refused(erase_sql(stored))
    assert_refused(
        f"UPDATE receipts_receipt SET canonical_bytes = "
        f"{'X' if connection.vendor == 'sqlite' else ''}'' WHERE id = {stored.pk}"
    )


def test_after_a_withdrawal_the_database_still_refuses_every_other_change(
    producer: Producer,
) -> None:
    first = Receipt.objects.get(public_id=producer.publish()["id"])
    withdraw(producer, str(first.public_id))
    withdrawn = Receipt.objects.get(pk=first.pk)
    # Not another value of an erased column, nor a kept one changed alongside the erasure.
    for sql in (
        f"UPDATE receipts_receipt SET workflow_id = 'back' WHERE id = {first.pk}",
        f"UPDATE receipts_receipt SET output_hash = '{'0' * 64}' WHERE id = {first.pk}",
        erase_sql(withdrawn).replace(" WHERE", ", recorded_at = recorded_at + 0 WHERE")
        if connection.vendor == "sqlite"
        else erase_sql(withdrawn).replace(
            " WHERE", ", recorded_at = recorded_at + interval '1s' WHERE"
        ),
        f"DELETE FROM receipts_receipt WHERE id = {first.pk}",
    ):
        assert_refused(sql)
    # Another receipt of the tenant, not withdrawn, is still guarded.
    other = Receipt.objects.get(public_id=producer.publish(idempotency_key="o/1")["id"])
    assert_refused(erase_sql(other))


@pytest.mark.parametrize("statement", STATEMENTS)
def test_the_withdrawals_are_append_only(
    producer: Producer, statement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendors, make, match = STATEMENTS[statement]
    if connection.vendor not in vendors:
        pytest.skip(f"{statement} is not {connection.vendor}'s")
    withdraw(producer, producer.publish()["id"])
    before = snapshot("receipts_withdrawal")
    monkeypatch.setitem(immutability.CHANGE, "receipts_withdrawal", ("reason", "'other'"))
    if statement == "truncate":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # as test_immutability does
    with pytest.raises(Error, match=match), transaction.atomic(), connection.cursor() as c:
        c.execute(make("receipts_withdrawal"))
    assert snapshot("receipts_withdrawal") == before


def test_the_trigger_names_every_column_of_the_receipt(db: None) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'receipts_receipt_no_update'"
            )
        else:
            cursor.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = 'receiptsite_receipt_change'"
            )
        (text,) = cursor.fetchone()
    for field in Receipt._meta.concrete_fields:
        assert f'NEW."{field.column}"' in text, field.column


# --- end to end, through a live server --------------------------------------------------------


# --- PostgreSQL: the site's own role, which owns nothing --------------------------------------





# --- withdrawals are evidence too ---------------------------------------------------------------


def test_the_410_answer_carries_what_a_copy_of_the_bytes_is_checked_against(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    before = client.get(f"/api/receipt/{answer['id']}/verify").json()
    withdraw(producer, answer["id"])
    body = client.get(f"/api/receipt/{answer['id']}/verify").json()
    copy = base64.b64decode(before["canonical_bytes"])
    assert body["output_hash"] == before["output_hash"] == hashlib.sha256(copy).hexdigest()
    assert body["signature"] == before["signature"]
    stored = Receipt.objects.select_related("signing_key").get(public_id=answer["id"])
    assert keys.verify_signature(
        bytes(stored.signing_key.public_key), copy, base64.b64decode(body["signature"]["value"])
    )
    assert [(c["name"], c["result"]) for c in body["checks"]] == [("log_inclusion", "pass")]


def test_the_log_inclusion_check_is_recomputed_and_fails_for_a_changed_leaf(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    withdraw(producer, answer["id"])
    stored = Receipt.objects.get(public_id=answer["id"])
    lift_guard("receipts_lognode")
    LogNode.objects.filter(key=stored.log_entry.index).update(hash=b"\x01" * 32)
    body = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert [(c["name"], c["result"]) for c in body["checks"]] == [("log_inclusion", "fail")]


def test_the_withdrawal_is_a_signed_statement_chained_to_the_one_before(
    producer: Producer, client: Client
) -> None:
    first, second = producer.publish(), producer.publish(idempotency_key="k/2")
    leaf = leaf_of(Receipt.objects.get(public_id=second["id"]))
    withdraw(producer, first["id"])
    made = withdraw(producer, second["id"], {"reason": "secret", "note": ""}).json()
    body = client.get(f"/api/receipt/{second['id']}/verify").json()
    statement = body["statement"]
    data = base64.b64decode(statement["canonical_bytes"])
    assert hashlib.sha256(data).hexdigest() == statement["hash"]
    assert data == canonical_bytes(json.loads(data))  # RFC 8785
    key = Receipt.objects.select_related("signing_key").get(public_id=second["id"]).signing_key
    assert statement["signature"]["key_id"] == key.kid
    assert keys.verify_signature(
        bytes(key.public_key), data, base64.b64decode(statement["signature"]["value"])
    )
    earlier = WithdrawalStatement.objects.get(position=0)
    assert json.loads(data) == {
        "format": "withdrawal/v1",
        "receipt_id": second["id"],
        "withdrawn_at": made["withdrawn_at"],
        "withdrawn_by": "publisher",
        "reason": "secret",
        "output_hash": second["output_hash"],
        "leaf_hash": base64.b64encode(leaf).decode(),
        "position": 1,
        "previous_hash": earlier.statement_hash,
        "stated_at": json.loads(data)["stated_at"],
        "stated_by": "site",
    }
    assert json.loads(bytes(earlier.canonical_bytes))["previous_hash"] == "0" * 64
    page = client.get(f"/run/{second['id']}").content.decode()
    assert statement["hash"] in page and "signed by this site" in page


def test_an_auditors_withdrawal_is_stated_as_an_auditors(
    producer: Producer, auditor: User
) -> None:
    stored = Receipt.objects.get(public_id=producer.publish()["id"])
    desk = Client()
    desk.force_login(auditor)
    done = desk.post(
        "/admin/receipts/receipt/",
        {
            "action": "withdraw_receipts",
            "_selected_action": [str(stored.pk)],
            "confirm": "yes",
            "reason": "legal",
            "note": "",
        },
    )
    assert done.status_code == 302
    signed = json.loads(bytes(WithdrawalStatement.objects.get().canonical_bytes))
    assert (signed["withdrawn_by"], signed["reason"]) == ("auditor", "legal")


def test_without_a_usable_key_nothing_is_withdrawn(producer: Producer, settings: Any) -> None:
    answer = producer.publish()
    keyring.forget()
    settings.SIGNING_KEY = None
    try:
        response = withdraw(producer, answer["id"])
    finally:
        keyring.forget()
    assert response.status_code == 503
    assert not Withdrawal.objects.exists() and not WithdrawalStatement.objects.exists()
    assert not service.is_erased(Receipt.objects.get(public_id=answer["id"]))


def check_withdrawals() -> str:
    out = io.StringIO()
    call_command("checkwithdrawals", stdout=out)
    return out.getvalue()


def test_checkwithdrawals_passes_a_sound_chain_and_names_a_changed_withdrawal(
    producer: Producer,
) -> None:
    assert "there is no withdrawal yet" in check_withdrawals()
    ids = [producer.publish(idempotency_key=f"k/{i}")["id"] for i in range(3)]
    for receipt_id in ids:
        withdraw(producer, receipt_id)
    sound = check_withdrawals()
    assert "check out: 3 withdrawals" in sound
    head = sound.split("statement hash ")[1].split()[0]
    call_command("checkwithdrawals", "--head", head, stdout=io.StringIO())
    changed = Withdrawal.objects.get(receipt_public_id=ids[1])
    lift_guard("receipts_withdrawal")
    Withdrawal.objects.filter(pk=changed.pk).update(reason="other")
    with pytest.raises(CommandError, match=rf"withdrawal {changed.pk} \(position 1\) was changed"):
        call_command("checkwithdrawals")


def test_checkwithdrawals_finds_a_removed_statement_and_a_rewritten_one(
    producer: Producer,
) -> None:
    ids = [producer.publish(idempotency_key=f"k/{i}")["id"] for i in range(3)]
    for receipt_id in ids:
        withdraw(producer, receipt_id)
    head = WithdrawalStatement.objects.get(position=2).statement_hash
    lift_guard("receipts_withdrawalstatement")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("DROP TRIGGER receipts_withdrawalstatement_no_delete")
    middle = WithdrawalStatement.objects.get(position=1)
    WithdrawalStatement.objects.filter(pk=middle.pk).delete()
    with pytest.raises(CommandError) as failed:
        call_command("checkwithdrawals")
    assert f"withdrawal {middle.withdrawal_id} has no statement" in str(failed.value)
    assert "(position 2) does not follow the statement before it" in str(failed.value)
    WithdrawalStatement.objects.filter(position=2).delete()  # cut off the end
    with pytest.raises(CommandError, match="no statement with the hash"):
        call_command("checkwithdrawals", "--head", head)


def test_checkwithdrawals_finds_a_statement_whose_bytes_were_rewritten(
    producer: Producer,
) -> None:
    withdraw(producer, producer.publish()["id"])
    link = WithdrawalStatement.objects.get()
    lift_guard("receipts_withdrawalstatement")
    WithdrawalStatement.objects.filter(pk=link.pk).update(
        canonical_bytes=bytes(link.canonical_bytes).replace(b"personal_data", b"other")
    )
    with pytest.raises(CommandError, match="hash or signature does not verify"):
        call_command("checkwithdrawals")


@pytest.mark.parametrize("statement", STATEMENTS)
def test_the_database_refuses_every_change_of_a_statement(
    producer: Producer, statement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendors, make, match = STATEMENTS[statement]
    if connection.vendor not in vendors:
        pytest.skip(f"{statement} is not {connection.vendor}'s")
    withdraw(producer, producer.publish()["id"])
    table = "receipts_withdrawalstatement"
    before = snapshot(table)
    monkeypatch.setitem(immutability.CHANGE, table, ("stated_by", "'migration'"))
    if statement == "truncate":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # as test_immutability does
    with pytest.raises(Error, match=match), transaction.atomic(), connection.cursor() as c:
        c.execute(make(table))
    assert snapshot(table) == before


def test_the_statements_replace_trigger_knows_every_unique_key(db: None) -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(
            cursor, "receipts_withdrawalstatement"
        )
    keys = {
        frozenset(c["columns"]) for c in constraints.values() if c["unique"] or c["primary_key"]
    }
    assert keys == {frozenset(k) for k in migration_0015.UNIQUE_KEYS}


def raw_withdrawal(receipt: Receipt, *, tenant_id: int, public_id: Any) -> None:
    """INSERT a publisher's withdrawal row by hand, as no site code writes one."""
    field = Withdrawal._meta.get_field("receipt_public_id")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO receipts_withdrawal (receipt_id, receipt_public_id, tenant_id, "
            "withdrawn_at, reason, note, withdrawn_by, api_key_id) "
            "VALUES (%s, %s, %s, %s, 'other', '', 'publisher', %s)",
            [
                receipt.pk,
                field.get_db_prep_value(public_id, connection),
                tenant_id,
                connection.ops.adapt_datetimefield_value(timezone.now()),
                receipt.api_key_id,
            ],
        )


def test_the_database_ties_a_withdrawal_to_its_receipts_tenant_and_public_id(
    producer: Producer, other_producer: Producer
) -> None:
    ours = Receipt.objects.get(public_id=producer.publish()["id"])
    theirs = Receipt.objects.get(public_id=other_producer.publish()["id"])
    also_ours = Receipt.objects.get(public_id=producer.publish(idempotency_key="k/2")["id"])
    for tenant_id, public_id in (
        (theirs.tenant_id, ours.public_id),  # another tenant's
        (ours.tenant_id, also_ours.public_id),  # another receipt's public id
        (ours.tenant_id, theirs.public_id),
    ):
        with pytest.raises(IntegrityError, match="tenant and public id"), transaction.atomic():
            raw_withdrawal(ours, tenant_id=tenant_id, public_id=public_id)
    assert not Withdrawal.objects.exists()
    raw_withdrawal(ours, tenant_id=ours.tenant_id, public_id=ours.public_id)  # its own: accepted
    assert Withdrawal.objects.get().receipt_id == ours.pk


def test_a_withdrawal_request_leaves_the_scrubbing_to_the_command(
    producer: Producer, django_capture_on_commit_callbacks: Any
) -> None:
    answer = producer.publish()
    with (
        django_capture_on_commit_callbacks() as callbacks,
        CaptureQueriesContext(connection) as queries,
    ):
        assert withdraw(producer, answer["id"]).status_code == 201
    assert callbacks == []
    sql = " ".join(q["sql"] for q in queries).upper()
    assert "VACUUM" not in sql and "WAL_CHECKPOINT" not in sql


def test_the_migration_states_the_withdrawals_made_before_statements(
    producer: Producer, settings: Any
) -> None:
    # Withdrawal rows as an older release wrote them: no statement (raw, as no code writes one).
    stored = [
        Receipt.objects.get(public_id=producer.publish(idempotency_key=f"old/{i}")["id"])
        for i in range(2)
    ]
    for receipt in stored:
        raw_withdrawal(receipt, tenant_id=receipt.tenant_id, public_id=receipt.public_id)
    with pytest.raises(CommandError, match="has no statement"):
        call_command("checkwithdrawals")
    signing_key = settings.SIGNING_KEY
    settings.SIGNING_KEY = None
    with pytest.raises(RuntimeError, match="set SIGNING_KEY_FILE"):
        migration_0015.state_existing(apps, SimpleNamespace(connection=connection))
    settings.SIGNING_KEY = signing_key
    migration_0015.state_existing(apps, SimpleNamespace(connection=connection))
    out = check_withdrawals()
    assert "check out: 2 withdrawals" in out and "2 of them predate the statements" in out
    first = json.loads(bytes(WithdrawalStatement.objects.get(position=0).canonical_bytes))
    assert (first["receipt_id"], first["stated_by"]) == (str(stored[0].public_id), "migration")
    assert first["leaf_hash"] == base64.b64encode(leaf_of(stored[0])).decode()
    # The site's own next withdrawal follows them in the chain.
    withdraw(producer, producer.publish(idempotency_key="new/1")["id"])
    assert "check out: 3 withdrawals" in check_withdrawals()

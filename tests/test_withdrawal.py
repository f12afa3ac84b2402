"""Withdrawal: POST /api/receipts/<id>/withdrawal (and the admin's action) erases a receipt's
content and keeps its place in the log; the page and the verification answer 410; the list
and the detail show it withdrawn; the database permits this one change, and only after a
withdrawal record exists; and the content leaves SQLite's files (the database file and its
write-ahead log), as read from the disk."""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.db import Error, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from receiptsite.integrity import merkle
from receiptsite.receipts.models import LogNode, Receipt, Withdrawal
from receiptsite.withdrawal import withdrawals as service
from tests import test_immutability as immutability
from tests.conftest import Producer, assert_problem, example_body
from tests.livesite import LiveSite, is_postgres, suite_database_url
from tests.test_immutability import STATEMENTS, snapshot
from tests.test_query_counts import PUBLIC, pinned, public_requests, queries_of
from tests.test_reads_never_write import WRITES

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
    assert list(body) == ["receipt_id", "status", "withdrawn_at", "reason", "leaf_hash", "log"]
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
    assert "此回执已撤回" in chinese.content.decode()
    handoff = client.get(f"/run/{answer['id']}/handoff.txt")
    assert handoff.status_code == 410 and b"withdrawn" in handoff.content


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


@pytest.fixture(scope="module")
def live() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as site:
        yield site


def marked_body(marker: str) -> dict[str, Any]:
    return example_body(
        workflow_id=f"wf-{marker}",
        idempotency_key=f"key-{marker}",
        session_id=f"session-{marker}",
        subject={"type": "tool", "name": f"tool-{marker}"},
        # Long enough for SQLite's overflow pages and PostgreSQL's TOAST.
        result=f"The customer {marker} " + "lorem ipsum " * 400 + f"again {marker}",
        input_summary=f"Summary naming {marker}",
    )


@pytest.mark.live
def test_end_to_end_through_a_live_server(live: LiveSite) -> None:
    marker = secrets.token_hex(12)
    stored = live.post("/api/receipts", marked_body(marker))
    assert stored.status == 201, stored
    receipt_id = stored.json()["id"]
    before = live.get(f"/api/receipt/{receipt_id}/verify").json()
    assert before["status"] == "valid"
    other_key = live.add_tenant("globex", "Globex")
    path = f"/api/receipts/{receipt_id}/withdrawal"
    assert live.post(path, {"reason": "secret"}, key=other_key).status == 404
    assert live.post(path, {"reason": "nope"}).status == 422
    done = live.post(path, {"reason": "personal_data", "note": "names a person"})
    assert done.status == 201, done
    again = live.post(path, {"reason": "other"})
    assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == done.json()
    # Withdrawals of one receipt at once: one record, every answer the first one.
    racing = live.post("/api/receipts", marked_body(secrets.token_hex(8))).json()["id"]
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(
            pool.map(
                lambda _: live.post(f"/api/receipts/{racing}/withdrawal", {"reason": "legal"}),
                range(6),
            )
        )
    assert {a.status for a in answers} == {201}
    assert len({a.text for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") != "true" for a in answers) == 1

    verify = live.get(f"/api/receipt/{receipt_id}/verify")
    assert verify.status == 410, verify
    body = verify.json()
    assert body["status"] == "withdrawn" and body["reason"] == "personal_data"
    log = body["log"]
    leaf = base64.b64decode(body["leaf_hash"])
    assert leaf == merkle.leaf_hash(base64.b64decode(before["canonical_bytes"]))
    assert merkle.verify_inclusion(
        leaf,
        log["index"],
        log["tree_size"],
        [base64.b64decode(p) for p in log["inclusion_proof"]],
        base64.b64decode(log["root_hash"]),
    )
    assert log["checkpoint"] == live.get("/api/log/checkpoint").text
    page = live.get(f"/run/{receipt_id}")
    assert page.status == 410 and "by the publisher, for personal data." in page.text
    detail = live.get(f"/api/receipts/{receipt_id}", key=live.api_key).json()
    assert detail["withdrawn_at"] == done.json()["withdrawn_at"] and "document" not in detail
    assert marker not in verify.text + page.text + json.dumps(detail)
    assert "OK:" in live.manage("checklog")
    entries = live.get("/api/audit-logs", key=live.api_key).json()["entries"]
    assert entries[1]["route"] == "POST /api/receipts/{id}/withdrawal"
    assert receipt_id not in live.logs()
    assert "could not scrub" not in live.logs() and "still in use" not in live.logs()
    if is_postgres(live.database_url):
        import psycopg

        # The old row version went with a VACUUM right after the commit (the site's owner
        # role here may run it), not whenever autovacuum comes by.
        with psycopg.connect(live.database_url) as owner:
            (vacuumed,) = owner.execute(
                "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'receipts_receipt'"
            ).fetchone() or (None,)
        assert vacuumed is not None


@pytest.mark.live
def test_the_database_refuses_a_raw_erasure_without_a_withdrawal_on_a_live_site(
    live: LiveSite,
) -> None:
    stored = live.post("/api/receipts", marked_body(secrets.token_hex(8)))
    receipt_id = stored.json()["id"]
    if is_postgres(live.database_url):
        import psycopg

        with (
            psycopg.connect(live.database_url) as db,
            pytest.raises(psycopg.errors.RestrictViolation, match="append-only"),
        ):
            db.execute(
                "UPDATE receipts_receipt SET canonical_bytes = ''::bytea, "
                "workflow_id = '' WHERE public_id = %s",
                [receipt_id],
            )
    else:
        lite = sqlite3.connect(live.database_url.removeprefix("sqlite:///"))
        try:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                lite.execute(
                    "UPDATE receipts_receipt SET canonical_bytes = X'' WHERE public_id = ?",
                    [receipt_id.replace("-", "")],
                )
        finally:
            lite.close()
    assert live.get(f"/api/receipt/{receipt_id}/verify").json()["status"] == "valid"


def database_files(site: LiveSite) -> list[Path]:
    main = Path(site.database_url.removeprefix("sqlite:///"))
    return [p for p in (main, Path(f"{main}-wal"), Path(f"{main}-journal")) if p.exists()]


@pytest.mark.live
@pytest.mark.skipif(is_postgres(suite_database_url()), reason="reads SQLite's own files")
def test_the_content_leaves_sqlites_files_and_its_write_ahead_log(live: LiveSite) -> None:
    marker = secrets.token_hex(12)
    kept_marker = secrets.token_hex(12)
    stored = live.post("/api/receipts", marked_body(marker)).json()
    live.post("/api/receipts", marked_body(kept_marker))

    def on_disk(text: str) -> bool:
        return any(text.encode() in path.read_bytes() for path in database_files(live))

    assert on_disk(marker) and on_disk(kept_marker)  # the test can see content on the disk
    answer = live.post(f"/api/receipts/{stored['id']}/withdrawal", {"reason": "personal_data"})
    assert answer.status == 201
    assert not on_disk(marker)
    assert on_disk(kept_marker)
    wal = Path(live.database_url.removeprefix("sqlite:///") + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert live.get(f"/api/receipt/{stored['id']}/verify").status == 410


# --- PostgreSQL: the site's own role, which owns nothing --------------------------------------


@pytest.fixture(scope="module")
def role_site() -> Iterator[Any]:
    from tests.test_row_level_security import RoleSite, _admin_connect

    server = suite_database_url()
    role = f"receiptsite_site_{secrets.token_hex(5)}"
    with _admin_connect(server) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
    try:
        live = RoleSite(workers=2, role=role, env={"DATABASE_SITE_ROLE": role})
        with live:
            live.other_key = live.add_tenant("globex", "Globex")
            yield live
    finally:
        with _admin_connect(server) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.live
@pytest.mark.skipif(not is_postgres(suite_database_url()), reason="PostgreSQL's roles")
def test_the_site_role_erases_only_through_a_withdrawal_of_its_own_tenant(role_site: Any) -> None:
    import psycopg

    site = role_site
    ours = site.post("/api/receipts", marked_body("ours")).json()["id"]
    kept = site.post("/api/receipts", marked_body("kept")).json()["id"]
    theirs = site.post("/api/receipts", marked_body("theirs"), key=site.other_key).json()["id"]
    done = site.post(f"/api/receipts/{ours}/withdrawal", {"reason": "legal"})
    assert done.status == 201, done
    assert site.get(f"/api/receipt/{ours}/verify").status == 410  # read by id, as the role
    assert site.get(f"/run/{ours}").status == 410
    with psycopg.connect(site.database_url) as owner:
        rows = owner.execute("SELECT public_id::text, id FROM receipts_receipt").fetchall()
        ids: dict[str, int] = {str(public): int(pk) for public, pk in rows}
        tenants: dict[str, int] = dict(
            owner.execute("SELECT slug, id FROM receipts_tenant").fetchall()
        )
        acme, globex = tenants["acme"], tenants["globex"]

    def as_acme(sql: str, params: list[Any], error: type[Exception]) -> None:
        with site.connect() as conn:
            conn.execute("SELECT set_config('app.tenant_id', %s, true)", [str(acme)])
            with pytest.raises(error):
                conn.execute(sql, params)

    # No UPDATE privilege on receipts at all, not even on its own.
    as_acme(
        "UPDATE receipts_receipt SET canonical_bytes = ''::bytea WHERE id = %s",
        [ids[kept]],
        psycopg.errors.InsufficientPrivilege,
    )
    # The owner's function erases only what a withdrawal permits.
    as_acme("SELECT receiptsite_erase_withdrawn(%s)", [ids[kept]], psycopg.errors.RestrictViolation)
    # Another tenant's receipt: a withdrawal for it cannot be written as that tenant...
    as_acme(
        "INSERT INTO receipts_withdrawal (receipt_id, receipt_public_id, tenant_id, "
        "withdrawn_at, reason, note, withdrawn_by, api_key_id) SELECT %s, %s, %s, now(), "
        "'other', '', 'publisher', (SELECT id FROM receipts_apikey LIMIT 1)",
        [ids[theirs], theirs, globex],
        psycopg.errors.InsufficientPrivilege,
    )
    # ...and one written under our own tenant does not let the function erase theirs.
    with site.connect() as conn:
        conn.execute("SELECT set_config('app.tenant_id', %s, true)", [str(acme)])
        conn.execute(
            "INSERT INTO receipts_withdrawal (receipt_id, receipt_public_id, "
            "tenant_id, withdrawn_at, reason, note, withdrawn_by, api_key_id) "
            "SELECT %s, %s, %s, now(), 'other', '', 'publisher', "
            "(SELECT id FROM receipts_apikey WHERE tenant_id = %s LIMIT 1)",
            [ids[theirs], theirs, acme, acme],
        )
        with pytest.raises(psycopg.errors.RestrictViolation):
            conn.execute("SELECT receiptsite_erase_withdrawn(%s)", [ids[theirs]])
    assert site.get(f"/api/receipt/{theirs}/verify").json()["status"] == "valid"
    assert site.get(f"/api/receipt/{kept}/verify").json()["status"] == "valid"
    assert "OK:" in site.manage("checklog")

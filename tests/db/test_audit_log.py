"""The API audit log: every request a tenant's key makes leaves exactly one append-only entry;
GET /api/audit-logs lists the tenant's own; the admin shows them to auditors; only
`manage.py pruneauditlog` can remove old ones, and the database refuses everything else.

The first part runs in-process on the suite's database (SQLite, or PostgreSQL with
DATABASE_URL); the last part drives a live gunicorn (tests/livesite.py) on a database of its own.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import Error, connection, transaction
from django.db.models.signals import post_save, pre_save
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, get_resolver
from django.utils import timezone

from receiptsite.audit.models import AuditEntry, PrunePermit
from receiptsite.audit.recording import route_name
from receiptsite.config import ConfigurationError, audit_log_days
from receiptsite.receipts.models import ApiKey, Receipt, Tenant
from tests.conftest import SITE, Producer, assert_problem, example_body
from tests.live.test_configuration import assert_one_line, environment
from tests.livesite import PYTHON, REPO

pytestmark = pytest.mark.db

AUDIT = "/api/audit-logs"
ENTRY_FIELDS = ["id", "at", "request_id", "key_prefix", "method", "route", "status",
                "problem_type", "receipt_ids", "duration_ms"]


def entries(producer: Producer, **params: Any) -> list[dict[str, Any]]:
    response = producer.get(AUDIT, **params)
    assert response.status_code == 200, response.content
    found: list[dict[str, Any]] = response.json()["entries"]
    return found


def only(producer: Producer, request_id: str) -> dict[str, Any]:
    found = entries(producer, request_id=request_id)
    assert len(found) == 1, found
    return found[0]


def prefix(key: str) -> str:
    return key[: ApiKey.PREFIX_LENGTH]


# --- what an entry holds ----------------------------------------------------------------------


def test_a_stored_receipt_is_found_by_its_request_id_and_by_its_receipt_id(
    producer: Producer, api_key: str
) -> None:
    stored = producer.post(example_body(), **{"X-Request-ID": "ingest-1"})
    assert stored.status_code == 201
    receipt_id = stored.json()["id"]
    entry = only(producer, "ingest-1")
    assert list(entry) == ENTRY_FIELDS
    assert entry["key_prefix"] == prefix(api_key)
    assert (entry["method"], entry["route"], entry["status"]) == ("POST", "POST /api/receipts",
                                                                  201)
    assert entry["problem_type"] is None
    assert entry["receipt_ids"] == [receipt_id]
    assert isinstance(entry["duration_ms"], int) and entry["duration_ms"] >= 0
    assert entry["at"].endswith("Z")
    assert entries(producer, receipt_id=receipt_id) == [entry]
    assert entries(producer, receipt_id=receipt_id.upper()) == [entry]


def test_a_refused_ingest_is_logged_with_its_problem_type_and_stores_nothing(
    producer: Producer,
) -> None:
    refused = producer.post(example_body(phase="sideways"), **{"X-Request-ID": "bad-1"})
    body = assert_problem(refused, 422, "validation-error")
    assert Receipt.objects.count() == 0
    entry = only(producer, "bad-1")
    assert (entry["status"], entry["problem_type"]) == (422, body["type"])
    assert entry["receipt_ids"] == []


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "slug"),
    [
        ("GET", "/api/receipts/f5245d22-e650-49ae-8876-f1a335f309bc", None, 404, "not-found"),
        ("GET", "/api/receipts?limit=0", None, 400, "bad-query-parameter"),
        ("GET", f"{AUDIT}?status=teapot", None, 400, "bad-query-parameter"),
        ("POST", "/api/receipts", b"{", 400, "malformed-json"),
        ("POST", "/api/receipts/batch", {"receipts": []}, 422, "validation-error"),
    ],
)
def test_every_refusal_of_a_tenant_route_has_its_entry(
    producer: Producer, client: Client, method: str, path: str, body: Any, status: int,
    slug: str,
) -> None:
    headers = producer.headers(**{"X-Request-ID": "refused"})
    if method == "GET":
        response = client.get(path, headers=headers)
    else:
        data = body if isinstance(body, bytes) else json.dumps(body)
        response = client.post(path, data=data, content_type="application/json", headers=headers)
    assert_problem(response, status, slug)
    entry = only(producer, "refused")
    assert (entry["status"], entry["problem_type"]) == (status, f"{SITE}/problems/{slug}")


def test_a_rate_limited_request_has_its_entry(producer: Producer, settings: Any) -> None:
    settings.RATE_LIMITS = {"read": (1.0, 0.001)}
    assert producer.get("/api/receipts").status_code == 200
    limited = producer.client.get("/api/receipts", headers=producer.headers(
        **{"X-Request-ID": "too-soon"}))
    assert_problem(limited, 429, "rate-limited")
    settings.RATE_LIMITS = None
    entry = only(producer, "too-soon")
    assert (entry["status"], entry["problem_type"]) == (429, f"{SITE}/problems/rate-limited")


def test_a_request_without_a_valid_key_leaves_no_entry(client: Client, producer: Producer) -> None:
    for headers in ({}, {"Authorization": "Bearer rk_000000000000_nope"}):
        response = client.post("/api/receipts", data="{}", content_type="application/json",
                               headers=headers)
        assert response.status_code == 401
    assert AuditEntry.objects.count() == 0


def test_reads_name_the_receipts_they_read_by_the_routes_pattern(producer: Producer) -> None:
    first, second = (producer.publish(idempotency_key=k)["id"] for k in ("a", "b"))
    path = f"/api/receipts/{first.upper()}"
    assert producer.client.get(path, headers=producer.headers(
        **{"X-Request-ID": "detail"})).status_code == 200
    assert producer.client.get("/api/receipts", headers=producer.headers(
        **{"X-Request-ID": "list"})).status_code == 200
    detail = only(producer, "detail")
    assert (detail["route"], detail["receipt_ids"]) == ("GET /api/receipts/{id}", [first])
    listed = only(producer, "list")
    assert (listed["route"], listed["receipt_ids"]) == ("GET /api/receipts", [second, first])


def test_a_batch_names_the_receipts_it_stored_or_replayed_and_not_those_it_refused(
    producer: Producer,
) -> None:
    kept = producer.publish(idempotency_key="kept")["id"]
    items = [
        example_body(idempotency_key="new"),
        example_body(idempotency_key="kept"),  # a replay
        example_body(idempotency_key="kept", result="other"),  # names `kept`, refused
        example_body(phase="sideways"),
    ]
    answer = producer.post({"receipts": items}, "/api/receipts/batch",
                           **{"X-Request-ID": "batch"})
    assert answer.status_code == 200
    results = answer.json()["results"]
    assert [r["status"] for r in results] == [201, 201, 422, 422]
    entry = only(producer, "batch")
    assert entry["route"] == "POST /api/receipts/batch"
    assert entry["receipt_ids"] == [results[0]["id"], kept]


def test_every_tenant_route_is_named_by_its_pattern_never_by_a_path() -> None:
    names = []
    for pattern in get_resolver().url_patterns:
        if isinstance(pattern, URLPattern) and str(pattern.pattern).startswith("api/"):
            match = get_resolver().resolve("/" + str(pattern.pattern).replace(
                "<receipt_id:receipt_id>", str(uuid.uuid4())))

            class Asked:
                method = "GET"
                resolver_match = match

            names.append(route_name(Asked()))  # type: ignore[arg-type]
    assert "GET /api/receipts/{id}" in names and "GET /api/audit-logs" in names
    assert "GET /api/receipt/{id}/verify" in names
    assert all("<" not in n and not any(c.isdigit() for c in n) for n in names), names


def test_no_entry_holds_a_key_an_authorization_header_or_a_capability_path(
    producer: Producer, api_key: str
) -> None:
    receipt_id = producer.publish()["id"]
    producer.get(f"/api/receipts/{receipt_id}")
    producer.get("/api/receipts/f5245d22-e650-49ae-8876-f1a335f309bc")
    producer.post(example_body(result=api_key, idempotency_key="leak"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM audit_auditentry")
        rows = cursor.fetchall()
    assert len(rows) == 4
    text = json.dumps([[str(v) for v in row] for row in rows])
    assert api_key not in text and api_key[ApiKey.PREFIX_LENGTH:] not in text
    assert "Bearer" not in text and "Authorization" not in text
    assert f"/api/receipts/{receipt_id}" not in text and "/run/" not in text


# --- GET /api/audit-logs ---------------------------------------------------------------------


def test_the_list_is_newest_first_and_keyset_paginated(producer: Producer) -> None:
    for i in range(5):
        producer.post(example_body(idempotency_key=f"k{i}"), **{"X-Request-ID": f"r{i}"})
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, "key_prefix": prefix(producer.key), "status": 201}
        answer = producer.get(AUDIT, **params, **({"cursor": cursor} if cursor else {})).json()
        seen += [e["request_id"] for e in answer["entries"]]
        producer.publish(idempotency_key=f"meanwhile-{len(seen)}")  # never shifts a page
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert seen[:5] == ["r4", "r3", "r2", "r1", "r0"]
    assert len(seen) == len(set(seen))


def test_the_filters_match_exactly_and_an_empty_one_counts_as_absent(
    producer: Producer,
) -> None:
    producer.post(example_body(), **{"X-Request-ID": "one"})
    producer.post(example_body(phase="sideways"), **{"X-Request-ID": "two"})
    assert [e["request_id"] for e in entries(producer, status=422)] == ["two"]
    assert entries(producer, request_id="on") == []
    assert entries(producer, key_prefix="rk_000000000000") == []
    everything = entries(producer, request_id="", status="", receipt_id="")
    assert {"one", "two"} <= {e["request_id"] for e in everything}
    first_at = only(producer, "one")["at"]
    since = [e["request_id"] for e in entries(producer, since=first_at)]
    assert "one" in since and "two" in since
    assert "one" not in [e["request_id"] for e in entries(producer, until=first_at)]
    assert entries(producer, until="2000-01-01T00:00:00Z") == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("status", "abc"), ("status", "99"), ("status", "600"), ("status", "²"),
        ("receipt_id", "nope"), ("receipt_id", "f5245d22e65049ae8876f1a335f309bc"),
        ("since", "yesterday"), ("until", "2026-11-30T14:31:07"), ("limit", "0"),
        ("limit", "201"), ("cursor", "forged"), ("request_id", "a\x00b"),
    ],
)
def test_a_bad_parameter_is_a_400_problem_naming_it(
    producer: Producer, name: str, value: str
) -> None:
    body = assert_problem(producer.get(AUDIT, **{name: value}), 400, "bad-query-parameter")
    assert body["errors"][0]["field"] == name


def test_another_tenants_entries_never_appear(
    producer: Producer, other_producer: Producer
) -> None:
    theirs = other_producer.publish()["id"]
    other_producer.post(example_body(), **{"X-Request-ID": "shared-id"})
    producer.post(example_body(idempotency_key="mine"), **{"X-Request-ID": "shared-id"})
    assert entries(producer, receipt_id=theirs) == []
    mine = entries(producer)
    assert mine and {e["key_prefix"] for e in mine} == {prefix(producer.key)}
    assert len(entries(producer, request_id="shared-id")) == 1
    # Their cursor is only a position: it still shows none of theirs.
    other_page = other_producer.get(AUDIT, limit=1).json()
    assert other_page["next_cursor"]
    page = producer.get(AUDIT, cursor=other_page["next_cursor"]).json()["entries"]
    assert {e["key_prefix"] for e in page} <= {prefix(producer.key)}


def test_a_receipts_cursor_is_not_an_audit_cursor(producer: Producer) -> None:
    producer.publish(idempotency_key="a")
    producer.publish(idempotency_key="b")
    cursor = producer.get("/api/receipts", limit=1).json()["next_cursor"]
    assert_problem(producer.get(AUDIT, cursor=cursor), 400, "bad-query-parameter")


def test_the_list_route_runs_a_fixed_number_of_queries(producer: Producer) -> None:
    counts = []
    for size in (1, 30):
        for i in range(size):
            producer.publish(idempotency_key=f"{size}-{i}")
        with CaptureQueriesContext(connection) as queries:
            assert len(entries(producer, limit=200)) >= size
        # Transaction control and the tenant's SET LOCAL (row-level security, on PostgreSQL)
        # aside: the key (1), the page (1), the request's own entry (1), whatever its size.
        counts.append(len([q for q in queries if not q["sql"].lstrip().upper().startswith(
            ("SAVEPOINT", "RELEASE SAVEPOINT", "SET ", "SELECT SET_CONFIG"))]))
    assert counts == [3, 3], [q["sql"] for q in queries]


def test_an_ingest_writes_its_entry_in_one_insert_and_no_extra_select(
    producer: Producer,
) -> None:
    producer.publish(idempotency_key="warm")
    with CaptureQueriesContext(connection) as queries:
        producer.publish(idempotency_key="measured")
    audit = [q["sql"] for q in queries if "audit_" in q["sql"]]
    assert len(audit) == 1 and audit[0].lstrip().upper().startswith("INSERT"), audit


# --- append-only --------------------------------------------------------------------------


@pytest.fixture
def logged(producer: Producer) -> list[AuditEntry]:
    producer.publish()
    producer.get("/api/receipts")
    return list(AuditEntry.objects.order_by("pk"))


def snapshot() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM audit_auditentry ORDER BY id")
        return list(cursor.fetchall())


_NAMES = ("id, at, request_id, tenant_id, key_prefix, method, route, status, problem_type, "
          "receipt_ids, duration_ms")
_COPY = f"({_NAMES}) SELECT {_NAMES} FROM audit_auditentry"

# name: (the vendors that have the statement, the statement)
STATEMENTS = {
    "update": ({"sqlite", "postgresql"}, "UPDATE audit_auditentry SET status = 200"),
    "delete": ({"sqlite", "postgresql"}, "DELETE FROM audit_auditentry"),
    "upsert": ({"sqlite", "postgresql"},
               f"INSERT INTO audit_auditentry {_COPY} WHERE id = (SELECT MIN(id) FROM "
               "audit_auditentry) ON CONFLICT (id) DO UPDATE SET status = 299"),
    "insert or replace": ({"sqlite"}, f"INSERT OR REPLACE INTO audit_auditentry {_COPY}"),
    "replace into": ({"sqlite"}, f"REPLACE INTO audit_auditentry {_COPY}"),
    "update or replace": ({"sqlite"}, "UPDATE OR REPLACE audit_auditentry SET id = 1"),
    "truncate": ({"postgresql"}, "TRUNCATE audit_auditentry"),
    "merge delete": ({"postgresql"}, "MERGE INTO audit_auditentry AS t USING (SELECT 1) AS s "
                     "ON true WHEN MATCHED THEN DELETE"),
}


@pytest.mark.parametrize("statement", STATEMENTS)
def test_the_database_refuses_to_change_or_remove_an_entry(
    logged: list[AuditEntry], statement: str
) -> None:
    vendors, sql = STATEMENTS[statement]
    if connection.vendor not in vendors:
        pytest.skip(f"{connection.vendor} has no {statement.upper()}")
    before = snapshot()
    assert len(before) == 2
    if statement == "truncate":
        with connection.cursor() as cursor:
            # Run the deferred foreign-key checks now, or PostgreSQL refuses the TRUNCATE
            # for pending trigger events before the trigger gets to speak.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    with pytest.raises(Error, match="append-only"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute(sql)
    assert snapshot() == before


def test_the_orm_cannot_change_or_delete_an_entry_even_an_old_one(
    logged: list[AuditEntry],
) -> None:
    old = logged[0]
    with pytest.raises(Error), transaction.atomic():
        AuditEntry.objects.filter(pk=old.pk).update(status=200)
    ancient = AuditEntry.objects.create(**{**_fields(old), "at": timezone.now()
                                           - timedelta(days=4000)})
    with pytest.raises(Error, match="append-only"), transaction.atomic():
        ancient.delete()
    assert AuditEntry.objects.filter(pk=ancient.pk).exists()


def _fields(entry: AuditEntry) -> dict[str, Any]:
    return {f.attname: getattr(entry, f.attname) for f in AuditEntry._meta.concrete_fields
            if f.attname != "id"}


def test_a_permit_cannot_be_forged_reused_changed_or_removed(logged: list[AuditEntry]) -> None:
    now = timezone.now()
    recent = AuditEntry.objects.create(**{**_fields(logged[0]), "at": now - timedelta(hours=2)})
    # A cutoff less than a day old would reach the latest entries: refused.
    with pytest.raises(Error, match="prune"), transaction.atomic():
        PrunePermit.objects.create(cutoff=now - timedelta(hours=1), issued_at=now)
    # Written closed, or with a count: refused.
    with pytest.raises(Error, match="prune"), transaction.atomic():
        PrunePermit.objects.create(cutoff=now - timedelta(days=2), issued_at=now, closed_at=now,
                                   removed=0)
    call_command("pruneauditlog", stdout=open("/dev/null", "w"))  # noqa: SIM115
    permit = PrunePermit.objects.get()
    assert permit.closed_at is not None and permit.removed == 0
    # A closed permit lets nothing go, and cannot be reopened, changed or deleted.
    ancient = AuditEntry.objects.create(**{**_fields(logged[0]), "at": now - timedelta(days=999)})
    for attempt in (
        lambda: AuditEntry.objects.filter(pk=ancient.pk).delete(),
        lambda: PrunePermit.objects.filter(pk=permit.pk).update(closed_at=None),
        lambda: PrunePermit.objects.filter(pk=permit.pk).update(cutoff=now),
        lambda: PrunePermit.objects.filter(pk=permit.pk).delete(),
    ):
        with pytest.raises(Error), transaction.atomic():
            attempt()
    # An open permit (in a transaction of its own) still reaches only the older entries.
    with transaction.atomic():
        PrunePermit.objects.create(cutoff=now - timedelta(days=2), issued_at=now)
        with pytest.raises(Error, match="append-only"), transaction.atomic():
            AuditEntry.objects.filter(pk=recent.pk).delete()
        transaction.set_rollback(True)
    assert AuditEntry.objects.filter(pk__in=[recent.pk, ancient.pk]).count() == 2


def test_only_the_prune_command_writes_a_permit() -> None:
    # The database lets an entry go only against a permit; the site's code writes none.
    writers = []
    for path in (REPO / "receiptsite").rglob("*.py"):
        if "PrunePermit" in path.read_text() and "migrations" not in path.parts:
            writers.append(path.relative_to(REPO).as_posix())
    assert sorted(writers) == ["receiptsite/audit/admin.py",
                               "receiptsite/audit/management/commands/pruneauditlog.py",
                               "receiptsite/audit/models.py"]
    assert "create(" not in (REPO / "receiptsite/audit/admin.py").read_text()


# --- retention ------------------------------------------------------------------------------


def test_pruneauditlog_removes_only_the_entries_older_than_audit_log_days(
    logged: list[AuditEntry], settings: Any, capsys: Any
) -> None:
    settings.AUDIT_LOG_DAYS = 30
    now = timezone.now()
    template = _fields(logged[0])
    old = [AuditEntry.objects.create(**{**template, "at": now - timedelta(days=d)})
           for d in (31, 400)]
    kept = AuditEntry.objects.create(**{**template, "at": now - timedelta(days=29)})
    call_command("pruneauditlog")
    assert "Removed 2 API audit-log entries" in capsys.readouterr().out
    assert not AuditEntry.objects.filter(pk__in=[e.pk for e in old]).exists()
    assert AuditEntry.objects.filter(pk__in=[kept.pk, *(e.pk for e in logged)]).count() == 3
    permit = PrunePermit.objects.get()
    assert permit.removed == 2 and permit.closed_at is not None
    assert abs((permit.cutoff - (now - timedelta(days=30))).total_seconds()) < 60
    call_command("pruneauditlog")
    assert "Removed 0" in capsys.readouterr().out
    assert PrunePermit.objects.count() == 2


def test_audit_log_days_is_parsed_once_with_a_default() -> None:
    assert audit_log_days("") == 400
    assert audit_log_days(" 30 ") == 30
    for bad in ("0", "-1", "1.5", "forever", "36501", "٣"):
        with pytest.raises(ConfigurationError, match="AUDIT_LOG_DAYS"):
            audit_log_days(bad)


@pytest.mark.parametrize("value", ["forever", "0"])
def test_a_malformed_audit_log_days_stops_the_site_with_one_line(
    tmp_path: Path, value: str
) -> None:
    from receiptsite.integrity.keys import generate_private_key_pem

    (tmp_path / "signing-key.pem").write_bytes(generate_private_key_pem())
    done = subprocess.run(
        [str(PYTHON), "manage.py", "check"], cwd=REPO,
        env=environment(tmp_path, AUDIT_LOG_DAYS=value), capture_output=True, text=True,
        timeout=60,
    )
    assert_one_line(done, "AUDIT_LOG_DAYS", f"not {value!r}")


# --- the admin --------------------------------------------------------------------------------


@pytest.fixture
def auditor(db: None) -> User:
    user = User.objects.create_user("auditor", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="Auditors"))
    return user


def test_auditors_see_filter_and_jump_between_a_receipt_and_its_request(
    client: Client, producer: Producer, auditor: User
) -> None:
    receipt_id = producer.post(example_body(), **{"X-Request-ID": "stored-it"}).json()["id"]
    producer.get(f"/api/receipts/{receipt_id}")
    entry = AuditEntry.objects.get(request_id="stored-it")
    client.force_login(auditor)
    changelist = "/admin/audit/auditentry/"
    assert client.get(changelist).status_code == 200
    found = client.get(changelist, {"q": receipt_id}).context["cl"].result_list
    assert len(found) == 2  # the request that stored it and the one that read it
    assert [e.pk for e in client.get(changelist, {"q": "stored-it"}).context["cl"].result_list] \
        == [entry.pk]
    assert client.get(changelist, {"status__exact": "201"}).status_code == 200
    receipt = Receipt.objects.get(public_id=receipt_id)
    page = client.get(f"/admin/receipts/receipt/{receipt.pk}/change/").content.decode()
    assert f'href="/admin/audit/auditentry/{entry.pk}/change/"' in page
    back = client.get(f"/admin/audit/auditentry/{entry.pk}/change/").content.decode()
    assert f'href="/admin/receipts/receipt/{receipt.pk}/change/"' in back
    assert "Save" not in back
    assert client.get(f"{changelist}add/").status_code == 403
    response = client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


# --- written by hand (receiptsite/lib/rows.py), read back as the ORM would have stored it -------


def _entry(tenant: Tenant, request_id: str) -> AuditEntry:
    return AuditEntry(
        at=timezone.now(), request_id=request_id, tenant=tenant, key_prefix="rk_0123456789ab",
        method="POST", route="POST /api/receipts", status=201, problem_type=None,
        receipt_ids=[str(uuid.uuid4()), str(uuid.uuid4())], duration_ms=17,
    )  # fmt: skip


def test_an_inserted_entry_reads_back_as_the_orm_would_have_stored_it(db: None) -> None:
    tenant = Tenant.objects.create(slug="rows", name="Rows")
    by_orm, by_hand = _entry(tenant, "by-orm"), _entry(tenant, "by-hand")
    by_hand.at, by_hand.receipt_ids = by_orm.at, by_orm.receipt_ids
    by_orm.save(force_insert=True)
    with CaptureQueriesContext(connection) as queries:
        AuditEntry.objects.insert([by_hand])
    assert len(queries) == 1 and queries[0]["sql"].startswith("INSERT INTO")
    assert by_hand.pk is not None and by_hand.pk != by_orm.pk
    assert not by_hand._state.adding
    columns = [f.attname for f in AuditEntry._meta.concrete_fields if not f.primary_key]
    stored = {e.request_id: e for e in AuditEntry.objects.filter(pk__in=[by_orm.pk, by_hand.pk])}
    orm_row = {c: getattr(stored["by-orm"], c) for c in columns if c != "request_id"}
    hand_row = {c: getattr(stored["by-hand"], c) for c in columns if c != "request_id"}
    assert hand_row == orm_row
    assert stored["by-hand"].receipt_ids == by_orm.receipt_ids  # a JSON list, not its repr
    # ... stored as the `holds` lookup reads it (a JSON array; jsonb on PostgreSQL).
    held = AuditEntry.objects.filter(receipt_ids__holds=by_orm.receipt_ids[1])
    assert sorted(held.values_list("pk", flat=True)) == sorted([by_orm.pk, by_hand.pk])


def test_insert_saves_through_the_orm_when_a_receiver_listens_for_the_save(db: None) -> None:
    # A pre_save or post_save receiver of the model would never hear of a hand-written
    # INSERT: insert() then saves each object through the ORM, which sends both.
    tenant = Tenant.objects.create(slug="heard", name="Heard")
    heard: list[tuple[str, str]] = []

    def listen(sender: Any, instance: AuditEntry, **kwargs: Any) -> None:
        heard.append((kwargs["signal"] is pre_save and "pre" or "post", instance.request_id))

    pre_save.connect(listen, sender=AuditEntry)
    post_save.connect(listen, sender=AuditEntry)
    try:
        entry = _entry(tenant, "heard-1")
        AuditEntry.objects.insert([entry])
    finally:
        pre_save.disconnect(listen, sender=AuditEntry)
        post_save.disconnect(listen, sender=AuditEntry)
    assert heard == [("pre", "heard-1"), ("post", "heard-1")]
    assert AuditEntry.objects.get(pk=entry.pk).request_id == "heard-1"


def test_an_entry_with_an_expression_for_a_value_is_saved_by_the_orm(db: None) -> None:
    # Now() is SQL the ORM compiles; as a parameter no driver could send it.
    from django.db.models.functions import Now

    tenant = Tenant.objects.create(slug="now", name="Now")
    before = timezone.now()
    entry = _entry(tenant, "by-expression")
    entry.at = Now()
    AuditEntry.objects.insert([entry])
    stored = AuditEntry.objects.get(pk=entry.pk)
    assert stored.request_id == "by-expression"
    assert stored.at >= before - timedelta(seconds=5)


# --- on a live site: SQLite, or PostgreSQL with DATABASE_URL ----------------------------------




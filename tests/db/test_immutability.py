"""The database itself refuses to change or remove receipts, the log and decisions: every
statement that could (UPDATE, DELETE, TRUNCATE, MERGE, an insert that replaces a row, an
upsert, a duplicate insert) is refused, and the table is exactly as it was. And it stamps when
a checkpoint or an appended signature was signed with its own clock, whatever the INSERT says
(migrations/0013)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import Error, connection, transaction

from receiptsite.receipts.models import (
    AppendedSignature,
    Checkpoint,
    LogEntry,
    LogNode,
    Receipt,
    ReviewDecision,
    SignedCheckpoint,
)
from receiptsite.review.services import decision_record
from tests.conftest import Producer

pytestmark = pytest.mark.db

no_replace = importlib.import_module("receiptsite.receipts.migrations.0005_no_replacing_insert")

TABLES = [
    "receipts_receipt",
    "receipts_logentry",
    "receipts_lognode",
    "receipts_checkpoint",
    "receipts_signedcheckpoint",
    "receipts_reviewdecision",
]

# Each table's primary key, and one column a statement tries to give another value (an SQL
# expression both databases read): a changed row would show in the table's snapshot.
KEY = {"receipts_logentry": "index", "receipts_lognode": "key",
       "receipts_checkpoint": "tree_size"}
CHANGE = {
    "receipts_receipt": ("workflow_id", "'rewritten'"),
    "receipts_logentry": ("receipt_id", "(SELECT MAX(receipt_id) FROM receipts_logentry)"),
    "receipts_lognode": ("hash", "(SELECT hash FROM receipts_lognode ORDER BY key DESC LIMIT 1)"),
    "receipts_checkpoint": ("origin", "'forged'"),
    "receipts_signedcheckpoint": ("note", "'forged'"),
    "receipts_reviewdecision": ("conclusion", "'rejected'"),
}
APPEND_ONLY = "append-only"
DUPLICATE = "append-only|duplicate key|UNIQUE constraint"


@pytest.fixture
def stored(producer: Producer) -> Receipt:
    """Two receipts (so two leaves, three nodes, two checkpoints) and two decisions, the
    second correcting the first: every table holds rows, every unique key a value."""
    answer = producer.publish()
    producer.publish(idempotency_key="wf-7f3a/audit-site/end/3")
    receipt = Receipt.objects.get(public_id=answer["id"])
    reviewer = User.objects.create_user("auditor", is_staff=True)
    first = decision_record(receipt=receipt, reviewer=reviewer, conclusion="accepted")
    decision_record(receipt=receipt, reviewer=reviewer, conclusion="rejected", supersedes=first)
    return receipt


def key(table: str) -> str:
    return KEY.get(table, "id")


def snapshot(table: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT * FROM {table} ORDER BY "{key(table)}"')
        rows = cursor.fetchall()
    # PostgreSQL hands back bytea as memoryview, which compares by identity.
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]


def columns(table: str) -> list[str]:
    with connection.cursor() as cursor:
        return [c.name for c in connection.introspection.get_table_description(cursor, table)]


def copy_of_first_row(table: str, changes: dict[str, str] | None = None) -> str:
    """`(columns) SELECT ...`: the table's first row, with `changes` (column: SQL expression)
    and its CHANGE applied: what an insert over that row would write."""
    column, value = CHANGE[table]
    changes = {column: value, **(changes or {})}
    names = columns(table)
    first = f'(SELECT MIN("{key(table)}") FROM {table})'
    listed = ", ".join(f'"{n}"' for n in names)
    values = ", ".join(changes.get(n, f'"{n}"') for n in names)
    return f'({listed}) SELECT {values} FROM {table} WHERE "{key(table)}" = {first}'


def upsert(table: str) -> str:
    column, _ = CHANGE[table]
    return (f"INSERT INTO {table} {copy_of_first_row(table)} "
            f'ON CONFLICT ("{key(table)}") DO UPDATE SET "{column}" = excluded."{column}"')


def merge(table: str, action: str) -> str:
    column, value = CHANGE[table]
    first = f'(SELECT MIN("{key(table)}") FROM {table})'
    then = f'UPDATE SET "{column}" = {value}' if action == "update" else "DELETE"
    return (f'MERGE INTO {table} AS t USING (SELECT {first} AS k) AS s ON t."{key(table)}" = s.k '
            f"WHEN MATCHED THEN {then}")


# name: (the vendors that have the statement, the statement, what the refusal says)
STATEMENTS: dict[str, tuple[set[str], Callable[[str], str], str]] = {
    "update": ({"sqlite", "postgresql"},
               lambda t: f'UPDATE {t} SET "{CHANGE[t][0]}" = {CHANGE[t][1]}', APPEND_ONLY),
    "update or replace": ({"sqlite"},
                          lambda t: f'UPDATE OR REPLACE {t} SET "{CHANGE[t][0]}" = {CHANGE[t][1]}',
                          APPEND_ONLY),
    "delete": ({"sqlite", "postgresql"}, lambda t: f"DELETE FROM {t}", APPEND_ONLY),
    "truncate": ({"postgresql"}, lambda t: f"TRUNCATE {t} CASCADE", APPEND_ONLY),
    "merge update": ({"postgresql"}, lambda t: merge(t, "update"), APPEND_ONLY),
    "merge delete": ({"postgresql"}, lambda t: merge(t, "delete"), APPEND_ONLY),
    "insert or replace": ({"sqlite"},
                          lambda t: f"INSERT OR REPLACE INTO {t} {copy_of_first_row(t)}",
                          APPEND_ONLY),
    "replace into": ({"sqlite"}, lambda t: f"REPLACE INTO {t} {copy_of_first_row(t)}",
                     APPEND_ONLY),
    "insert on conflict do update": ({"sqlite", "postgresql"}, upsert, APPEND_ONLY),
    "duplicate insert": ({"sqlite", "postgresql"},
                         lambda t: f"INSERT INTO {t} {copy_of_first_row(t)}", DUPLICATE),
}


def assert_refused(table: str, sql: str, match: str) -> None:
    before = snapshot(table)
    assert before, f"{table} holds no row to protect"
    with pytest.raises(Error, match=match), transaction.atomic(), connection.cursor() as c:
        c.execute(sql)
    assert snapshot(table) == before


@pytest.mark.parametrize("statement", STATEMENTS)
@pytest.mark.parametrize("table", TABLES)
def test_the_database_refuses_every_statement_that_changes_or_removes_a_row(
    stored: Receipt, table: str, statement: str
) -> None:
    vendors, sql, match = STATEMENTS[statement]
    if connection.vendor not in vendors:
        pytest.skip(f"{connection.vendor} has no {statement.upper()}")
    if statement == "truncate":
        with connection.cursor() as cursor:
            # Run the deferred foreign-key checks of the inserts now, or PostgreSQL refuses
            # the TRUNCATE for pending trigger events before our own trigger gets to speak.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert_refused(table, sql(table), match)


FRESH_ID = "(SELECT MAX(id) + 1000 FROM {table})"

# Inserts that meet the first row on one unique key only (fresh values in the other keys):
# SQLite's REPLACE would still remove it.
ONE_KEY_ONLY = {
    "receipts_receipt public_id": ("receipts_receipt", {
        "id": FRESH_ID, "idempotency_key": "'fresh-key'"}),
    "receipts_receipt tenant and idempotency key": ("receipts_receipt", {
        "id": FRESH_ID, "public_id": "'ffffffffffffffffffffffffffffffff'"}),
    "receipts_logentry receipt": ("receipts_logentry", {
        "index": '(SELECT MAX("index") + 1000 FROM receipts_logentry)',
        "receipt_id": "receipt_id"}),
}


@pytest.mark.parametrize("case", ONE_KEY_ONLY)
def test_sqlite_refuses_a_replace_that_meets_a_row_on_any_unique_key(
    stored: Receipt, case: str
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL has no replacing insert")
    table, changes = ONE_KEY_ONLY[case]
    changes = {name: value.format(table=table) for name, value in changes.items()}
    assert_refused(table, f"INSERT OR REPLACE INTO {table} {copy_of_first_row(table, changes)}",
                   APPEND_ONLY)


def test_sqlite_refuses_a_replace_of_a_correcting_decision(stored: Receipt) -> None:
    # The later decision is the one whose `supersedes` is set: a new row naming the same
    # superseded decision would replace it.
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL has no replacing insert")
    table = "receipts_reviewdecision"
    names = columns(table)
    values = ", ".join({"id": FRESH_ID.format(table=table)}.get(n, f'"{n}"') for n in names)
    listed = ", ".join(f'"{n}"' for n in names)
    assert_refused(table, f"INSERT OR REPLACE INTO {table} ({listed}) SELECT {values} "
                          f"FROM {table} WHERE supersedes_id IS NOT NULL", APPEND_ONLY)


@pytest.mark.parametrize("table", TABLES)
def test_the_replace_trigger_knows_every_unique_key_of_its_table(db: None, table: str) -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    keys = {frozenset(c["columns"]) for c in constraints.values()
            if c["unique"] or c["primary_key"]}
    assert keys == {frozenset(k) for k in no_replace.UNIQUE_KEYS[table]}


def test_inserts_of_new_rows_still_work_and_the_orm_cannot_change_a_receipt(
    stored: Receipt,
) -> None:
    assert Receipt.objects.count() == LogEntry.objects.count() == 2
    assert LogNode.objects.count() == 3 and Checkpoint.objects.count() == 2
    assert ReviewDecision.objects.count() == 2
    with pytest.raises(Error), transaction.atomic():
        Receipt.objects.filter(pk=stored.pk).update(workflow_id="rewritten")
    with pytest.raises(Error), transaction.atomic():
        stored.delete()
    assert Receipt.objects.get(pk=stored.pk).workflow_id == "wf-7f3a"
    assert Receipt.objects.count() == 2


# --- when it was signed: the database's clock -----------------------------------------------

# Each table whose `signed_at` the database stamps: its model, and the other columns of a new
# row as the site role could insert it (SQL both databases read; %s: a 64-byte signature).
STAMPED: dict[str, tuple[Any, dict[str, str]]] = {
    "receipts_signedcheckpoint": (SignedCheckpoint, {
        "tree_size": "(SELECT MAX(tree_size) FROM receipts_signedcheckpoint)",
        "note": "(SELECT note FROM receipts_signedcheckpoint ORDER BY id DESC LIMIT 1)",
        "signing_key_id": "(SELECT MAX(id) FROM receipts_signingkey)"}),
    "receipts_appendedsignature": (AppendedSignature, {
        "receipt_id": "(SELECT MIN(id) FROM receipts_receipt)",
        "signing_key_id": "(SELECT MAX(id) FROM receipts_signingkey)",
        "signature": "%s",
        "evidence_id": "(SELECT MAX(id) FROM receipts_signedcheckpoint)"}),
}  # fmt: skip
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


def database_clock() -> datetime:
    """The database's own clock, now (on SQLite, to the millisecond)."""
    sql = ("SELECT clock_timestamp()" if connection.vendor == "postgresql"
           else "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
    with connection.cursor() as cursor:
        cursor.execute(sql)
        (value,) = cursor.fetchone()
    return value if isinstance(value, datetime) else datetime.fromisoformat(value + "+00:00")


def insert(table: str, signed_at: datetime | None) -> None:
    """A raw INSERT of a new row, as the site role could run it through the connection; with
    `signed_at`, the row says when it was signed."""
    values = dict(STAMPED[table][1])
    params: list[Any] = [bytes(64)] if "%s" in values.values() else []
    if signed_at is not None:
        values["signed_at"] = "%s"
        params.append(connection.ops.adapt_datetimefield_value(signed_at))
    listed = ", ".join(f'"{name}"' for name in values)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({listed}) SELECT {', '.join(values.values())}",
                       params)


@pytest.mark.parametrize("table", STAMPED)
def test_an_insert_that_says_when_it_was_signed_is_stamped_by_the_database_or_refused(
    stored: Receipt, table: str
) -> None:
    model = STAMPED[table][0]
    before, clock = snapshot(table), database_clock()
    if connection.vendor == "sqlite":
        # A trigger cannot change the row it fires for: the database refuses the row.
        with pytest.raises(Error, match="the database stamps the time"), transaction.atomic():
            insert(table, LONG_AGO)
        assert snapshot(table) == before
    else:
        insert(table, LONG_AGO)
        newest = model.objects.latest("id")
        assert newest.signed_at >= clock
        assert len(snapshot(table)) == len(before) + 1


@pytest.mark.parametrize("table", STAMPED)
def test_an_insert_that_names_no_time_gets_the_databases_clock(
    stored: Receipt, table: str
) -> None:
    model = STAMPED[table][0]
    clock = database_clock()
    insert(table, None)
    newest = model.objects.latest("id")
    assert clock <= newest.signed_at <= database_clock()

"""The database itself refuses to change or remove receipts, the log and decisions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import Error, connection, transaction

from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode, Receipt, ReviewDecision
from receiptsite.receipts.services import decision_record
from tests.conftest import Producer

TABLES = [
    "receipts_receipt",
    "receipts_logentry",
    "receipts_lognode",
    "receipts_checkpoint",
    "receipts_signedcheckpoint",
    "receipts_reviewdecision",
]


@pytest.fixture
def stored(producer: Producer) -> Receipt:
    answer = producer.publish()
    receipt = Receipt.objects.get(public_id=answer["id"])
    reviewer = User.objects.create_user("auditor", is_staff=True)
    decision_record(receipt=receipt, reviewer=reviewer, conclusion="accepted")
    return receipt


def refused(sql: str) -> None:
    with pytest.raises(Error, match="append-only"), transaction.atomic(), connection.cursor() as c:
        c.execute(sql)


@pytest.mark.parametrize("table", TABLES)
def test_the_database_refuses_an_update(stored: Receipt, table: str) -> None:
    column = {"receipts_lognode": "key", "receipts_checkpoint": "tree_size",
              "receipts_logentry": "\"index\""}.get(table, "id")
    refused(f"UPDATE {table} SET {column} = {column}")


@pytest.mark.parametrize("table", TABLES)
def test_the_database_refuses_a_delete(stored: Receipt, table: str) -> None:
    refused(f"DELETE FROM {table}")


@pytest.mark.parametrize("table", TABLES)
def test_postgresql_refuses_a_truncate(stored: Receipt, table: str) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no TRUNCATE; its DELETE trigger covers it")
    with connection.cursor() as cursor:
        # Run the deferred foreign-key checks of the inserts now, or PostgreSQL refuses the
        # TRUNCATE for pending trigger events before our own trigger gets to speak.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    refused(f"TRUNCATE {table} CASCADE")


def test_the_orm_cannot_change_a_receipt_either(stored: Receipt) -> None:
    with pytest.raises(Error), transaction.atomic():
        Receipt.objects.filter(pk=stored.pk).update(workflow_id="rewritten")
    with pytest.raises(Error), transaction.atomic():
        stored.delete()
    assert Receipt.objects.get(pk=stored.pk).workflow_id == "wf-7f3a"
    assert LogEntry.objects.count() == LogNode.objects.count() == Checkpoint.objects.count() == 1
    assert ReviewDecision.objects.count() == 1

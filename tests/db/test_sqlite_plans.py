"""How SQLite reads the receipts the hot statements name: ReceiptQuerySet.named (a page's
linked receipts, a post's links), stored_under (ingest's) and the verify route's. SQLite keeps no
statistics unless asked (ANALYZE), and without them it read `tenant_id = ? AND public_id IN
(...)` through the tenant's index, every receipt of the tenant (30 ms against 0.2 ms at 20,000
receipts). The suite's database has no statistics either: each lookup must use its own index.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import QuerySet

from receiptsite.pages.presentation import linked_rows
from receiptsite.receipts.models import Receipt, Tenant
from tests.conftest import Producer

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own planner"),
]


def plan(queryset: QuerySet[Receipt]) -> list[str]:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return [str(row[3]) for row in cursor.fetchall()]


def reads_of_receipts(steps: list[str]) -> list[str]:
    return [step for step in steps if " receipts_receipt " in f" {step} "]


def test_linked_receipts_and_links_are_read_by_their_ids_and_keys(
    producer: Producer, tenant: Tenant
) -> None:
    ids = [producer.publish(idempotency_key=f"r-{n}")["id"] for n in range(12)]
    parent = Receipt.objects.get(public_id=ids[0])
    by_id = reads_of_receipts(plan(linked_rows(parent, ids[1:4])))
    assert by_id and all("(public_id=?)" in step for step in by_id), by_id
    both = reads_of_receipts(
        plan(Receipt.objects.named(tenant.pk, ids=ids[1:3], keys=["r-4", "r-5"]))
    )
    assert any("(public_id=?)" in step for step in both), both
    assert any("(tenant_id=? AND idempotency_key=?)" in step for step in both), both
    assert not any("receipt_tenant_recorded" in step or "SCAN" in step for step in both), both
    # And they find what they name, of this tenant only.
    found = Receipt.objects.named(tenant.pk, ids=ids[1:3], keys=["r-4", "r-5"])
    named = {str(public_id) for public_id in found.values_list("public_id", flat=True)}
    assert named == {*ids[1:3], ids[4], ids[5]}
    assert not Receipt.objects.named(tenant.pk + 1000, ids=ids[1:3], keys=["r-4"]).exists()


def test_the_receipts_under_idempotency_keys_are_read_by_their_indexes(
    producer: Producer, tenant: Tenant
) -> None:
    """Ingest's look-up under the log's lock (ReceiptQuerySet.stored_under): each key through
    the (tenant, idempotency key) index, each withdrawal's hash through its own, each row by
    its primary key; never a scan of the tenant's receipts."""
    from receiptsite.receipts.models import _stored_under_sql

    for n in range(12):
        producer.publish(idempotency_key=f"k-{n}")
    keys, hashes = ["k-3", "k-7"], ["a" * 64, "b" * 64]
    sql = _stored_under_sql("sqlite").format(keys="%s, %s", hashes="%s, %s")
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", [tenant.pk, *keys, tenant.pk, *hashes,
                                                     tenant.pk])
        steps = [str(row[3]) for row in cursor.fetchall()]
    assert any("(tenant_id=? AND idempotency_key=?)" in step for step in steps), steps
    assert any("(tenant_id=? AND idempotency_key_hash=?)" in step for step in steps), steps
    assert any("SEARCH r USING INTEGER PRIMARY KEY" in step for step in steps), steps
    assert not any(step.startswith("SCAN r") or "SCAN receipts_receipt" in step
                   for step in steps), steps
    found = Receipt.objects.stored_under(tenant.pk, keys, hashes)
    assert sorted(receipt.idempotency_key or "" for receipt, _ in found) == keys


def test_the_verify_routes_statement_reads_the_receipt_by_its_public_id(
    producer: Producer,
) -> None:
    """ledger/verification.verifiable: the receipt and the log's latest checkpoint in one
    statement, the receipt found through its public id's index however the join is planned
    (a scan would read every receipt on every verify)."""
    from receiptsite.ledger import log
    from receiptsite.ledger.verification import verifiable

    ids = [producer.publish(idempotency_key=f"v-{n}")["id"] for n in range(12)]
    sql, params = Receipt.objects.verifiable_statement(ids[5])
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN QUERY PLAN {log.published_statement(sql)}", [0, "", *params]
        )
        steps = [str(row[3]) for row in cursor.fetchall()]
    # The receipts table is `r` in the statement.
    reads = [step for step in steps if step.split()[1:2] == ["r"]]
    assert reads and all("(public_id=?)" in step for step in reads), steps
    assert not any(step.startswith("SCAN") and step.split()[1] in ("r", "receipts_receipt")
                   for step in steps), steps
    found = verifiable(ids[5])
    assert found is not None and found.uuid == ids[5]

"""Ingest makes and signs a receipt before it waits for the log's append lock (validation, links,
redaction, the two RFC 8785 serialisations, the signature), so that the lock is held only to
store it. What changes while a request waits must still decide what it stores, as if all of it
had been done under the lock: a key compromised elsewhere meanwhile signs nothing that is
stored, and an idempotency key another request spent meanwhile is answered as spent.

"Meanwhile" is the moment just before the lock is taken: the tests put what another process
would do there (log.lock_for_append, wrapped), on this process's own database connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from receiptsite.integrity import keys
from receiptsite.ledger import keyring, log
from receiptsite.receipts.models import ApiKey, Receipt
from receiptsite.receipts.services import receipt_ingest
from tests.conftest import Producer, example_body, mark_compromised

pytestmark = [pytest.mark.db, pytest.mark.usefixtures("own_key_file")]

BATCH = "/api/receipts/batch"


def meanwhile(monkeypatch: pytest.MonkeyPatch, happen: Any) -> list[int]:
    """Run `happen()` once, just before the next request takes the append lock; the list
    counts the locks taken after it."""
    real = log.lock_for_append
    taken: list[int] = []

    def lock_for_append() -> log.Head:
        if not taken:
            taken.append(0)
            happen()
        else:
            taken[0] += 1
        return real()

    monkeypatch.setattr(log, "lock_for_append", lock_for_append)
    return taken


def stored_meanwhile(
    monkeypatch: pytest.MonkeyPatch, **changes: Any
) -> tuple[dict[str, Receipt], list[int]]:
    """Another request stores a receipt under the key "b" (the example body with `changes`)
    just before the next request takes the append lock: the dict holds it then, as
    "receipt"; the list counts the locks taken after it (meanwhile)."""
    key = ApiKey.objects.get()
    spent: dict[str, Receipt] = {}

    def another_request() -> None:
        body = example_body(idempotency_key="b", **changes)
        spent["receipt"] = receipt_ingest(api_key=key, payload=body).receipt

    return spent, meanwhile(monkeypatch, another_request)


def compromised_elsewhere(settings: Any) -> tuple[str, str, Any]:
    """What `compromisekey` run by another process does: the active key marked compromised
    and a new key written in place of it in SIGNING_KEY_FILE, this process told nothing. The
    old kid, the new kid, and the change to make."""
    old = keyring.active_key().kid
    pem = keys.generate_private_key_pem()
    new = keys.jwk_thumbprint(keys.public_raw(keys.load_private_key_pem(pem)))

    def happen() -> None:
        Path(settings.SIGNING_KEY_FILE).write_bytes(pem)
        mark_compromised(old)

    return old, new, happen


def test_a_receipt_signed_by_a_key_compromised_while_it_waited_is_signed_again_by_the_new_key(
    producer: Producer, client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer.publish(idempotency_key="before")  # this process has recorded its key
    old, new, happen = compromised_elsewhere(settings)
    meanwhile(monkeypatch, happen)
    answer = producer.publish(idempotency_key="after")
    stored = Receipt.objects.select_related("signing_key").get(public_id=answer["id"])
    assert (stored.signing_key.kid, old != new) == (new, True)
    checked = client.get(f"/api/receipt/{answer['id']}/verify").json()
    assert checked["status"] == "valid" and checked["signature"]["key_id"] == new


def test_a_batch_signed_by_a_key_compromised_while_it_waited_is_made_again_by_the_new_key(
    producer: Producer, client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer.publish(idempotency_key="before")
    old, new, happen = compromised_elsewhere(settings)
    meanwhile(monkeypatch, happen)
    items = [example_body(idempotency_key="a"),
             example_body(idempotency_key="b", links={"parent_idempotency_key": "a"})]  # fmt: skip
    response = producer.post({"receipts": items}, path=BATCH)
    assert response.status_code == 200, response.content
    first, second = response.json()["results"]
    assert (first["status"], second["status"]) == (201, 201)
    for item in (first, second):
        stored = Receipt.objects.select_related("signing_key").get(public_id=item["id"])
        assert stored.signing_key.kid == new != old
        assert client.get(f"/api/receipt/{item['id']}/verify").json()["status"] == "valid"
    # The link names the receipt stored, not one made before the lock and thrown away.
    linked = Receipt.objects.get(public_id=second["id"])
    assert f'"parent_receipt_id":"{first["id"]}"' in bytes(linked.canonical_bytes).decode()


def test_a_key_another_request_spent_while_a_batch_waited_is_answered_as_spent(
    producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer.publish(idempotency_key="before")
    # The same key, another body.
    spent, taken = stored_meanwhile(monkeypatch, workflow_id="wf-other")
    items = [example_body(idempotency_key=k) for k in ("a", "b", "c")]
    response = producer.post({"receipts": items}, path=BATCH)
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [item["status"] for item in results] == [201, 422, 201], results
    assert results[1]["type"].endswith("/idempotency-key-reused")
    assert results[1]["id"] == str(spent["receipt"].public_id)
    assert taken == [1]  # the other request's lock, then the batch's: decided under it
    assert Receipt.objects.filter(idempotency_key="b").count() == 1
    assert set(Receipt.objects.values_list("idempotency_key", flat=True)) == {
        "before", "a", "b", "c"
    }


def test_a_batch_replays_what_another_request_stored_with_the_same_body_meanwhile(
    producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer.publish(idempotency_key="before")
    spent, _ = stored_meanwhile(monkeypatch)  # the same key and body: the batch's item a retry
    items = [example_body(idempotency_key="a"),
             example_body(idempotency_key="b"),
             example_body(idempotency_key="c", links={"parent_idempotency_key": "b"})]  # fmt: skip
    response = producer.post({"receipts": items}, path=BATCH)
    assert response.status_code == 200, response.content
    first, second, third = response.json()["results"]
    assert (first["status"], second["status"], third["status"]) == (201, 201, 201)
    assert second["replayed"] is True and second["id"] == str(spent["receipt"].public_id)
    stored = Receipt.objects.get(public_id=third["id"])
    assert f'"parent_receipt_id":"{second["id"]}"' in bytes(stored.canonical_bytes).decode()

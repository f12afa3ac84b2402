"""Group commit: single posts of one API key that wait for the append lock at once, in one
process, are stored in one transaction with one signed checkpoint, each answered as if it had
been posted alone, and none before that transaction has committed.

The tests make posts wait together as they do under load: just before the first post (the
group's leader) takes the log's append lock (log.lock_for_append, wrapped), other threads post
and join its group. They touch no database before their group is stored (each is made and
signed in its own thread, then waits), so they share this test's database connection's
transaction through the leader, which does all the storing on that connection. The HTTP side
(each post's audit entry, with its own request id, in the storing transaction) is tested
against a live gunicorn in tests/live/test_group_commit.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from receiptsite.ledger import log
from receiptsite.receipts import services
from receiptsite.receipts.models import ApiKey, LogEntry, Receipt, SignedCheckpoint
from receiptsite.receipts.services import (
    IdempotencyKeyReused,
    Ingested,
    receipt_ingest,
)
from tests.conftest import Producer, example_body, remember_a_tree_not_stored

pytestmark = [pytest.mark.db, pytest.mark.usefixtures("own_key_file")]


class Posts:
    """Posts made in threads of their own, by one API key; what each got."""

    def __init__(self, key: ApiKey) -> None:
        self.key = key
        self.threads: list[threading.Thread] = []
        self.got: dict[int, Ingested | BaseException] = {}

    def start(self, *bodies: dict[str, Any]) -> None:
        for body in bodies:
            n = len(self.threads)
            thread = threading.Thread(target=self._post, args=(n, body), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _post(self, n: int, body: dict[str, Any]) -> None:
        try:
            self.got[n] = receipt_ingest(api_key=self.key, payload=body)
        except BaseException as error:  # noqa: BLE001 - what the post got, for the test
            self.got[n] = error

    def joined(self) -> int:
        """How many posts the group forming for this key holds (0: none is forming)."""
        with services._forming_lock:
            group = services._forming.get(self.key.pk)
            return 0 if group is None else len(group.posts)

    def wait_joined(self, number: int) -> None:
        deadline = time.monotonic() + 10
        while self.joined() < number:
            assert time.monotonic() < deadline, f"{self.joined()} of {number} posts joined"
            time.sleep(0.005)

    def results(self) -> list[Ingested | BaseException]:
        for thread in self.threads:
            thread.join(10)
            assert not thread.is_alive(), "a post still waits for its group"
        return [self.got[n] for n in range(len(self.threads))]


def while_the_leader_waits(
    monkeypatch: pytest.MonkeyPatch, key: ApiKey, *bodies: dict[str, Any],
    then: Callable[[], None] = lambda: None,
) -> Posts:  # fmt: skip
    """Just before the next post takes the append lock, `bodies` are posted from threads of
    their own and join its group; then `then()` happens, and the lock is taken."""
    real = log.lock_for_append
    posts = Posts(key)

    def lock_for_append() -> log.Head:
        if not posts.threads:
            posts.start(*bodies)
            posts.wait_joined(1 + len(bodies))
            then()
        return real()

    monkeypatch.setattr(log, "lock_for_append", lock_for_append)
    return posts


@pytest.fixture
def key(producer: Producer) -> ApiKey:
    producer.publish(idempotency_key="first")  # this process has recorded its key
    return ApiKey.objects.select_related("tenant").get()


def test_posts_that_wait_together_are_stored_in_one_transaction_under_one_checkpoint(
    key: ApiKey, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoints, size = SignedCheckpoint.objects.count(), LogEntry.objects.count()
    others = while_the_leader_waits(
        monkeypatch, key, *[example_body(idempotency_key=f"k{n}") for n in range(5)]
    )
    leader = receipt_ingest(api_key=key, payload=example_body(idempotency_key="leader"))
    outcomes = [leader, *others.results()]
    assert all(isinstance(o, Ingested) and not o.replayed for o in outcomes), outcomes
    stored = [o.receipt for o in outcomes if isinstance(o, Ingested)]
    # One checkpoint for the six, where six posts alone sign six.
    assert SignedCheckpoint.objects.count() == checkpoints + 1
    assert LogEntry.objects.count() == size + 6
    # In the order they joined, the leader first (the others' order is their threads');
    # each answer has its own place in the log.
    assert stored[0].log_index == size
    assert sorted(r.log_index or 0 for r in stored) == list(range(size, size + 6))
    for receipt in stored:
        assert Receipt.objects.filter(public_id=receipt.uuid).exists()
        checked = client.get(f"/api/receipt/{receipt.uuid}/verify").json()
        assert (checked["status"], checked["log"]["tree_size"]) == ("valid", size + 6), checked
    assert others.joined() == 0  # the stored group takes no further post


def test_two_posts_of_one_group_with_one_idempotency_key_store_one_receipt(
    key: ApiKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = Receipt.objects.count()
    others = while_the_leader_waits(
        monkeypatch, key,
        example_body(idempotency_key="same"),  # the leader's request again: replayed
        example_body(idempotency_key="same", workflow_id="wf-other"),  # another: refused
    )  # fmt: skip
    leader = receipt_ingest(api_key=key, payload=example_body(idempotency_key="same"))
    again, other = others.results()
    assert isinstance(again, Ingested) and again.replayed
    assert again.receipt.uuid == leader.receipt.uuid and not leader.replayed
    assert isinstance(other, IdempotencyKeyReused) and other.receipt.uuid == leader.receipt.uuid
    assert Receipt.objects.count() == before + 1


def test_a_group_the_site_must_not_sign_stores_nothing_and_every_post_is_told(
    key: ApiKey, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log refuses (a tree remembered that the database does not hold) once the others
    have joined: the leader and each of them get the 503, and nothing of theirs is stored."""
    before = Receipt.objects.count()
    others = while_the_leader_waits(
        monkeypatch, key, example_body(), example_body(),
        then=lambda: remember_a_tree_not_stored(settings, size=1000),
    )  # fmt: skip
    with pytest.raises(log.LogRollback):
        receipt_ingest(api_key=key, payload=example_body())
    assert all(isinstance(got, log.LogRollback) for got in others.results()), others.got
    assert Receipt.objects.count() == before
    assert others.joined() == 0  # the failed group takes no further post

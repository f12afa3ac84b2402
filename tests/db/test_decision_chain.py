"""The auditors' record cannot be quietly rewritten: each review decision is signed (RFC 8785
bytes, Ed25519 by the site's active key) and chained to the one before it; `checkdecisions`,
the admin and the CSV export expose a decision changed, removed, reordered or slipped in.

The first part runs in the suite's database; the second drives a real gunicorn (tests/livesite.py)
over HTTP, tampering with its database through the documented maintenance path only (SQLite:
dropping and recreating the triggers; PostgreSQL: `session_replication_role = replica`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import importlib
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import Error, connection, transaction
from django.test import Client

from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes, is_canonical
from receiptsite.ledger import keyring
from receiptsite.receipts.models import DecisionLink, Receipt, ReviewDecision, SigningKey
from receiptsite.review.services import decision_record
from tests.conftest import Producer, mark_compromised

pytestmark = pytest.mark.db

migration = importlib.import_module("receiptsite.receipts.migrations.0011_decision_chain")

GUARDED = ("receipts_reviewdecision", "receipts_decisionlink")


@pytest.fixture
def receipt(producer: Producer) -> Receipt:
    return Receipt.objects.get(public_id=producer.publish()["id"])


@pytest.fixture
def three(receipt: Receipt, auditor: User) -> list[ReviewDecision]:
    """Three decisions: accepted, needs follow-up, and a correction of the second."""
    first = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    second = decision_record(
        receipt=receipt,
        reviewer=auditor,
        conclusion="needs_follow_up",
        follow_up="Ask about the e-mail",
    )
    third = decision_record(
        receipt=receipt, reviewer=auditor, conclusion="accepted", supersedes=second
    )
    return [first, second, third]


@contextmanager
def guard_lifted() -> Iterator[Any]:
    """The documented maintenance path, in the test's own transaction (rolled back after)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = replica")
        else:
            for table in GUARDED:
                cursor.execute(f"DROP TRIGGER {table}_no_update")
                cursor.execute(f"DROP TRIGGER {table}_no_delete")
        try:
            yield cursor
        finally:
            if connection.vendor == "postgresql":
                cursor.execute("SET session_replication_role = DEFAULT")


@contextmanager
def removed(cursor: Any, table: str, pk: int) -> Iterator[None]:
    """Delete a row, and put it back afterwards: the suite's database checks its foreign keys
    when the test ends (the ones to a removed decision would fail)."""
    cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [pk])
    row = cursor.fetchone()
    cursor.execute(f"DELETE FROM {table} WHERE id = %s", [pk])
    try:
        yield
    finally:
        cursor.execute(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(row))})", row)


def check_fails(*, naming: str) -> str:
    """checkdecisions exits 1, and its first finding is the one expected."""
    with pytest.raises(CommandError) as failed:
        call_command("checkdecisions")
    assert failed.value.returncode == 1
    first = str(failed.value).splitlines()[1]
    assert first.startswith(f"- {naming}"), str(failed.value)
    return str(failed.value)


def check_passes() -> str:
    out = io.StringIO()
    call_command("checkdecisions", stdout=out)
    assert out.getvalue().startswith("OK: The record of review decisions checks out")
    return out.getvalue()


# --- the record, in the suite's database ------------------------------------------------------


def test_each_decision_is_signed_and_chained_to_the_one_before(
    three: list[ReviewDecision], receipt: Receipt, auditor: User
) -> None:
    links = list(DecisionLink.objects.order_by("position"))
    assert [link.position for link in links] == [0, 1, 2]
    assert [link.decision_id for link in links] == [d.pk for d in three]
    assert links[0].previous_hash == "0" * 64 and links[0].previous_decision_id is None
    key = SigningKey.objects.get(status=SigningKey.ACTIVE)
    for before, link in zip([None, *links], links, strict=False):
        data = bytes(link.canonical_bytes)
        assert is_canonical(data)
        assert hashlib.sha256(data).hexdigest() == link.decision_hash
        assert keys.verify_signature(bytes(key.public_key), data, bytes(link.signature))
        assert link.signing_key == key and link.chained_by == "site"
        if before is not None:
            assert link.previous_hash == before.decision_hash
            assert link.previous_decision_id == before.decision_id
    second = three[1]
    assert json.loads(bytes(links[1].canonical_bytes)) == {
        "format": "review-decision/v1",
        "decision_id": second.pk,
        "receipt_id": str(receipt.public_id),
        "reviewer_id": auditor.pk,
        "reviewed_at": second.reviewed_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "conclusion": "needs_follow_up",
        "exception_note": "",
        "follow_up": "Ask about the e-mail",
        "output_hash": receipt.output_hash,
        "supersedes": None,
        "previous_decision_id": three[0].pk,
        "previous_hash": links[0].decision_hash,
        "chained_at": links[1].chained_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "chained_by": "site",
    }
    assert json.loads(bytes(links[2].canonical_bytes))["supersedes"] == second.pk


def test_a_sound_record_checks_out(three: list[ReviewDecision]) -> None:
    out = check_passes()
    assert (
        f"3 decisions, each signed and chained to the one before; the head is decision "
        f"hash {DecisionLink.objects.get(position=2).decision_hash} at position 2" in out
    )


def test_an_empty_record_checks_out(db: None) -> None:
    assert "it holds no decision yet" in check_passes()


def test_a_changed_conclusion_is_named(three: list[ReviewDecision]) -> None:
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'accepted' WHERE id = %s",
            [three[1].pk],
        )
    message = check_fails(naming=f"decision {three[1].pk} (position 1) was changed")
    assert 'conclusion was "needs_follow_up", is "accepted"' in message
    assert f"decision {three[0].pk} " not in message and f"decision {three[2].pk} " not in message


def test_a_rewritten_link_is_named_even_with_a_fresh_hash(three: list[ReviewDecision]) -> None:
    # Changing the decision and recomputing its link's bytes and hash is not enough: the
    # signature is the site's, and the next link names the old hash.
    link = DecisionLink.objects.get(decision=three[1])
    doc = json.loads(bytes(link.canonical_bytes)) | {"conclusion": "accepted"}
    data = canonical_bytes(doc)
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'accepted' WHERE id = %s",
            [three[1].pk],
        )
        cursor.execute(
            "UPDATE receipts_decisionlink SET canonical_bytes = %s, "
            "decision_hash = %s WHERE id = %s",
            [data, hashlib.sha256(data).hexdigest(), link.pk],
        )
    check_fails(
        naming=f"decision {three[1].pk} (position 1) was changed: its link's hash or "
        "signature does not verify"
    )


def test_a_removed_decision_is_named(three: list[ReviewDecision]) -> None:
    with guard_lifted() as cursor, removed(cursor, "receipts_reviewdecision", three[1].pk):
        check_fails(naming=f"decision {three[1].pk} (position 1) was removed")


def test_a_decision_removed_with_its_link_is_named_by_the_next(
    three: list[ReviewDecision],
) -> None:
    link = DecisionLink.objects.get(decision=three[1]).pk
    with (
        guard_lifted() as cursor,
        removed(cursor, "receipts_decisionlink", link),
        removed(cursor, "receipts_reviewdecision", three[1].pk),
    ):
        message = check_fails(
            naming=f"decision {three[2].pk} (position 2) follows a removed "
            f"decision: it was signed after decision {three[1].pk}"
        )
    assert len(message.splitlines()) == 2  # one finding: the rest of the chain holds


def test_two_swapped_decisions_are_named(three: list[ReviewDecision]) -> None:
    # Swap the places of the first two in the record.
    first, second = (DecisionLink.objects.get(decision=d) for d in three[:2])
    with guard_lifted() as cursor:
        cursor.execute("UPDATE receipts_decisionlink SET position = 99 WHERE id = %s", [first.pk])
        cursor.execute("UPDATE receipts_decisionlink SET position = 0 WHERE id = %s", [second.pk])
        cursor.execute("UPDATE receipts_decisionlink SET position = 1 WHERE id = %s", [first.pk])
    check_fails(
        naming=f"decision {three[1].pk} (position 0) was reordered: it was signed after "
        f"decision {three[0].pk}, and now follows nothing"
    )


def test_two_decisions_with_swapped_contents_are_named(three: list[ReviewDecision]) -> None:
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'needs_follow_up', "
            "follow_up = 'Ask about the e-mail' WHERE id = %s",
            [three[0].pk],
        )
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'accepted', "
            "follow_up = '' WHERE id = %s",
            [three[1].pk],
        )
    message = check_fails(naming=f"decision {three[0].pk} (position 0) was changed")
    assert f"- decision {three[1].pk} (position 1) was changed" in message


def test_a_decision_slipped_in_behind_the_site_is_named(
    three: list[ReviewDecision], receipt: Receipt, auditor: User
) -> None:
    # The site role may INSERT into the table: a row that skips decision_record has no link.
    slipped = ReviewDecision.objects.create(
        receipt=receipt, reviewer=auditor, conclusion="accepted", output_hash="0" * 64
    )
    check_fails(naming=f"decision {slipped.pk} is in no link of the record")


def test_a_cut_off_end_is_caught_against_a_noted_head(three: list[ReviewDecision]) -> None:
    head = DecisionLink.objects.get(position=2).decision_hash
    call_command("checkdecisions", "--head", head, stdout=io.StringIO())
    with guard_lifted() as cursor:
        cursor.execute("DELETE FROM receipts_decisionlink WHERE decision_id = %s", [three[2].pk])
        cursor.execute("DELETE FROM receipts_reviewdecision WHERE id = %s", [three[2].pk])
    check_passes()  # a shorter chain is a chain: only a head kept elsewhere shows the cut
    check_fails_with = pytest.raises(CommandError, match=f"no decision with the hash {head}")
    with check_fails_with:
        call_command("checkdecisions", "--head", head)


def test_the_database_refuses_to_change_or_remove_a_link(three: list[ReviewDecision]) -> None:
    statements = [
        "UPDATE receipts_decisionlink SET decision_hash = 'forged'",
        "DELETE FROM receipts_decisionlink",
    ]
    if connection.vendor == "postgresql":
        # CASCADE: the vouches' foreign key (0017) would refuse a plain one first.
        statements.append("TRUNCATE receipts_decisionlink CASCADE")
    else:
        statements += [
            "INSERT OR REPLACE INTO receipts_decisionlink SELECT * FROM receipts_decisionlink "
            "WHERE position = 0",
            "UPDATE OR REPLACE receipts_decisionlink SET position = 0",
        ]
    for sql in statements:
        with (
            pytest.raises(Error, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            if sql.startswith("TRUNCATE"):
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(sql)
    assert DecisionLink.objects.count() == 3
    check_passes()


def test_the_replace_trigger_knows_every_unique_key_of_the_links(db: None) -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, migration.TABLE)
    found = {
        frozenset(c["columns"]) for c in constraints.values() if c["unique"] or c["primary_key"]
    }
    assert found == {frozenset(k) for k in migration.UNIQUE_KEYS}


def test_a_second_link_at_one_place_is_refused(three: list[ReviewDecision]) -> None:
    # The invariant that keeps the chain from forking, as the database holds it.
    last = DecisionLink.objects.get(position=2)
    fork = DecisionLink(
        position=2,
        decision=three[0],
        previous_hash=last.previous_hash,
        canonical_bytes=b"{}",
        decision_hash="f" * 64,
        signature=b"",
        signing_key=last.signing_key,
    )
    with pytest.raises(Error), transaction.atomic():
        fork.save(force_insert=True)


def test_a_decision_signed_by_a_retired_key_still_verifies(
    three: list[ReviewDecision], receipt: Receipt, auditor: User, settings: Any
) -> None:
    old = SigningKey.objects.get(status=SigningKey.ACTIVE)
    settings.SIGNING_KEY = Ed25519PrivateKey.generate()
    keyring.forget()
    later = decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected")
    old.refresh_from_db()
    assert old.status == SigningKey.RETIRED
    assert DecisionLink.objects.get(decision=later).signing_key != old
    assert "4 decisions" in check_passes()


def test_decisions_by_a_key_compromised_later_verify_once_a_good_key_vouches(
    three: list[ReviewDecision], receipt: Receipt, auditor: User, settings: Any
) -> None:
    old = SigningKey.objects.get(status=SigningKey.ACTIVE)
    mark_compromised(old.kid)
    check_fails(
        naming=f"decision {three[0].pk} (position 0) was signed by the key {old.kid}, "
        "since compromised, and no later decision"
    )
    settings.SIGNING_KEY = Ed25519PrivateKey.generate()
    keyring.forget()
    decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected")
    check_passes()


def test_a_decision_signed_after_its_key_was_compromised_fails(
    three: list[ReviewDecision], settings: Any
) -> None:
    old = SigningKey.objects.get(status=SigningKey.ACTIVE)
    chained = DecisionLink.objects.get(decision=three[1]).chained_at
    mark_compromised(old.kid, at=chained - timedelta(microseconds=1))
    message = check_fails(
        naming=f"decision {three[0].pk} (position 0) was signed by the key "
        f"{old.kid}, since compromised, and no later decision"
    )
    assert (
        f"- decision {three[1].pk} (position 1) was signed by the key {old.kid} after it "
        "was compromised" in message
    )


def test_the_migration_chains_the_decisions_it_finds(receipt: Receipt, auditor: User) -> None:
    # Decisions stored as an older release stored them: rows without links.
    older = [
        ReviewDecision.objects.create(
            receipt=receipt, reviewer=auditor, conclusion=c, output_hash=receipt.output_hash
        )
        for c in ("accepted", "rejected")
    ]
    check_fails(naming=f"decision {older[0].pk} is in no link")
    migration.chain_existing(apps, SimpleNamespace(connection=connection))
    links = list(DecisionLink.objects.order_by("position"))
    assert [(link.decision_id, link.chained_by) for link in links] == [
        (older[0].pk, "migration"),
        (older[1].pk, "migration"),
    ]
    assert "2 of them predate the chain" in check_passes()
    newer = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    assert DecisionLink.objects.get(decision=newer).previous_hash == links[1].decision_hash
    check_passes()


def test_the_migration_refuses_to_chain_without_a_key(
    receipt: Receipt, auditor: User, settings: Any
) -> None:
    ReviewDecision.objects.create(
        receipt=receipt, reviewer=auditor, conclusion="accepted", output_hash=receipt.output_hash
    )
    settings.SIGNING_KEY = None
    with pytest.raises(RuntimeError, match="set SIGNING_KEY_FILE"):
        migration.chain_existing(apps, SimpleNamespace(connection=connection))
    assert DecisionLink.objects.count() == 0


def test_the_admin_shows_whether_the_record_checks_out(
    three: list[ReviewDecision], auditor: User
) -> None:
    client = Client()
    client.force_login(auditor)
    page = client.get("/admin/receipts/reviewdecision/").content.decode()
    assert "The record of review decisions checks out: 3 decisions" in page
    entry = client.get(f"/admin/receipts/reviewdecision/{three[1].pk}/change/").content.decode()
    link = DecisionLink.objects.get(decision=three[1])
    assert link.decision_hash in entry
    assert base64.b64encode(bytes(link.signature)).decode() in entry
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'rejected' WHERE id = %s",
            [three[1].pk],
        )
    page = html.unescape(client.get("/admin/receipts/reviewdecision/").content.decode())
    assert "The record of review decisions does not check out." in page
    assert f"decision {three[1].pk} (position 1) was changed" in page


# --- end to end, through a live server ---------------------------------------------------------




"""The auditors' record survives a key compromise, and its form holds its rules.

The story: the site's key signs three decisions; it leaks at a time T; an honest decision is
chained after T, before anyone knows; the operator runs `compromisekey <kid> --at T`. The key
that takes over vouches for every decision the old key signed that still checks out (its
bytes, hash, signature and place in the chain), so `checkdecisions` passes again and says
why; a decision changed behind the site's back gets no vouch and stays reported; and a worker
that still holds the old key never signs a decision with it again (it reads the key's status
under the record's lock).

Then the form's rules, on the page and in the admin alike: the output hash reviewed, a receipt
that does not verify, "accepted with exception" without a note, and two auditors correcting
one decision at once (a form error, never a 500; the race through real connections on
PostgreSQL is in tests/live/test_decision_chain.py).
"""

from __future__ import annotations

import csv
import html
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import Error, connection, transaction
from django.test import Client

from receiptsite.integrity import keys
from receiptsite.ledger import keyring
from receiptsite.receipts.models import (
    DecisionLink,
    DecisionVouch,
    Receipt,
    ReviewDecision,
    SigningKey,
)
from receiptsite.review.forms import DecisionForm
from receiptsite.review.services import decision_record
from tests.conftest import Producer, command_line, lift_guard, signed_in, tamper
from tests.db.test_key_compromise import stamp, tick

pytestmark = pytest.mark.db


@pytest.fixture(autouse=True)
def own_files(own_key_file: None, settings: Any, tmp_path: Path) -> None:
    """The key file a copy of the suite's (own_key_file), and var/ of the test's own."""
    settings.VAR_DIR = tmp_path


@pytest.fixture
def receipt(producer: Producer) -> Receipt:
    return Receipt.objects.get(public_id=producer.publish()["id"])


def compromise(kid: str, at: str) -> str:
    out = io.StringIO()
    call_command("compromisekey", *command_line(kid, at=at), stdout=out, stderr=io.StringIO())
    return out.getvalue()


def checkdecisions() -> str:
    out = io.StringIO()
    call_command("checkdecisions", stdout=out)
    return out.getvalue()


@pytest.fixture
def story(receipt: Receipt, auditor: User) -> dict[str, Any]:
    """Three decisions by the site's key, the leak at T, and an honest fourth after T."""
    old = keyring.active_key().row
    decisions = [
        decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted"),
        decision_record(receipt=receipt, reviewer=auditor, conclusion="needs_follow_up",
                        follow_up="Ask about the e-mail"),
    ]
    decisions.append(decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected",
                                     supersedes=decisions[1]))
    tick()
    at = stamp()
    tick()
    decisions.append(decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted",
                                     follow_up="chained after the leak, before anyone knew"))
    assert {link.signing_key_id for link in DecisionLink.objects.all()} == {old.pk}
    return {"old": old, "at": at, "decisions": decisions}


def test_after_a_compromise_the_record_checks_out_again_on_the_new_keys_vouch(
    story: dict[str, Any], auditor: User
) -> None:
    old, decisions = story["old"], story["decisions"]
    output = compromise(old.kid, story["at"])
    new = SigningKey.objects.get(status=SigningKey.ACTIVE)
    assert (f"Vouched for by {new.kid}: 4 review decision(s) signed (or vouched for) by "
            f"{old.kid}") in output

    said = checkdecisions()
    assert said.startswith("OK: The record of review decisions checks out: 4 decisions")
    assert "4 of them were signed by a key since compromised" in said
    assert new.kid in said

    # Each vouch is the new key's signature over the decision's signed bytes, unchanged.
    for decision in decisions:
        link = DecisionLink.objects.get(decision=decision)
        (vouch,) = DecisionVouch.objects.filter(link=link)
        assert vouch.signing_key == new
        assert keys.verify_signature(
            bytes(new.public_key), bytes(link.canonical_bytes), bytes(vouch.signature)
        )

    # The admin's line and the CSV's check column say it in words.
    client = signed_in(auditor)
    listing = html.unescape(client.get("/admin/receipts/reviewdecision/").content.decode())
    assert "checks out: 4 decisions" in listing and "since compromised" in listing
    entry = html.unescape(
        client.get(f"/admin/receipts/reviewdecision/{decisions[3].pk}/change/").content.decode()
    )
    assert f"vouched for by the key {new.kid}" in entry
    rows = list(csv.DictReader(io.StringIO(client.get(
        "/admin/receipts/reviewdecision/export.csv?from=2000-01-01&to=2999-12-31"
    ).content.decode())))
    assert len(rows) == 4
    for row in rows:
        assert row["record_check"].startswith(f"sound: signed by the key {old.kid}, since "
                                              f"compromised, and vouched for by the key {new.kid}")
        assert row["vouch_signing_key"] == new.kid

    # The record goes on under the new key, and still checks out.
    later = decision_record(receipt=decisions[0].receipt, reviewer=auditor, conclusion="accepted")
    assert DecisionLink.objects.get(decision=later).signing_key == new
    assert "5 decisions" in checkdecisions()


def test_a_decision_changed_behind_the_sites_back_is_not_vouched_for(
    story: dict[str, Any]
) -> None:
    old, decisions = story["old"], story["decisions"]
    lift_guard(ReviewDecision._meta.db_table)
    ReviewDecision.objects.filter(pk=decisions[1].pk).update(follow_up="Forget the e-mail")
    output = compromise(old.kid, story["at"])
    assert "3 review decision(s)" in output
    assert (f"Left out: 1 review decision(s) signed (or vouched for) by {old.kid} that do not "
            "check out") in output
    assert not DecisionVouch.objects.filter(link__decision=decisions[1]).exists()
    assert DecisionVouch.objects.count() == 3
    with pytest.raises(CommandError) as failed:
        checkdecisions()
    assert failed.value.returncode == 1
    problems = str(failed.value).splitlines()[1:]
    assert problems == [f"- decision {decisions[1].pk} (position 1) was changed: follow_up was "
                        '"Ask about the e-mail", is "Forget the e-mail"']


def test_without_the_vouch_the_honest_record_failed_for_ever(story: dict[str, Any]) -> None:
    """What the vouch repairs: marked compromised as of T, the honest decision chained after T
    and those before (no later decision by a good key binds them) do not check out."""
    old, decisions = story["old"], story["decisions"]
    compromise(old.kid, story["at"])
    # Only the vouches count: a vouch that does not verify is no vouch.
    lift_guard(DecisionVouch._meta.db_table)
    DecisionVouch.objects.update(signature=b"\0" * 64)
    with pytest.raises(CommandError) as failed:
        checkdecisions()
    message = str(failed.value)
    assert f"decision {decisions[3].pk} (position 3) was signed by the key {old.kid} after it " \
        "was compromised" in message
    assert f"decision {decisions[0].pk} (position 0) was signed by the key {old.kid}, since " \
        "compromised" in message


def test_a_worker_holding_the_old_key_never_signs_a_decision_with_it(
    story: dict[str, Any], receipt: Receipt, auditor: User, settings: Any
) -> None:
    old = story["old"]
    compromise(old.kid, story["at"])
    # A worker of the site that recorded the old key before the compromise, and whose key file
    # still holds it (compromisekey could not replace it): it must refuse, and store nothing.
    settings.SIGNING_KEY_FILE = ""
    keyring.forget()
    keyring._recorded[old.kid] = old  # what that worker's process remembers
    count = ReviewDecision.objects.count()
    with pytest.raises(keyring.CannotSign):
        decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    assert ReviewDecision.objects.count() == count
    assert not DecisionLink.objects.filter(signing_key=old, position__gte=count).exists()
    assert checkdecisions().startswith("OK:")


def test_the_vouches_are_append_only(story: dict[str, Any]) -> None:
    compromise(story["old"].kid, story["at"])
    vouch = DecisionVouch.objects.first()
    assert vouch is not None
    with pytest.raises(Error), transaction.atomic():
        DecisionVouch.objects.filter(pk=vouch.pk).update(signature=b"\0" * 64)
    with pytest.raises(Error), transaction.atomic():
        DecisionVouch.objects.filter(pk=vouch.pk).delete()


def test_when_a_vouch_was_signed_is_the_databases_word(story: dict[str, Any]) -> None:
    """A row that says when it was signed is refused (SQLite) or stamped with the database's
    clock (PostgreSQL), as the receipts' appended signatures are (migrations/0013)."""
    compromise(story["old"].kid, story["at"])
    long_ago = connection.ops.adapt_datetimefield_value(datetime(2026, 1, 1, tzinfo=UTC))
    sql = (
        "INSERT INTO receipts_decisionvouch (link_id, signing_key_id, signature, signed_at) "
        "SELECT MIN(l.id), MAX(k.id), %s, %s FROM receipts_decisionlink l, receipts_signingkey k"
    )
    count = DecisionVouch.objects.count()
    if connection.vendor == "sqlite":
        with pytest.raises(Error, match="the database stamps the time"), transaction.atomic():
            connection.cursor().execute(sql, [bytes(64), long_ago])
        assert DecisionVouch.objects.count() == count
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, [bytes(64), long_ago])
        assert DecisionVouch.objects.latest("id").signed_at > datetime(2026, 1, 2, tzinfo=UTC)


# --- the form's rules ---------------------------------------------------------------------------


def test_a_correction_stored_meanwhile_is_a_form_error_not_a_500(
    receipt: Receipt, auditor: User
) -> None:
    first = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    mine = DecisionForm({"conclusion": "rejected", "exception_note": "", "follow_up": "",
                         "supersedes": first.pk, "output_hash": receipt.output_hash},
                        receipt=receipt)
    assert mine.is_valid(), mine.errors
    # Another auditor's correction of the same decision is stored between my check and my save.
    decision_record(receipt=receipt, reviewer=auditor, conclusion="needs_follow_up",
                    supersedes=first)
    assert mine.record(auditor) is None
    assert "corrected meanwhile" in str(mine.errors["supersedes"])
    assert ReviewDecision.objects.count() == 2


def test_the_admin_refuses_a_second_correction_of_one_decision(
    receipt: Receipt, auditor: User
) -> None:
    first = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected", supersedes=first)
    client = signed_in(auditor)
    response = client.post("/admin/receipts/reviewdecision/add/", {
        "receipt": str(receipt.public_id), "output_hash": receipt.output_hash,
        "conclusion": "accepted",
        "exception_note": "", "follow_up": "", "supersedes": first.pk,
    })
    assert response.status_code == 200
    assert "corrected meanwhile" in response.content.decode()
    assert ReviewDecision.objects.count() == 2


def admin_post(client: Client, receipt: Receipt, **fields: Any) -> Any:
    data = {"receipt": str(receipt.public_id), "output_hash": receipt.output_hash,
            "conclusion": "accepted", "exception_note": "", "follow_up": "", "supersedes": ""}
    return client.post("/admin/receipts/reviewdecision/add/", {**data, **fields})


def test_the_admin_binds_the_hash_the_auditor_confirms(receipt: Receipt, auditor: User) -> None:
    client = signed_in(auditor)
    add = client.get(
        f"/admin/receipts/reviewdecision/add/?receipt={receipt.public_id}"
    ).content.decode()
    assert 'name="output_hash"' in add
    response = admin_post(client, receipt, output_hash="0" * 64)
    assert response.status_code == 200
    assert "not the one you reviewed" in response.content.decode()
    response = admin_post(client, receipt, output_hash="")
    assert response.status_code == 200
    assert ReviewDecision.objects.count() == 0
    assert admin_post(client, receipt).status_code == 302
    assert ReviewDecision.objects.get().output_hash == receipt.output_hash


@pytest.mark.parametrize("where", ["page", "admin"])
def test_accepted_with_exception_needs_an_exception_note(
    receipt: Receipt, auditor: User, where: str
) -> None:
    client = signed_in(auditor)
    fields = {"conclusion": "accepted_with_exception", "exception_note": "  "}
    if where == "page":
        response = client.post(f"/run/{receipt.public_id}/decisions",
                               {**fields, "output_hash": receipt.output_hash})
    else:
        response = admin_post(client, receipt, **fields)
    assert "needs an exception note" in html.unescape(response.content.decode())
    assert ReviewDecision.objects.count() == 0


@pytest.mark.parametrize("where", ["page", "admin"])
def test_a_receipt_that_does_not_verify_is_refused_with_the_reason(
    producer: Producer, auditor: User, where: str
) -> None:
    answer = producer.publish()
    tamper(answer["id"], subject_name="someone else")
    receipt = Receipt.objects.get(public_id=answer["id"])
    client = signed_in(auditor)

    def post(**fields: Any) -> Any:
        if where == "page":
            return client.post(f"/run/{receipt.public_id}/decisions",
                               {"output_hash": receipt.output_hash, **fields})
        return admin_post(client, receipt, **fields)

    for fields in ({"conclusion": "accepted"},
                   {"conclusion": "accepted", "exception_note": "It does not verify."},
                   {"conclusion": "rejected"}):
        response = post(**fields)
        page = html.unescape(response.content.decode())
        assert "This receipt does not verify (its verification status is invalid" in page
        assert "The stored columns disagree with the document" in page
        assert "an exception note saying so" in page
    assert ReviewDecision.objects.count() == 0
    response = post(conclusion="rejected", exception_note="Its columns were changed.")
    assert response.status_code == 302
    assert ReviewDecision.objects.get().exception_note == "Its columns were changed."


def test_the_key_that_took_over_can_be_compromised_in_its_turn(
    story: dict[str, Any], auditor: User
) -> None:
    """The decisions the second key vouched for, and those it chained, are vouched for by the
    third."""
    compromise(story["old"].kid, story["at"])
    second = SigningKey.objects.get(status=SigningKey.ACTIVE)
    later = decision_record(receipt=story["decisions"][0].receipt, reviewer=auditor,
                            conclusion="accepted")
    assert DecisionLink.objects.get(decision=later).signing_key == second
    tick()
    output = compromise(second.kid, stamp())
    third = SigningKey.objects.get(status=SigningKey.ACTIVE)
    assert (f"Vouched for by {third.kid}: 5 review decision(s) signed (or vouched for) by "
            f"{second.kid}") in output
    said = checkdecisions()
    assert said.startswith("OK: The record of review decisions checks out: 5 decisions")
    assert "5 of them were signed by a key since compromised" in said

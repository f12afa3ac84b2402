"""The decision form (review/forms.py), on the receipt page and in the admin: it starts with
no conclusion chosen, "accepted with exception" needs its note, a receipt that does not verify
refuses "accepted" and needs an exception note for anything else, and the admin's add form
takes the receipt as an auditor has it (its id, its short id, a link), saying plainly when
what was pasted names no receipt."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review import lookup, queue
from receiptsite.review.forms import DecisionForm
from receiptsite.withdrawal.withdrawals import receipt_withdraw
from tests.conftest import SITE, Producer, lift_guard, signed_in, tamper

pytestmark = pytest.mark.db

ADD = "/admin/receipts/reviewdecision/add/"


@pytest.fixture
def receipt(producer: Producer) -> Receipt:
    return Receipt.objects.get(public_id=producer.publish()["id"])


@pytest.fixture
def tampered(producer: Producer) -> Receipt:
    answer = producer.publish(idempotency_key="tampered")
    tamper(answer["id"], outcome="failed", subject_name="someone else")
    return Receipt.objects.get(public_id=answer["id"])


def add(client: Client, receipt: Receipt | str, **fields: Any) -> Any:
    named = receipt if isinstance(receipt, str) else str(receipt.public_id)
    output_hash = fields.pop("output_hash", None)
    if output_hash is None and isinstance(receipt, Receipt):
        output_hash = receipt.output_hash
    data = {"receipt": named, "output_hash": output_hash or "0" * 64, "conclusion": "accepted",
            "exception_note": "", "follow_up": "", "supersedes": "", **fields}
    return client.post(ADD, data)


def errors_of(response: Any) -> str:
    form = response.context["adminform"].form
    return html.unescape(" ".join(str(e) for e in form.errors.values()))


# --- no conclusion chosen at first ------------------------------------------------------------


def selected_options(page: str) -> list[str]:
    select = re.search(r'<select name="conclusion"[^>]*>(.*?)</select>', page, re.S)
    assert select is not None, page[:2000]
    return re.findall(r'<option value="([^"]*)"[^>]*selected', select.group(1))


def test_the_form_starts_with_no_conclusion_chosen_on_the_page_and_in_the_admin(
    auditor: User, receipt: Receipt
) -> None:
    client = signed_in(auditor)
    page = client.get(f"/run/{receipt.public_id}").content.decode()
    assert selected_options(page) in ([], [""])
    assert "Choose a conclusion…" in page
    admin = client.get(ADD, {"receipt": str(receipt.public_id)}).content.decode()
    assert selected_options(admin) in ([], [""])
    assert DecisionForm(receipt=receipt)["conclusion"].value() is None


def test_a_form_with_no_conclusion_chosen_records_nothing(
    auditor: User, receipt: Receipt
) -> None:
    client = signed_in(auditor)
    page = client.post(f"/run/{receipt.public_id}/decisions",
                       {"conclusion": "", "output_hash": receipt.output_hash})
    assert page.status_code == 422
    assert add(client, receipt, conclusion="").status_code == 200
    assert ReviewDecision.objects.count() == 0


# --- the rules ------------------------------------------------------------------------------


def test_accepted_with_exception_without_the_note_is_refused_and_with_it_recorded(
    auditor: User, receipt: Receipt
) -> None:
    client = signed_in(auditor)
    refused = add(client, receipt, conclusion="accepted_with_exception", exception_note=" ")
    assert "“Accepted with exception” needs an exception note" in errors_of(refused)
    assert add(client, receipt, conclusion="accepted_with_exception",
               exception_note="Sent a day late").status_code == 302
    assert ReviewDecision.objects.get().exception_note == "Sent a day late"


def test_accepted_on_a_receipt_that_does_not_verify_is_refused_with_the_reason_even_with_a_note(
    auditor: User, tampered: Receipt
) -> None:
    client = signed_in(auditor)
    for note in ("", "It does not verify, I accept it anyway."):
        refused = errors_of(add(client, tampered, exception_note=note))
        assert "This receipt does not verify (its verification status is invalid" in refused
        assert "The stored columns disagree with the document: " in refused
        assert "outcome" in refused and "subject_name" in refused
        assert "so “accepted” is refused" in refused
    page = client.post(f"/run/{tampered.public_id}/decisions",
                       {"conclusion": "accepted", "output_hash": tampered.output_hash})
    assert page.status_code == 422
    assert "so “accepted” is refused" in html.unescape(page.content.decode())
    assert ReviewDecision.objects.count() == 0


@pytest.mark.parametrize("conclusion", ["rejected", "needs_follow_up", "accepted_with_exception"])
def test_any_other_conclusion_on_a_receipt_that_does_not_verify_needs_a_note_saying_so(
    auditor: User, tampered: Receipt, conclusion: str
) -> None:
    client = signed_in(auditor)
    refused = errors_of(add(client, tampered, conclusion=conclusion))
    assert "This receipt does not verify" in refused
    assert "an exception note saying so" in refused
    saved = add(client, tampered, conclusion=conclusion,
                exception_note="It does not verify: its outcome column was changed.")
    assert saved.status_code == 302
    assert ReviewDecision.objects.get().conclusion == conclusion


def test_a_withdrawn_receipt_is_refused_in_words_that_say_it_was_withdrawn(
    auditor: User, receipt: Receipt
) -> None:
    receipt_withdraw(receipt=receipt, reason="personal_data", auditor=auditor)
    refused = errors_of(add(signed_in(auditor), receipt))
    assert "This receipt does not verify (it was withdrawn: its content is erased)" in refused


# --- naming the receipt in the admin's add form ------------------------------------------------


@pytest.mark.parametrize(
    "pasted",
    [
        "{id}",
        "{upper}",
        "  {id}  ",
        "{hex}",
        "{short}",
        "{site}/run/{id}",
        "{site}/run/{id}#decisions",
        "/run/{id}/handoff.txt",
        "{site}/api/receipt/{id}/verify",
    ],
)
def test_the_add_form_takes_the_receipt_as_an_auditor_pastes_it(
    auditor: User, receipt: Receipt, pasted: str
) -> None:
    text = pasted.format(id=receipt.public_id, upper=str(receipt.public_id).upper(),
                         hex=receipt.public_id.hex, short=str(receipt.public_id)[:8], site=SITE)
    response = add(signed_in(auditor), text, output_hash=receipt.output_hash)
    assert response.status_code == 302, errors_of(response)
    assert ReviewDecision.objects.get().receipt == receipt


@pytest.mark.parametrize(
    ("pasted", "said"),
    [
        ("{pk}", "“{pk}” names no receipt. Paste the receipt's id"),
        ("receipt seven", "“receipt seven” names no receipt."),
        ("https://example.org/nothing/here", "names no receipt."),
        ("{unknown}", "No receipt has the id {unknown}. Check that you copied all of it."),
        ("{site}/run/{unknown}", "No receipt has the id {unknown}."),
        ("ffffffff", "No receipt's id starts with ffffffff."),
        ("", "Paste the receipt's id or the link to its page."),
    ],
)
def test_the_add_form_says_plainly_when_what_was_pasted_names_no_receipt(
    auditor: User, receipt: Receipt, pasted: str, said: str
) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    values = {"pk": receipt.pk, "unknown": unknown, "site": SITE}
    if str(receipt.public_id).startswith("ffffffff"):
        pytest.skip("the receipt's id starts with ffffffff")
    response = add(signed_in(auditor), pasted.format(**values), output_hash=receipt.output_hash)
    assert response.status_code == 200
    assert said.format(**values) in errors_of(response)
    assert ReviewDecision.objects.count() == 0


def test_a_short_id_two_receipts_share_asks_for_the_whole_id(
    auditor: User, producer: Producer
) -> None:
    first = producer.publish(idempotency_key="one")["id"]
    second = producer.publish(idempotency_key="two")["id"]
    lift_guard("receipts_receipt")
    for n, public_id in enumerate((first, second)):
        Receipt.objects.filter(public_id=public_id).update(
            public_id=uuid.UUID(f"abcdef01-0000-4000-8000-00000000000{n}")
        )
    response = add(signed_in(auditor), "abcdef01")
    assert "2 receipts' ids start with abcdef01: paste the whole id or the link." in (
        errors_of(response)
    )


def test_the_add_form_from_the_queue_shows_the_receipt_and_fills_in_its_hash(
    auditor: User, receipt: Receipt, tampered: Receipt
) -> None:
    client = signed_in(auditor)
    page = client.get(ADD, {"receipt": str(receipt.public_id), "from": "queue"})
    form = page.context["adminform"].form
    assert form.initial["receipt"] == str(receipt.public_id)
    assert form.initial["output_hash"] == receipt.output_hash
    text = html.unescape(re.sub(r"</?code>", "", page.content.decode()))
    assert f"The receipt you are deciding on: {lookup.short_id(receipt.public_id)}" in text
    assert "valid: every check passed" in text
    assert "does not verify" not in text
    warned = html.unescape(client.get(ADD, {"receipt": str(tampered.public_id)}).content.decode())
    assert "⚠ This receipt does not verify" in warned
    assert "“Accepted” is refused" in warned
    assert "The stored columns disagree with the document" in warned


def test_the_add_form_warns_when_another_auditor_holds_the_receipt(
    auditor: User, receipt: Receipt
) -> None:
    bob = User.objects.create_user("bob", is_staff=True, is_superuser=True)
    queue.claim(receipt, bob)
    until = queue.when(queue.hold_of(receipt).until)  # type: ignore[arg-type]
    page = html.unescape(
        signed_in(auditor).get(ADD, {"receipt": str(receipt.public_id)}).content.decode()
    )
    assert f"bob holds this receipt for review until {until}" in page
    assert "a decision by anyone else is refused until then" in page


def test_a_decision_recorded_from_the_queue_goes_back_to_the_queue(
    auditor: User, receipt: Receipt
) -> None:
    client = signed_in(auditor)
    queue.claim(receipt, auditor)
    response = client.post(f"{ADD}?receipt={receipt.public_id}&from=queue", {
        "receipt": str(receipt.public_id), "output_hash": receipt.output_hash,
        "conclusion": "accepted", "exception_note": "", "follow_up": "", "supersedes": "",
    }, follow=True)
    assert response.redirect_chain[-1][0] == "/admin/receipts/reviewassignment/"
    said = [str(m) for m in response.context["messages"]]
    assert f"Recorded your decision on {str(receipt.public_id)[:8]}: Accepted." in said
    assert response.context["rows"] == []
    assert queue.hold_of(receipt) == queue.Hold(None, None)

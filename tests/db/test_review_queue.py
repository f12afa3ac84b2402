"""The auditors' review queue (review/queue.py, the admin's "Review queue"): which receipts
await a decision, its filters, assignment, and the reservation that keeps two auditors from
reviewing one receipt at once, a race of two claims included. Reservations are workflow state:
they change; the decisions stay append-only and signed."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receiptsite.ledger.verification import verification_json
from receiptsite.receipts.models import Receipt, ReviewAssignment, ReviewDecision
from receiptsite.review import queue
from receiptsite.review.services import HeldByAnother, decision_record
from receiptsite.withdrawal.withdrawals import receipt_withdraw
from tests.conftest import Producer, signed_in, tamper

pytestmark = pytest.mark.db

QUEUE = "/admin/receipts/reviewassignment/"


CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def statements(captured: CaptureQueriesContext) -> int:
    """The statements the code chose to run (transaction control is not counted, as in
    tests/db/test_query_counts.py)."""
    return sum(not q["sql"].upper().startswith(CONTROL) for q in captured.captured_queries)


def hold_url(receipt: Receipt) -> str:
    return f"{QUEUE}{receipt.public_id}/hold/"


def make_auditor(name: str) -> User:
    user = User.objects.create_user(name, password="pw-for-tests-only", is_staff=True)
    user.groups.add(Group.objects.get(name="Auditors"))
    return user


@pytest.fixture
def bob(db: None) -> User:
    return make_auditor("bob")


@pytest.fixture
def receipts(producer: Producer, other_producer: Producer) -> list[Receipt]:
    """Four receipts, in storage order: two of acme's workflow wf-alpha (one failed), a start
    of wf-beta, and one of globex."""
    answers = [
        producer.publish(idempotency_key="a", workflow_id="wf-alpha"),
        producer.publish(idempotency_key="b", workflow_id="wf-alpha", outcome="failed"),
        producer.publish(idempotency_key="c", workflow_id="wf-beta", phase="start",
                         outcome=None),
        other_producer.publish(idempotency_key="d", workflow_id="wf-alpha"),
    ]
    return [Receipt.objects.get(public_id=a["id"]) for a in answers]


def queued(client: Client, **filters: str) -> list[str]:
    response = client.get(QUEUE, filters)
    assert response.status_code == 200
    return [str(row["receipt"].public_id) for row in response.context["rows"]]


def ids(*chosen: Receipt) -> list[str]:
    return [str(r.public_id) for r in chosen]


# --- what awaits a decision ---------------------------------------------------------------


def test_the_queue_lists_every_receipt_without_a_decision_oldest_first(
    auditor: User, receipts: list[Receipt]
) -> None:
    client = signed_in(auditor)
    assert queued(client) == ids(*receipts)
    page = client.get(QUEUE).content.decode()
    assert "4 receipts await a decision." in page
    assert str(receipts[0].public_id)[:8] in page


def test_a_receipt_whose_latest_decision_needs_follow_up_stays_and_a_final_one_leaves(
    auditor: User, receipts: list[Receipt]
) -> None:
    first, second, third, fourth = receipts
    decision_record(receipt=first, reviewer=auditor, conclusion="needs_follow_up",
                    follow_up="Ask for the invoice")
    decision_record(receipt=second, reviewer=auditor, conclusion="accepted")
    decision_record(receipt=third, reviewer=auditor, conclusion="rejected")
    follow = decision_record(receipt=fourth, reviewer=auditor, conclusion="needs_follow_up")
    client = signed_in(auditor)
    assert queued(client) == ids(first, fourth)
    assert "follow-up: Ask for the invoice" in client.get(QUEUE).content.decode()
    # The follow-up done: a correction that accepts it takes it out of the queue.
    decision_record(receipt=fourth, reviewer=auditor, conclusion="accepted", supersedes=follow)
    assert queued(client) == ids(first)
    # A later follow-up on an accepted receipt brings it back: the latest decision counts.
    decision_record(receipt=second, reviewer=auditor, conclusion="needs_follow_up")
    assert queued(client) == ids(first, second)


def test_a_withdrawn_receipt_is_not_in_the_queue(auditor: User, receipts: list[Receipt]) -> None:
    receipt_withdraw(receipt=receipts[1], reason="personal_data", auditor=auditor)
    assert queued(signed_in(auditor)) == ids(receipts[0], receipts[2], receipts[3])


@pytest.mark.parametrize(
    ("filters", "wanted"),
    [
        ({"tenant": "acme"}, [0, 1, 2]),
        ({"tenant": "globex"}, [3]),
        ({"workflow": "wf-alpha"}, [0, 1, 3]),
        ({"workflow": "wf-alpha", "tenant": "acme"}, [0, 1]),
        ({"outcome": "failed"}, [1]),
        ({"outcome": "succeeded"}, [0, 3]),
        ({"outcome": "none"}, [2]),
        ({"state": "valid"}, [0, 2, 3]),
        ({"state": "invalid"}, [1]),
        ({"state": "pending"}, []),
        ({"state": "invalid", "tenant": "globex"}, []),
        ({"outcome": "no-such-outcome"}, [0, 1, 2, 3]),  # an unknown value filters nothing
    ],
)
def test_the_queue_filters_by_tenant_workflow_outcome_and_verification_state(
    auditor: User, receipts: list[Receipt], filters: dict[str, str], wanted: list[int]
) -> None:
    tamper(str(receipts[1].public_id), subject_name="someone else")
    assert queued(signed_in(auditor), **filters) == ids(*(receipts[i] for i in wanted))


def test_a_receipt_that_does_not_verify_is_flagged_and_never_shown_as_fact(
    auditor: User, receipts: list[Receipt]
) -> None:
    tamper(str(receipts[1].public_id), outcome="succeeded")
    page = html.unescape(signed_in(auditor).get(QUEUE, {"state": "invalid"}).content.decode())
    row = page[page.index(f'data-receipt="{receipts[1].public_id}"'):]
    row = row[: row.index("</tr>")]
    assert "⚠ invalid: does not verify" in row
    assert "What the altered record now says: succeeded" in row
    assert "record_matches" in row
    assert "✓" not in row


def test_the_state_filter_verifies_at_most_a_scan_a_page_and_goes_on_from_there(
    auditor: User, receipts: list[Receipt], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue, "SCAN", 2)
    tamper(str(receipts[3].public_id), subject_name="someone else")
    client = signed_in(auditor)
    first = client.get(QUEUE, {"state": "invalid"})
    assert first.context["rows"] == []
    assert first.context["page"].scanned == 2
    assert "this page checked 2 of them" in first.content.decode()
    following = client.get(QUEUE + first.context["next_page"])
    assert [row["receipt"] for row in following.context["rows"]] == [receipts[3]]
    assert following.context["next_page"] == ""


def test_the_queue_pages_fifty_at_a_time(
    auditor: User, receipts: list[Receipt], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue, "PAGE", 3)
    client = signed_in(auditor)
    first = client.get(QUEUE)
    assert len(first.context["rows"]) == 3
    rest = client.get(QUEUE + first.context["next_page"])
    assert [row["receipt"] for row in rest.context["rows"]] == [receipts[3]]
    assert rest.context["first_page"] == "?"


def test_the_queue_verifies_each_row_shown_and_costs_nothing_more_per_row(
    auditor: User, receipts: list[Receipt]
) -> None:
    """What a page of the queue costs beyond its first row: what verifying each further row
    needs (ledger/verification.py), and not one query more."""
    client = signed_in(auditor)
    one = Receipt.objects.for_verification().get(pk=receipts[0].pk)
    with CaptureQueriesContext(connection) as verifying:
        verification_json(one)
    queue.assign([receipts[0]], auditor, by=auditor)
    queue.claim(receipts[1], auditor)

    def cost(**filters: str) -> int:
        with CaptureQueriesContext(connection) as page:
            assert client.get(QUEUE, filters).status_code == 200
        return statements(page)

    per_row = statements(verifying)
    assert cost(tenant="acme") - cost(tenant="globex") == 2 * per_row
    assert cost(workflow="wf-alpha") - cost(workflow="wf-beta") == 2 * per_row
    # Pinned: the session, the user, their permissions (2), the count, the page of rows with
    # all each shows (one query), the tenants, the auditors to assign to; on PostgreSQL the
    # auditors' scope sets `app.auditor` too.
    assert cost(tenant="globex") - per_row == (9 if connection.vendor == "postgresql" else 8)


def test_a_get_of_the_queue_writes_nothing(auditor: User, receipts: list[Receipt]) -> None:
    signed_in(auditor).get(QUEUE)
    assert ReviewAssignment.objects.count() == 0


def test_the_queue_needs_the_auditors_permission(client: Client, receipts: list[Receipt]) -> None:
    staff = User.objects.create_user("eve", is_staff=True)
    assert signed_in(staff).get(QUEUE).status_code == 403
    assert signed_in(staff).post(hold_url(receipts[0]), {"action": "claim"}).status_code == 403
    assert client.get(QUEUE).status_code == 302  # to the login
    assert ReviewAssignment.objects.count() == 0


def test_the_admin_index_lists_the_review_queue(auditor: User, db: None) -> None:
    index = signed_in(auditor).get("/admin/").content.decode()
    assert f'href="{QUEUE}"' in index and "Review queue" in index


# --- claims -------------------------------------------------------------------------------


def test_a_claim_holds_the_receipt_and_a_second_auditor_sees_who_holds_it_until_when(
    auditor: User, bob: User, receipts: list[Receipt]
) -> None:
    ada = signed_in(auditor)
    response = ada.post(hold_url(receipts[0]), {"action": "claim", "next": f"{QUEUE}?tenant=acme"})
    assert response.status_code == 302
    assert response["Location"] == f"{QUEUE}?tenant=acme"
    row = ReviewAssignment.objects.get(receipt=receipts[0])
    assert row.held_by == auditor and row.assigned_to == auditor
    assert row.held_until is not None
    assert timedelta(minutes=29) < row.held_until - timezone.now() <= timedelta(minutes=30)
    until = queue.when(row.held_until)
    mine = ada.get(QUEUE).content.decode()
    assert f"You hold it until {until}" in mine
    theirs = signed_in(bob).get(QUEUE)
    page = theirs.content.decode()
    assert f"Held by ada until {until}" in page
    row_html = page[page.index(f'data-receipt="{receipts[0].public_id}"'):]
    row_html = row_html[: row_html.index("</tr>")]
    assert "Claim" not in row_html and "Record a decision" not in row_html
    # Bob claims it anyway (a stale page): refused, and told by whom and until when.
    refused = signed_in(bob).post(hold_url(receipts[0]), {"action": "claim"}, follow=True)
    said = [str(m) for m in refused.context["messages"]]
    assert said == [f"Already held: ada holds {str(receipts[0].public_id)[:8]} for review until "
                    f"{until}. Choose another receipt, or ask them."]
    assert ReviewAssignment.objects.get(receipt=receipts[0]).held_by == auditor


def test_a_hold_runs_out_by_the_clock_and_another_auditor_takes_it(
    auditor: User, bob: User, receipts: list[Receipt]
) -> None:
    assert queue.claim(receipts[0], auditor).won
    ReviewAssignment.objects.filter(receipt=receipts[0]).update(
        held_until=timezone.now() - timedelta(seconds=1)
    )
    assert "Not held" in signed_in(bob).get(QUEUE).content.decode()
    claimed = queue.claim(receipts[0], bob)
    assert claimed.won and claimed.hold.by == bob
    # It stays assigned to its first claimer: an assignment is not a hold.
    assert ReviewAssignment.objects.get(receipt=receipts[0]).assigned_to == auditor


def test_the_holder_renews_and_releases_and_nobody_else_can_release(
    auditor: User, bob: User, receipts: list[Receipt]
) -> None:
    first = queue.claim(receipts[0], auditor)
    ReviewAssignment.objects.filter(receipt=receipts[0]).update(
        held_until=timezone.now() + timedelta(minutes=1)
    )
    renewed = queue.claim(receipts[0], auditor)
    assert renewed.won and renewed.hold.until is not None and first.hold.until is not None
    assert renewed.hold.until > timezone.now() + timedelta(minutes=29)
    assert not queue.release(receipts[0], bob)
    response = signed_in(bob).post(hold_url(receipts[0]), {"action": "release"}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        f"Not released: you did not hold {str(receipts[0].public_id)[:8]}."
    ]
    assert queue.hold_of(receipts[0]).by == auditor
    signed_in(auditor).post(hold_url(receipts[0]), {"action": "release"})
    assert queue.hold_of(receipts[0]) == queue.Hold(None, None)
    assert queue.claim(receipts[0], bob).won


def test_a_claim_is_a_post_and_goes_back_only_to_this_site(
    auditor: User, receipts: list[Receipt]
) -> None:
    client = signed_in(auditor)
    assert client.get(hold_url(receipts[0])).status_code == 405
    assert ReviewAssignment.objects.count() == 0
    response = client.post(hold_url(receipts[0]),
                           {"action": "claim", "next": "https://evil.example/"})
    assert response["Location"] == QUEUE
    missing = f"{QUEUE}00000000-0000-4000-8000-000000000000/hold/"
    assert client.post(missing, {"action": "claim"}).status_code == 404


def test_a_claim_that_read_the_receipt_as_free_still_loses_to_the_one_stored_before_it(
    receipts: list[Receipt], auditor: User, bob: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database decides, not a read: Bob's claim works from the receipt's row as it was
    before Ada's claim (free), and still loses, because the claim is one conditional UPDATE.
    Two claims racing through real connections: tests/browser/test_auditor_desk_browser.py."""
    stale = queue._row(receipts[0])
    assert stale.held_by is None
    assert queue.claim(receipts[0], auditor).won
    monkeypatch.setattr(queue, "_row", lambda receipt: stale)
    lost = queue.claim(receipts[0], bob)
    assert lost.won is False and lost.hold.by == auditor
    assert ReviewAssignment.objects.get(receipt=receipts[0]).held_by == auditor


def test_the_database_holds_one_queue_row_per_receipt(receipts: list[Receipt]) -> None:
    from django.db import IntegrityError, transaction

    ReviewAssignment.objects.create(receipt=receipts[0])
    with pytest.raises(IntegrityError), transaction.atomic():
        ReviewAssignment.objects.create(receipt=receipts[0])


# --- decisions and holds --------------------------------------------------------------------


def test_a_decision_releases_the_hold_and_the_receipt_leaves_the_queue(
    auditor: User, receipts: list[Receipt]
) -> None:
    queue.claim(receipts[0], auditor)
    decision_record(receipt=receipts[0], reviewer=auditor, conclusion="accepted")
    assert queue.hold_of(receipts[0]) == queue.Hold(None, None)
    assert str(receipts[0].public_id) not in queued(signed_in(auditor))
    # The assignment is workflow state and may change; the decision is untouched by it.
    decision = ReviewDecision.objects.get(receipt=receipts[0])
    queue.assign([receipts[0]], None, by=auditor)
    assert ReviewDecision.objects.get(pk=decision.pk).conclusion == "accepted"


def test_another_auditors_hold_refuses_a_decision_in_the_admin_and_on_the_page(
    auditor: User, bob: User, receipts: list[Receipt]
) -> None:
    receipt = receipts[0]
    queue.claim(receipt, auditor)
    until = queue.when(queue.hold_of(receipt).until)  # type: ignore[arg-type]
    with pytest.raises(HeldByAnother):
        decision_record(receipt=receipt, reviewer=bob, conclusion="accepted")
    client = signed_in(bob)
    admin = client.post("/admin/receipts/reviewdecision/add/", {
        "receipt": str(receipt.public_id), "output_hash": receipt.output_hash,
        "conclusion": "accepted", "exception_note": "", "follow_up": "", "supersedes": "",
    })
    assert admin.status_code == 200
    words = f"ada holds this receipt for review until {until}."
    assert words in html.unescape(admin.content.decode())
    page = client.post(f"/run/{receipt.public_id}/decisions",
                       {"conclusion": "accepted", "output_hash": receipt.output_hash})
    assert page.status_code == 422
    assert words in html.unescape(page.content.decode())
    assert ReviewDecision.objects.count() == 0
    # The holder decides.
    assert decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")


# --- assignment -----------------------------------------------------------------------------


def test_auditors_assign_receipts_to_an_auditor_or_to_nobody_and_filter_by_it(
    auditor: User, bob: User, receipts: list[Receipt]
) -> None:
    client = signed_in(auditor)
    response = client.post(f"{QUEUE}assign/", {
        "receipt": ids(receipts[0], receipts[2]), "auditor": "bob", "next": QUEUE,
    }, follow=True)
    assert [str(m) for m in response.context["messages"]] == ["Assigned 2 receipt(s) to bob."]
    row = ReviewAssignment.objects.get(receipt=receipts[0])
    assert (row.assigned_to, row.assigned_by, row.held_by) == (bob, auditor, None)
    assert queued(signed_in(bob), assigned="me") == ids(receipts[0], receipts[2])
    assert queued(client, assigned="me") == []
    assert queued(client, assigned="nobody") == ids(receipts[1], receipts[3])
    client.post(f"{QUEUE}assign/", {"receipt": ids(receipts[0]), "auditor": ""})
    assert queued(client, assigned="nobody") == ids(receipts[0], receipts[1], receipts[3])
    # Only an auditor can be given receipts.
    User.objects.create_user("mallory", is_staff=False)
    refused = client.post(f"{QUEUE}assign/", {"receipt": ids(receipts[1]), "auditor": "mallory"},
                          follow=True)
    assert [str(m) for m in refused.context["messages"]] == [
        "Choose receipts, and an auditor or nobody."
    ]
    assert client.get(f"{QUEUE}assign/").status_code == 405

"""The auditor's lists in the admin: the receipt list with each receipt's verification state
(recomputed for the rows shown, at the cost verifying them needs and no more), search by the
short id, the whole id or a link in both lists, the export of the whole record, a date range
or one reviewer's decisions as CSV and JSON with each row's signed bytes, the decision list's
words after a key compromise, and the README's one command that makes an auditor."""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from receiptsite.integrity import keys
from receiptsite.ledger.verification import verification_json
from receiptsite.receipts.models import Receipt, ReviewDecision, SigningKey
from receiptsite.review import states
from receiptsite.review.services import decision_record
from receiptsite.withdrawal.withdrawals import receipt_withdraw
from tests.conftest import SITE, Producer, lift_guard, mark_compromised, signed_in, tamper
from tests.db.test_decisions_survive_compromise import (  # noqa: F401 - fixtures
    compromise,
    own_files,
    receipt,
    story,
)
from tests.db.test_key_compromise import tick

pytestmark = pytest.mark.db

ROOT = Path(__file__).resolve().parents[2]
RECEIPTS = "/admin/receipts/receipt/"
DECISIONS = "/admin/receipts/reviewdecision/"


CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def statements(captured: CaptureQueriesContext) -> int:
    """The statements the code chose to run (transaction control is not counted, as in
    tests/db/test_query_counts.py)."""
    return sum(not q["sql"].upper().startswith(CONTROL) for q in captured.captured_queries)


def row_of(page: str, text: str) -> str:
    """The table row of the changelist that holds `text`."""
    at = page.index(text)
    return page[page.rindex("<tr", 0, at): page.index("</tr>", at)]


# --- the receipt list -----------------------------------------------------------------------


def test_the_receipt_list_shows_each_receipts_verification_state(
    auditor: User, producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    valid = producer.publish(idempotency_key="valid")["id"]
    altered = producer.publish(idempotency_key="altered")["id"]
    withdrawn = producer.publish(idempotency_key="withdrawn")["id"]
    tamper(altered, outcome="succeeded", subject_name="someone else")
    receipt_withdraw(receipt=Receipt.objects.get(public_id=withdrawn), reason="secret",
                     auditor=auditor)
    page = html.unescape(signed_in(auditor).get(RECEIPTS).content.decode())
    assert "Checks out?" in page
    assert 'title="valid: every check passed">valid</span>' in row_of(page, valid[:8])
    bad = row_of(page, altered[:8])
    assert "⚠ invalid: does not verify" in bad
    assert "What the altered record now says: succeeded" in bad
    assert "✓" not in bad
    assert "withdrawn" in row_of(page, withdrawn[:8])
    assert "— (erased)" in row_of(page, withdrawn[:8])
    # A receipt the log has not signed a checkpoint for yet is pending (as the verification
    # says it, which this stands in for).
    real = states.verification_json

    def pending(shown: Any) -> dict[str, Any]:
        result = dict(real(shown))
        result["status"] = "pending"
        return result

    monkeypatch.setattr(states, "verification_json", pending)
    page = html.unescape(signed_in(auditor).get(RECEIPTS).content.decode())
    assert 'title="pending: being logged">pending</span>' in row_of(page, valid[:8])


def test_the_receipt_page_in_the_admin_never_shows_an_altered_receipt_as_fact(
    auditor: User, producer: Producer
) -> None:
    answer = producer.publish()
    tamper(answer["id"], outcome="failed")
    altered = Receipt.objects.get(public_id=answer["id"])
    page = html.unescape(
        signed_in(auditor).get(f"{RECEIPTS}{altered.pk}/change/").content.decode()
    )
    summary = page[page.index('<div class="receipt-summary">'):]
    summary = summary[: summary.index("</div>")]
    assert "Warning: this receipt does not verify" in summary
    assert "What the altered record now says:" in summary
    assert "✓" not in summary
    assert f"/admin/receipts/reviewdecision/add/?receipt={altered.public_id}" in summary


def test_the_receipt_list_costs_what_verifying_its_rows_needs_and_no_more(
    auditor: User, producer: Producer, other_producer: Producer
) -> None:
    """Each row shown costs what verifying it costs (the latest checkpoint and its inclusion
    proof, ledger/verification.py); its tenant, key, log entry and withdrawal come with the
    page's one query."""
    for n in range(3):
        producer.publish(idempotency_key=f"acme/{n}")
    other_producer.publish(idempotency_key="globex/0")
    one = Receipt.objects.for_verification().first()
    assert one is not None
    with CaptureQueriesContext(connection) as verifying:
        verification_json(one)
    client = signed_in(auditor)
    acme, globex = (Receipt.objects.get(idempotency_key=k).tenant_id
                    for k in ("acme/0", "globex/0"))

    def cost(tenant: int) -> int:
        with CaptureQueriesContext(connection) as page:
            assert client.get(RECEIPTS, {"tenant__id__exact": tenant}).status_code == 200
        return statements(page)

    assert cost(acme) - cost(globex) == 2 * statements(verifying)
    # Pinned: the page beside its rows' verification: the session, the user, their
    # permissions (2), the tenant filter's choices, two counts, the page of rows with their
    # tenants, keys, log entries and withdrawals (one query), the other filters' choices (3),
    # the date hierarchy (2); on PostgreSQL the auditors' scope sets `app.auditor` too.
    assert cost(globex) - statements(verifying) == (14 if connection.vendor == "postgresql"
                                                     else 13)


# --- search -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "term",
    ["{short}", "{short_upper}", "{id}", "{hex}", "{site}/run/{id}", "/run/{id}#integrity",
     "{site}/api/receipt/{id}/verify", "{start13}"],
)
def test_both_lists_find_a_receipt_by_short_id_whole_id_or_pasted_link(
    auditor: User, producer: Producer, term: str
) -> None:
    wanted, other = (producer.publish(idempotency_key=k)["id"] for k in ("wanted", "other"))
    target = Receipt.objects.get(public_id=wanted)
    decision_record(receipt=target, reviewer=auditor, conclusion="accepted")
    decision_record(receipt=Receipt.objects.get(public_id=other), reviewer=auditor,
                    conclusion="rejected", exception_note="not this one")
    q = term.format(short=wanted[:8], short_upper=wanted[:8].upper(), id=wanted,
                    hex=target.public_id.hex, site=SITE, start13=wanted[:13])
    client = signed_in(auditor)
    found = client.get(RECEIPTS, {"q": q}).context["cl"].result_list
    assert [str(r.public_id) for r in found] == [wanted]
    decisions = client.get(DECISIONS, {"q": q}).context["cl"].result_list
    assert [d.receipt_id for d in decisions] == [target.pk]


def test_search_words_still_find_workflows_and_notes(auditor: User, producer: Producer) -> None:
    answer = producer.publish(workflow_id="wf-deadbeef-7")
    decision_record(receipt=Receipt.objects.get(public_id=answer["id"]), reviewer=auditor,
                    conclusion="rejected", exception_note="figures are wrong")
    client = signed_in(auditor)
    assert client.get(RECEIPTS, {"q": "deadbeef"}).context["cl"].result_count == 1
    assert client.get(DECISIONS, {"q": "figures"}).context["cl"].result_count == 1


# --- the decisions list ---------------------------------------------------------------------


def test_the_decisions_list_shows_short_columns_that_fit_beside_the_filters(
    auditor: User, producer: Producer
) -> None:
    target = Receipt.objects.get(public_id=producer.publish()["id"])
    first = decision_record(receipt=target, reviewer=auditor, conclusion="needs_follow_up")
    decision_record(receipt=target, reviewer=auditor, conclusion="accepted", supersedes=first)
    response = signed_in(auditor).get(DECISIONS)
    headers = [str(h["text"]).capitalize() for h in response.context["result_headers"]]
    assert headers == ["Decision", "Receipt", "Conclusion", "Reviewer", "Date (utc)",
                       "Corrects", "In the record"]
    page = html.unescape(response.content.decode())
    row = row_of(page, f"#{first.pk + 1}<")
    assert f"<code>{str(target.public_id)[:8]}</code>" in row
    assert f"#{first.pk}" in row and "sound" in row
    assert str(target.public_id) not in re.sub(r'title="[^"]*"', "", row)  # only the short id


# --- the export ---------------------------------------------------------------------------


@pytest.fixture
def decided(producer: Producer, auditor: User) -> dict[str, Any]:
    """Three decisions: two by ada, one by bob."""
    bob = User.objects.create_user("bob", is_staff=True)
    bob.groups.add(Group.objects.get(name="Auditors"))
    target = Receipt.objects.get(public_id=producer.publish()["id"])
    made = [
        decision_record(receipt=target, reviewer=auditor, conclusion="needs_follow_up",
                        follow_up="=cmd|' /C calc'!A0"),
        decision_record(receipt=target, reviewer=bob, conclusion="rejected",
                        exception_note="wrong"),
    ]
    made.append(decision_record(receipt=target, reviewer=auditor, conclusion="accepted",
                                supersedes=made[1]))
    return {"decisions": made, "bob": bob, "receipt": target}


def export_csv(client: Client, **params: str) -> list[dict[str, str]]:
    response = client.get(f"{DECISIONS}export.csv", params)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def published_keys(client: Client) -> dict[str, bytes]:
    document = client.get("/.well-known/receipt-keys.json").json()
    return {k["kid"]: base64.urlsafe_b64decode(k["x"] + "==") for k in document["keys"]}


def test_the_export_without_dates_is_the_whole_record_each_row_with_its_signed_bytes(
    auditor: User, decided: dict[str, Any]
) -> None:
    client = signed_in(auditor)
    response = client.get(f"{DECISIONS}export.csv", {"from": "", "to": "", "reviewer": ""})
    assert 'filename="review-decisions-whole-record.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [int(r["decision_id"]) for r in rows] == [d.pk for d in decided["decisions"]]
    public = published_keys(client)
    for row in rows:
        data = base64.b64decode(row["signed_document_base64"])
        assert data == row["signed_document"].encode()
        assert hashlib.sha256(data).hexdigest() == row["decision_hash"]
        assert keys.verify_signature(public[row["signing_key"]], data,
                                     base64.b64decode(row["signature"]))
        assert json.loads(data)["decision_id"] == int(row["decision_id"])
        assert row["record_check"] == "sound"
    assert rows[0]["follow_up"] == "'=cmd|' /C calc'!A0"  # kept from running in a spreadsheet


def test_the_json_export_holds_the_same_rows_typed_with_the_records_check(
    auditor: User, decided: dict[str, Any]
) -> None:
    client = signed_in(auditor)
    rows = export_csv(client)
    response = client.get(f"{DECISIONS}export.json")
    assert response["Content-Type"] == "application/json"
    assert 'filename="review-decisions-whole-record.json"' in response["Content-Disposition"]
    document = response.json()
    assert document["format"] == "review-decisions-export/v1"
    assert document["filter"] == {"from": None, "to": None, "reviewer": None}
    assert document["record"]["sound"] is True and document["record"]["decisions"] == 3
    assert document["record"]["head_hash"] == rows[-1]["decision_hash"]
    assert len(document["decisions"]) == 3
    for row, typed in zip(rows, document["decisions"], strict=True):
        assert list(typed) == list(row)
        assert typed["decision_id"] == int(row["decision_id"])
        assert typed["position"] == int(row["position"])
        assert typed["signed_document_base64"] == row["signed_document_base64"]
        assert typed["signature"] == row["signature"]
        assert typed["signing_key"] == row["signing_key"]
    assert document["decisions"][0]["supersedes"] is None
    assert document["decisions"][2]["supersedes"] == decided["decisions"][1].pk
    assert document["decisions"][0]["follow_up"] == "=cmd|' /C calc'!A0"  # JSON runs nothing


def test_the_export_of_one_reviewers_decisions(auditor: User, decided: dict[str, Any]) -> None:
    client = signed_in(auditor)
    rows = export_csv(client, reviewer="bob")
    assert [int(r["decision_id"]) for r in rows] == [decided["decisions"][1].pk]
    response = client.get(f"{DECISIONS}export.json", {"reviewer": "ada"})
    assert 'filename="review-decisions-by-ada.json"' in response["Content-Disposition"]
    assert [d["reviewer"] for d in response.json()["decisions"]] == ["ada", "ada"]
    assert client.get(f"{DECISIONS}export.csv", {"reviewer": "nobody"}).status_code == 400


def test_the_export_of_a_date_range_either_end_open(
    auditor: User, decided: dict[str, Any]
) -> None:
    client = signed_in(auditor)
    today = decided["decisions"][0].reviewed_at.date().isoformat()
    assert len(export_csv(client, **{"from": today})) == 3
    assert len(export_csv(client, to=today)) == 3
    assert export_csv(client, **{"from": "2000-01-01", "to": "2000-01-02"}) == []
    both = client.get(f"{DECISIONS}export.csv", {"from": today, "to": today, "reviewer": "bob"})
    assert f'filename="review-decisions-{today}-to-{today}-by-bob.csv"' in (
        both["Content-Disposition"]
    )
    assert client.get(f"{DECISIONS}export.csv", {"from": "yesterday"}).status_code == 400
    assert client.get(f"{DECISIONS}export.json",
                      {"from": "2001-01-02", "to": "2001-01-01"}).status_code == 400


def test_the_export_form_needs_no_dates_and_offers_csv_json_and_a_reviewer(
    auditor: User, decided: dict[str, Any]
) -> None:
    page = signed_in(auditor).get(DECISIONS).content.decode()
    form = page[page.index('<form method="get" class="desk-export"'):]
    form = form[: form.index("</form>")]
    assert "required" not in form
    assert 'formaction="export.csv"' in form and 'formaction="export.json"' in form
    assert '<option value="bob">bob</option>' in form


# --- after a key compromise, the list's words ---------------------------------------------------


def listing(client: Client) -> str:
    return html.unescape(client.get(DECISIONS).content.decode())


def test_after_a_compromise_a_vouched_decision_says_by_which_key_and_that_the_vouch_repairs_it(
    story: dict[str, Any], auditor: User  # noqa: F811
) -> None:
    old = story["old"]
    compromise(old.kid, story["at"])
    new = SigningKey.objects.get(status=SigningKey.ACTIVE)
    page = listing(signed_in(auditor))
    assert ("4 of them were signed by a key since compromised, and count because the key "
            f"that took over vouches for them ({new.kid}): that vouch is what repairs them."
            ) in page
    assert "not as it was signed" not in page
    assert "manage.py" not in page and "checkdecisions" not in page
    decision = story["decisions"][3]
    assert (f"Decision {decision.pk} is vouched for: it was signed by the key {old.kid}, which "
            f"was compromised since, and the key {new.kid} that took over signed its bytes "
            "again on ") in page
    assert "That vouch is what keeps it counting." in page
    assert row_of(page, f"#{decision.pk}<").count("counts on a vouch") == 1


def test_a_decision_the_new_key_left_out_says_what_to_do_and_whom_to_ask(
    story: dict[str, Any], auditor: User  # noqa: F811
) -> None:
    old, decisions = story["old"], story["decisions"]
    lift_guard(ReviewDecision._meta.db_table)
    ReviewDecision.objects.filter(pk=decisions[1].pk).update(follow_up="Forget the e-mail")
    compromise(old.kid, story["at"])
    page = listing(signed_in(auditor))
    assert "The record of review decisions does not check out. 1 decision(s) were changed" in page
    assert (f"Decision {decisions[1].pk} was changed in the database after it was signed: it "
            "no longer reads as it was signed, and it does not count.") in page
    assert (f"When its key {old.kid} was compromised, the key that took over left it out: it "
            "vouches only for decisions that still check out.") in page
    assert "record a new decision on its receipt" in page
    assert "tell the site's operator (whoever runs its server and database)" in page
    assert (f'decision {decisions[1].pk} (position 1) was changed: follow_up was "Ask about '
            'the e-mail", is "Forget the e-mail"') in page
    assert "manage.py" not in page and "Run " not in page


def test_before_the_vouch_an_honest_decision_is_not_called_changed_and_the_list_says_whom_to_ask(
    story: dict[str, Any], auditor: User  # noqa: F811
) -> None:
    """Marked compromised as of T, before `compromisekey` vouched: every decision is as it was
    signed, and what repairs it is the operator's key-compromise procedure."""
    tick()
    mark_compromised(story["old"].kid, at=None)
    decision = story["decisions"][0]
    page = listing(signed_in(auditor))
    assert "rest on a compromised key that no key vouches for yet" in page
    assert (f"Decision {decision.pk} is as it was signed, but it was signed by the key "
            f"{story['old'].kid}, which was compromised since") in page
    assert ("Only the site's operator can run it: ask the site's operator (whoever runs its "
            "server and database).") in page
    assert "not as it was signed" not in page and "manage.py" not in page
    assert "key compromised, no vouch yet" in row_of(page, f"#{decision.pk}<")


# --- the README's one command ---------------------------------------------------------------


def test_the_readmes_createauditor_commands_make_an_auditor_who_signs_in(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (ROOT / "README.md").read_text()
    lines = [line for line in readme.splitlines() if "manage.py createauditor" in line]
    assert lines, "the README shows no createauditor command"
    noinput = [line for line in lines if "--noinput" in line.split("#")[0]]
    assert noinput, "the README shows no createauditor command that asks nothing"
    for n, line in enumerate(noinput):
        command = shlex.split(line.split("#")[0])
        assignments = dict(word.split("=", 1) for word in command if "=" in word
                           and not word.startswith("-"))
        words = [w for w in command if "=" not in w or w.startswith("-")]
        assert words[:2] == [".venv/bin/python", "manage.py"] and words[2] == "createauditor"
        monkeypatch.setenv("DJANGO_AUDITOR_PASSWORD",
                           assignments.get("DJANGO_AUDITOR_PASSWORD", "a-long-pass-1"))
        username = f"auditor{n}"
        arguments = [username if w == "ada" else w for w in words[3:]]
        call_command("createauditor", *arguments, stdout=io.StringIO())
        user = User.objects.get(username=username)
        assert user.is_staff and user.groups.filter(name="Auditors").exists()
        client = Client()
        signed = client.post("/admin/login/?next=/admin/receipts/reviewassignment/", {
            "username": username, "password": os.environ["DJANGO_AUDITOR_PASSWORD"],
            "next": "/admin/receipts/reviewassignment/",
        })
        assert signed.status_code == 302, signed.content[:2000]
        assert client.get("/admin/receipts/reviewassignment/").status_code == 200

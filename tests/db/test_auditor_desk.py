"""The auditor's desk: the Auditors group, recording a review on the page, the CSV export."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review.services import decision_record
from tests.conftest import Producer, signed_in

pytestmark = pytest.mark.db


@pytest.fixture
def receipt(producer: Producer) -> Receipt:
    return Receipt.objects.get(public_id=producer.publish()["id"])


def test_the_auditors_group_has_exactly_what_auditors_need(db: None) -> None:
    group = Group.objects.get(name="Auditors")
    assert sorted(group.permissions.values_list("codename", flat=True)) == [
        "add_reviewdecision", "add_withdrawal", "change_reviewassignment", "view_auditentry",
        "view_failedauthentication", "view_prunepermit", "view_receipt",
        "view_reviewassignment", "view_reviewdecision", "view_tenant", "view_withdrawal",
    ]


def test_an_auditor_records_a_review_on_the_page(auditor: User, receipt: Receipt) -> None:
    client = signed_in(auditor)
    page = client.get(f"/run/{receipt.public_id}").content.decode()
    assert "Record a review" in page and "csrfmiddlewaretoken" in page
    response = client.post(
        f"/run/{receipt.public_id}/decisions",
        {"conclusion": "needs_follow_up", "follow_up": "Call the client about the e-mail",
         "output_hash": receipt.output_hash},
    )
    assert response.status_code == 302
    assert response["Location"] == f"/run/{receipt.public_id}#decisions"
    decision = ReviewDecision.objects.get()
    assert decision.reviewer == auditor
    assert decision.output_hash == receipt.output_hash
    assert decision.conclusion == "needs_follow_up"
    handoff = client.get(f"/run/{receipt.public_id}/handoff.txt").content.decode()
    assert "Follow-up:          Call the client about the e-mail\n" in handoff


def test_htmx_gets_the_decisions_list_alone(auditor: User, receipt: Receipt) -> None:
    client = signed_in(auditor)
    response = client.post(
        f"/run/{receipt.public_id}/decisions",
        {"conclusion": "accepted", "output_hash": receipt.output_hash},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="decisions"')
    assert "Accepted" in html and "ada" in html
    assert "<html" not in html


def test_a_correction_supersedes_and_leaves_the_old_decision(
    auditor: User, receipt: Receipt
) -> None:
    first = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    client = signed_in(auditor)
    client.post(f"/run/{receipt.public_id}/decisions",
                {"conclusion": "rejected", "supersedes": first.pk,
                 "output_hash": receipt.output_hash})
    assert ReviewDecision.objects.count() == 2
    newest = ReviewDecision.objects.exclude(pk=first.pk).get()
    assert newest.supersedes == first
    first.refresh_from_db()
    assert first.conclusion == "accepted"
    assert "(superseded)" in client.get(f"/run/{receipt.public_id}").content.decode()


def test_a_review_of_another_hash_is_refused(auditor: User, receipt: Receipt) -> None:
    client = signed_in(auditor)
    response = client.post(f"/run/{receipt.public_id}/decisions",
                           {"conclusion": "accepted", "output_hash": "0" * 64})
    assert response.status_code == 422
    assert "not the one you reviewed" in response.content.decode()
    assert ReviewDecision.objects.count() == 0


@pytest.mark.parametrize("bad", [{"conclusion": "approved"}, {}, {"conclusion": ""}])
def test_a_bad_form_changes_nothing(auditor: User, receipt: Receipt, bad: dict[str, str]) -> None:
    response = signed_in(auditor).post(f"/run/{receipt.public_id}/decisions",
                                       {**bad, "output_hash": receipt.output_hash})
    assert response.status_code == 422
    assert ReviewDecision.objects.count() == 0


def test_staff_without_the_group_cannot_record_a_decision(receipt: Receipt) -> None:
    staff = User.objects.create_user("bob", is_staff=True)
    client = signed_in(staff)
    assert "Record a review" not in client.get(f"/run/{receipt.public_id}").content.decode()
    response = client.post(f"/run/{receipt.public_id}/decisions",
                           {"conclusion": "accepted", "output_hash": receipt.output_hash})
    assert response.status_code == 403
    assert client.get("/admin/receipts/reviewdecision/add/").status_code == 403
    assert ReviewDecision.objects.count() == 0


def test_anonymous_readers_never_see_decisions(client: Client, auditor: User,
                                               receipt: Receipt) -> None:
    decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected",
                    exception_note="secret-ish internal note", follow_up="Call the client")
    html = client.get(f"/run/{receipt.public_id}").content.decode()
    assert "Review decisions" not in html
    assert "secret-ish internal note" not in html and "Call the client" not in html
    assert "Rejected" not in html
    text = client.get(f"/run/{receipt.public_id}/handoff.txt").content.decode()
    assert "Follow-up:          recorded by the auditors (not shown publicly)\n" in text
    response = client.post(f"/run/{receipt.public_id}/decisions",
                           {"conclusion": "accepted", "output_hash": receipt.output_hash})
    assert response.status_code in (403, 302)
    assert ReviewDecision.objects.count() == 1


def test_the_decision_form_needs_csrf(auditor: User, receipt: Receipt) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(auditor)
    response = client.post(f"/run/{receipt.public_id}/decisions",
                           {"conclusion": "accepted", "output_hash": receipt.output_hash})
    assert response.status_code == 403
    assert ReviewDecision.objects.count() == 0


def test_decisions_export_as_csv_over_a_date_range(auditor: User, receipt: Receipt) -> None:
    decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted_with_exception",
                    exception_note="=HYPERLINK(1)", follow_up="none")
    client = signed_in(auditor)
    response = client.get("/admin/receipts/reviewdecision/export.csv",
                          {"from": "2000-01-01", "to": "2999-12-31"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:4] == ["decision_id", "reviewed_at", "reviewer", "conclusion"]
    assert len(rows) == 2
    assert rows[1][2:5] == ["ada", "accepted_with_exception", "'=HYPERLINK(1)"]
    assert rows[1][7] == str(receipt.public_id)
    assert rows[1][11] == rows[1][12] == receipt.output_hash
    empty = client.get("/admin/receipts/reviewdecision/export.csv",
                       {"from": "2000-01-01", "to": "2000-01-02"})
    assert len(list(csv.reader(io.StringIO(empty.content.decode())))) == 1
    assert client.get("/admin/receipts/reviewdecision/export.csv",
                      {"from": "yesterday"}).status_code == 400


def test_the_export_needs_the_view_permission(receipt: Receipt) -> None:
    staff = User.objects.create_user("eve", is_staff=True)
    client = signed_in(staff)
    assert client.get("/admin/receipts/reviewdecision/export.csv").status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_reviewdecision"))
    assert signed_in(User.objects.get(pk=staff.pk)).get(
        "/admin/receipts/reviewdecision/export.csv").status_code == 200


def test_the_admin_filters_by_framework_and_searches_by_trace(
    producer: Producer, auditor: User
) -> None:
    producer.publish(idempotency_key="a", trace_id="trace-abc")
    producer.publish(idempotency_key="b", framework={"name": "crewai"})
    client = signed_in(auditor)
    by_framework = client.get("/admin/receipts/receipt/", {"framework_name": "crewai"})
    assert by_framework.status_code == 200
    assert by_framework.context["cl"].result_count == 1
    by_trace = client.get("/admin/receipts/receipt/", {"q": "trace-abc"})
    assert by_trace.context["cl"].result_count == 1


def test_the_admin_receipt_page_shows_the_plain_summary_and_public_link(
    auditor: User, receipt: Receipt
) -> None:
    html = signed_in(auditor).get(f"/admin/receipts/receipt/{receipt.pk}/change/")
    text = html.content.decode()
    assert html.status_code == 200
    assert "finished: succeeded." in text
    assert f'href="/run/{receipt.public_id}"' in text
    assert "What it does not show" in text


def test_languages_follow_accept_language_and_lang(client: Client, receipt: Receipt) -> None:
    zh = client.get(f"/run/{receipt.public_id}", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert zh["Content-Language"] == "zh-hans"
    assert '<html lang="zh-hans">' in zh.content.decode()
    assert "这份收据显示了什么" in zh.content.decode()
    by_link = client.get(f"/run/{receipt.public_id}", {"lang": "zh-hans"})
    assert by_link["Content-Language"] == "zh-hans"
    assert "Set-Cookie" not in by_link
    english = client.get(f"/run/{receipt.public_id}", {"lang": "en"},
                         headers={"Accept-Language": "zh-CN"})
    assert english["Content-Language"] == "en"
    assert "What this receipt shows" in english.content.decode()
    unknown = client.get(f"/run/{receipt.public_id}", {"lang": "xx"})
    assert unknown["Content-Language"] == "en"
    assert "Accept-Language" in zh["Vary"]


def test_the_check_again_link_works_with_and_without_htmx(client: Client,
                                                         receipt: Receipt) -> None:
    page = client.get(f"/run/{receipt.public_id}").content.decode()
    assert f'href="/run/{receipt.public_id}#integrity"' in page
    assert f'hx-get="/run/{receipt.public_id}?part=verification"' in page
    panel = client.get(f"/run/{receipt.public_id}", {"part": "verification"},
                       headers={"HX-Request": "true"})
    html = panel.content.decode()
    assert html.lstrip().startswith('<div id="server-check"')
    assert "every check passed" in html
    assert "HX-Request" in panel["Vary"]
    full = client.get(f"/run/{receipt.public_id}", {"part": "verification"}).content.decode()
    assert "<html" in full




def test_every_string_of_the_public_pages_has_a_chinese_translation() -> None:
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "receiptsite/locale/zh_Hans"
    for name in ("django", "djangojs"):
        text = (folder / "LC_MESSAGES" / f"{name}.po").read_text()
        entry = r'\n(?:msgctxt (".*")\n)?msgid ((?:".*"\n)+)msgstr ((?:".*"\n)+)'
        entries = re.findall(entry, text)
        assert len(entries) > 20
        untranslated = [i for _, i, s in entries if i.strip() != '""' and s.strip() == '""']
        assert untranslated == []
        assert "#, fuzzy" not in text
        # The committed .mo must be compiled from this .po: every entry reads back the same.
        import gettext

        with open(folder / "LC_MESSAGES" / f"{name}.mo", "rb") as handle:
            catalog = gettext.GNUTranslations(handle)

        def unquote(block: str) -> str:
            joined = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', block))
            return joined.encode().decode("unicode_escape").encode("latin-1").decode()

        for context, msgid, msgstr in entries:
            if msgid.strip() == '""':
                continue
            if context:
                assert catalog.pgettext(unquote(context), unquote(msgid)) == unquote(msgstr)
            else:
                assert catalog.gettext(unquote(msgid)) == unquote(msgstr)

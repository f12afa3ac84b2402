"""The auditor's desk in a real browser (Chromium via Playwright, a live gunicorn): an auditor
made by `manage.py createauditor --noinput` signs in, opens the review queue, filters it,
claims a receipt (a second auditor, in a browser of their own, sees it held), records a
decision (the form refuses "accepted with exception" without its note, and "accepted" on a
tampered receipt), sees it leave the queue, searches by short id and by a pasted link, and
exports the record as CSV and JSON; at 1280 x 800, with no horizontal overflow, and axe finds
no violation on the queue and the form. Then two auditors claim the same receipts at once,
through real connections: each time one of them gets it."""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.test_browser import (
    Watched,
    axe_violations,
    browser,  # noqa: F401 - the fixture
    publish,
    tamper_live,
)
from tests.live.test_decision_chain import Desk
from tests.livesite import LiveSite

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

from playwright.sync_api import Browser, Page, ViewportSize, expect  # noqa: E402

PASSWORD = "a-long-desk-password-19"
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
QUEUE = "/admin/receipts/reviewassignment/"
DECISIONS = "/admin/receipts/reviewdecision/"


@pytest.fixture(scope="module")
def desk_site() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2, env={"DJANGO_AUDITOR_PASSWORD": PASSWORD}) as live:
        valid = publish(live, idempotency_key="desk/valid", workflow_id="wf-desk")
        tampered = publish(live, idempotency_key="desk/tampered", workflow_id="wf-desk")
        other = publish(live, idempotency_key="desk/other", workflow_id="wf-other")
        racing = [publish(live, idempotency_key=f"desk/race/{n}", workflow_id="wf-race")
                  for n in range(4)]
        tamper_live(live, tampered["id"])
        # The README's one command, as an operator runs it (the password from the environment).
        for name in ("ada", "bob"):
            said = live.manage("createauditor", name, "--noinput")
            assert f"{name} was created as an auditor" in said
        yield {"live": live, "valid": valid, "tampered": tampered, "other": other,
               "racing": racing}


def signed_in(chromium: Browser, live: LiveSite, username: str) -> Watched:
    context = chromium.new_context(viewport=VIEWPORT, base_url=live.url, accept_downloads=True)
    watched = Watched(context.new_page())
    page = watched.page
    page.goto(f"/admin/login/?next={QUEUE}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{QUEUE}")
    return watched


def no_horizontal_overflow(page: Page) -> None:
    """Neither the page nor a list's own box (the admin's `.results` scrolls on its own)
    scrolls sideways."""
    widths = page.evaluate(
        "[document.documentElement, ...document.querySelectorAll('.results, .desk-queue')]"
        ".map(e => [e.scrollWidth, e.clientWidth])"
    )
    assert all(scroll <= client for scroll, client in widths), widths


def row(page: Page, receipt_id: str) -> Any:
    return page.locator(f'tr[data-receipt="{receipt_id}"]')


def messages(page: Page) -> str:
    return page.locator("ul.messagelist").inner_text()


def test_an_auditor_walks_through_the_desk(
    browser: Browser,  # noqa: F811
    desk_site: dict[str, Any],
) -> None:
    live = desk_site["live"]
    valid, tampered = desk_site["valid"]["id"], desk_site["tampered"]["id"]
    ada = signed_in(browser, live, "ada")
    page = ada.page

    # The queue: everything awaits a decision; the tampered receipt is flagged, never a fact.
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    assert row(page, valid).count() == 1 and row(page, tampered).count() == 1
    flagged = row(page, tampered).inner_text()
    assert "⚠ invalid: does not verify" in flagged
    assert "What the altered record now says: succeeded" in flagged
    assert "✓" not in flagged
    assert axe_violations(page) == []
    no_horizontal_overflow(page)

    # Filtered: by verification state, then by workflow and tenant.
    page.select_option("select[name=state]", "invalid")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**state=invalid**")
    assert page.locator("tr[data-receipt]").count() == 1 and row(page, tampered).count() == 1
    page.select_option("select[name=state]", "valid")
    page.fill("input[name=workflow]", "wf-desk")
    page.select_option("select[name=tenant]", "acme")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**workflow=wf-desk**")
    assert [r.get_attribute("data-receipt") for r in page.locator("tr[data-receipt]").all()] == [
        valid
    ]
    assert axe_violations(page) == []

    # Claimed: ada holds it; bob, in a browser of his own, sees who holds it and until when.
    row(page, valid).get_by_role("button", name=re.compile("^Claim")).click()
    expect(page.locator("ul.messagelist")).to_contain_text("You hold " + valid[:8])
    assert "You hold it until" in row(page, valid).inner_text()
    until = re.search(r"until (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", messages(page))
    assert until is not None
    bob = signed_in(browser, live, "bob")
    held = row(bob.page, valid)
    assert f"Held by ada until {until.group(1)}" in held.inner_text()
    assert held.get_by_role("button", name=re.compile("^Claim")).count() == 0
    assert held.get_by_role("link", name=re.compile("^Record a decision")).count() == 0
    bob.assert_clean(live.url)
    bob.page.context.close()

    # The form: no conclusion chosen at first; "accepted with exception" needs its note.
    row(page, valid).get_by_role("link", name=re.compile("^Record a decision")).click()
    page.wait_for_url(f"**{DECISIONS}add/**")
    assert page.locator("#id_conclusion").input_value() == ""
    assert page.locator("#id_receipt").input_value() == valid
    assert axe_violations(page) == []
    no_horizontal_overflow(page)
    page.select_option("#id_conclusion", "accepted_with_exception")
    page.locator("input[name=_save]").click()
    expect(page.locator(".errorlist")).to_contain_text(
        "“Accepted with exception” needs an exception note"
    )
    assert axe_violations(page) == []
    page.fill("#id_exception_note", "Sent a day late; the client agreed.")
    page.locator("input[name=_save]").click()
    page.wait_for_url(f"**{QUEUE}")
    expect(page.locator("ul.messagelist")).to_contain_text(
        f"Recorded your decision on {valid[:8]}: Accepted with exception."
    )
    assert row(page, valid).count() == 0  # it left the queue

    # "Accepted" on the tampered receipt is refused, with the reason.
    row(page, tampered).get_by_role("link", name=re.compile("^Record a decision")).click()
    page.wait_for_url(f"**{DECISIONS}add/**")
    assert "⚠ This receipt does not verify" in page.inner_text("#content")
    page.select_option("#id_conclusion", "accepted")
    page.locator("input[name=_save]").click()
    refusal = page.locator("ul.errorlist.nonfield")
    expect(refusal).to_contain_text("This receipt does not verify (its verification status is "
                                    "invalid: SHA-256 of the stored bytes differs")
    expect(refusal).to_contain_text("so “accepted” is refused")
    no_horizontal_overflow(page)

    # The decisions list: searched by short id and by a pasted link; its columns fit.
    for term in (valid[:8], f"{live.url}/run/{valid}"):
        page.goto(DECISIONS)
        page.fill("#searchbar", term)
        with page.expect_navigation():
            page.locator("#searchbar").press("Enter")
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 1, term
        assert valid[:8] in rows.inner_text()
    page.goto(DECISIONS)
    for column in ("conclusion", "reviewer", "reviewed_on"):
        box = page.locator(f"#result_list th.column-{column}").bounding_box()
        assert box is not None and box["x"] + box["width"] <= VIEWPORT["width"], column
    no_horizontal_overflow(page)
    assert axe_violations(page) == []
    # And the receipt list, by short id.
    page.goto("/admin/receipts/receipt/")
    page.fill("#searchbar", tampered[:8])
    with page.expect_navigation():
        page.locator("#searchbar").press("Enter")
    assert page.locator("#result_list tbody tr").count() == 1
    assert "⚠ invalid: does not verify" in page.inner_text("#result_list")
    no_horizontal_overflow(page)

    # The export, with no dates: the whole record, each row with its signed bytes.
    page.goto(DECISIONS)
    with page.expect_download() as csv_download:
        page.get_by_role("button", name="Export CSV").click()
    assert csv_download.value.suggested_filename == "review-decisions-whole-record.csv"
    text = open(csv_download.value.path(), encoding="utf-8").read()  # noqa: SIM115
    rows_csv = list(csv.DictReader(io.StringIO(text)))
    assert [r["receipt_id"] for r in rows_csv] == [valid]
    assert rows_csv[0]["conclusion"] == "accepted_with_exception"
    assert rows_csv[0]["signed_document_base64"] and rows_csv[0]["signature"]
    assert rows_csv[0]["record_check"] == "sound"
    with page.expect_download() as json_download:
        page.get_by_role("button", name="Export JSON").click()
    document = json.loads(open(json_download.value.path(), encoding="utf-8").read())  # noqa: SIM115
    assert document["record"]["sound"] is True
    assert [d["decision_hash"] for d in document["decisions"]] == [
        rows_csv[0]["decision_hash"]
    ]
    ada.assert_clean(live.url)
    page.context.close()


def test_two_auditors_claiming_at_once_get_one_winner_each_time(
    desk_site: dict[str, Any],
) -> None:
    live = desk_site["live"]
    desks = {name: Desk(live, name, PASSWORD) for name in ("ada", "bob")}
    page = {name: desk.get(QUEUE) for name, desk in desks.items()}
    for receipt in desk_site["racing"]:
        barrier = threading.Barrier(2, timeout=30)
        answers: dict[str, int] = {}

        def claim(name: str, receipt: dict[str, Any] = receipt,
                  barrier: threading.Barrier = barrier, answers: dict[str, int] = answers
                  ) -> None:
            barrier.wait()
            status, _ = desks[name].post(f"{QUEUE}{receipt['id']}/hold/",
                                         {"action": "claim"}, page=page[name])
            answers[name] = status

        threads = [threading.Thread(target=claim, args=(name,)) for name in desks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == {"ada": 302, "bob": 302}
        said = {name: desk.get(QUEUE) for name, desk in desks.items()}
        short = receipt["id"][:8]
        won = [name for name, text in said.items() if f"You hold {short} for review" in text]
        assert len(won) == 1, said
        (winner,) = won
        loser = ({"ada", "bob"} - {winner}).pop()
        shown = re.findall(r"<li class=\"[a-z]+\">(.*?)</li>", said[loser])
        assert f"{winner} holds {short} for review until" in said[loser], shown
        holder = re.search(rf'data-receipt="{receipt["id"]}"[^>]*data-held-by="(\w+)"',
                           said[loser])
        assert holder is not None and holder.group(1) == winner

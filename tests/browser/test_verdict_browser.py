"""The verdict first, and a receipt that does not verify never shown as fact: the reviewer's
page in Chromium (Playwright) against live gunicorns, in every state the site has (valid, a
tampered column, tampered bytes, withdrawn, a compromised key before and after, witnessed), on
a phone and a desktop, printed, in English and in Chinese.

- The element that says whether the record checks out (`#verdict`, `data-verdict` = valid,
  invalid or withdrawn) lies within the first screen at 390 × 844 and 1280 × 800, and on the
  first printed page.
- A receipt that does not verify has no success mark anywhere; its page, its hand-off block
  (the page's copy, the copied text, handoff.txt) and the list of a receipt linking to it
  present it as what the altered record now says, each linked receipt with its own verdict.
- Its signature line says that the bytes changed; only a compromised key is blamed on the key.
- Nothing overflows a 320 or 390 px wide screen in any state, after every button.
- The words: plain names, one date form (the reader's time beside UTC), Chinese in Chinese
  form with one word for receipt, the JavaScript catalogue following `?lang=`.
- axe-core finds no violation in any state, viewport or language tested.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from receiptsite.integrity import keys
from tests.browser.test_browser import axe_violations, publish
from tests.browser.test_browser import browser as browser  # the fixture, re-exported
from tests.live.test_check_commands import change_live_bytes, change_live_row
from tests.live.test_witnessing import witnessed_site
from tests.livesite import LiveSite

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

from playwright.sync_api import Browser, BrowserContext, Page, expect  # noqa: E402

PHONE, DESKTOP, NARROW = (390, 844), (1280, 800), (320, 640)
ORIGIN = "verdict-page.test.example/receipts"
# A time as the page writes it in English, and the raw form the page must not show a reader.
ENGLISH_TIME = re.compile(r"\d{1,2} [A-Z][a-z]+ \d{4}, \d\d:\d\d:\d\d UTC")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


# --- the sites: every state ----------------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    """One site, its receipts in each state: valid; `column` published as failed, whose
    outcome column now says succeeded (issue 19's first finding); `bytes`, whose stored bytes
    changed; a `parent` linking to a valid child, an altered one and a withdrawn one; a
    withdrawn receipt."""
    with LiveSite(workers=2) as live:
        states = {
            "valid": publish(live, idempotency_key="valid"),
            "column": publish(live, idempotency_key="column", outcome="failed",
                              subject={"type": "tool", "name": "send_email"}),
            "bytes": publish(live, idempotency_key="bytes"),
            "child-ok": publish(live, idempotency_key="child-ok"),
            "child-bad": publish(live, idempotency_key="child-bad", outcome="failed",
                                 subject={"type": "tool", "name": "send_email"}),
            "child-gone": publish(live, idempotency_key="child-gone"),
            "withdrawn": publish(live, idempotency_key="withdrawn"),
        }
        states["parent"] = publish(
            live, idempotency_key="parent", phase="completion", outcome="uncertain",
            subject={"type": "task", "name": "Audit example.org and report to the client"},
            links={"child_idempotency_keys": ["child-ok", "child-bad", "child-gone"]},
        )
        for name in ("child-gone", "withdrawn"):
            answer = live.post(f"/api/receipts/{states[name]['id']}/withdrawal",
                               {"reason": "personal_data"})
            assert answer.status == 201, answer
        change_live_row(live, states["column"]["id"], "outcome", "succeeded")
        change_live_row(live, states["child-bad"]["id"], "outcome", "succeeded")
        change_live_bytes(live, states["bytes"]["id"], b"12 findings", b"13 findings")
        yield {"live": live, **states}


@pytest.fixture(scope="module")
def compromised(site: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A site whose first key leaked (as tests/browser/test_browser.py makes one): `early`,
    logged before the leak, is signed again by the new key and verifies; `before`, signed by
    the leaked key after it leaked, does not. (`site` first: it collects the static files.)"""
    with LiveSite(workers=2) as live:
        early = publish(live, idempotency_key="early")
        [old] = live.get("/.well-known/receipt-keys.json").json()["keys"]
        leaked_at = live.get(f"/api/receipt/{early['id']}/verify").json()["verified_at"]
        before = publish(live, idempotency_key="before")
        fresh = live.tmp / "rotated-key.pem"
        fresh.write_bytes(keys.generate_private_key_pem())
        fresh.chmod(0o600)
        live.base_env["PREVIOUS_SIGNING_KEY_FILE"] = live.base_env["SIGNING_KEY_FILE"]
        live.base_env["SIGNING_KEY_FILE"] = str(fresh)
        live.stop()
        live._serve()
        publish(live, idempotency_key="after")
        live.manage("compromisekey", f"--at={leaked_at}", "--", old["kid"])
        yield {"live": live, "early": early, "before": before, "leaked_at": leaked_at}


@pytest.fixture(scope="module")
def witnessed(tmp_path_factory: pytest.TempPathFactory,
              site: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A site whose checkpoints two witnesses of the tests' own cosign (2 of 2), as
    tests/browser/test_witnesses_browser.py runs them."""
    tmp = tmp_path_factory.mktemp("verdict-witnessed")
    with witnessed_site(tmp, "all", origin=ORIGIN, interval=1) as made:
        live = made.site
        receipt = publish(live, idempotency_key="witnessed")
        live.manage("witness", "--once")
        answer = live.get(f"/api/receipt/{receipt['id']}/verify").json()
        assert answer["log"]["witnessed"] is not None
        yield {"live": live, "witnessed": receipt}


# state: (which site, which receipt, the verdict it must show)
STATES = {
    "valid": ("site", "valid", "valid"),
    "tampered column": ("site", "column", "invalid"),
    "tampered bytes": ("site", "bytes", "invalid"),
    "linking": ("site", "parent", "valid"),
    "withdrawn": ("site", "withdrawn", "withdrawn"),
    "compromised key": ("compromised", "before", "invalid"),
    "signed again": ("compromised", "early", "valid"),
    "witnessed": ("witnessed", "witnessed", "valid"),
}


@pytest.fixture
def sites(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """The sites a test's state needs, started on first use."""
    return _Sites(request)  # type: ignore[return-value]


class _Sites(dict[str, dict[str, Any]]):
    def __init__(self, request: pytest.FixtureRequest) -> None:
        super().__init__()
        self.request = request

    def __missing__(self, name: str) -> dict[str, Any]:
        value: dict[str, Any] = self.request.getfixturevalue(name)
        self[name] = value
        return value


def receipt_of(sites: dict[str, dict[str, Any]], state: str) -> tuple[LiveSite, dict[str, Any]]:
    which, receipt, _ = STATES[state]
    return sites[which]["live"], sites[which][receipt]


def open_page(browser: Browser, live: LiveSite, path: str, *,
              viewport: tuple[int, int] = DESKTOP, **options: Any) -> tuple[BrowserContext, Page]:
    context = browser.new_context(
        viewport={"width": viewport[0], "height": viewport[1]}, base_url=live.url,
        permissions=["clipboard-read", "clipboard-write"], **options,
    )
    page = context.new_page()
    response = page.goto(path)
    assert response is not None and response.status in (200, 410)
    return context, page


def verify_in_browser(page: Page) -> None:
    """Click "Verify in this browser" and wait until its last check has answered."""
    page.locator("#verify-button").click()
    expect(page.locator("#verify-button")).to_be_enabled(timeout=20_000)
    page.locator("#browser-results li").nth(3).wait_for(timeout=20_000)


def visible_text(page: Page) -> str:
    """The text a reviewer reads: the page's, but for commands, code and the details."""
    text: str = page.evaluate(
        "(() => { const copy = document.querySelector('main').cloneNode(true);"
        " copy.querySelectorAll('pre, code, details, .technical').forEach(e => e.remove());"
        " return copy.innerText; })()"
    )
    return text


# --- 1. the verdict first --------------------------------------------------------------------


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390x844", "1280x800"])
@pytest.mark.parametrize("state", list(STATES))
def test_the_verdict_is_on_the_first_screen(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str, viewport: tuple[int, int]
) -> None:
    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}", viewport=viewport)
    verdict = page.locator("#verdict")
    assert verdict.get_attribute("data-verdict") == STATES[state][2]
    assert verdict.is_visible()
    box = verdict.bounding_box()
    assert box is not None
    assert box["x"] >= 0 and box["y"] >= 0
    assert box["x"] + box["width"] <= viewport[0]
    assert box["y"] + box["height"] <= viewport[1], (state, box)
    assert axe_violations(page) == []
    context.close()


@pytest.mark.parametrize("state", ["tampered bytes", "compromised key", "withdrawn", "valid"])
def test_the_verdict_is_on_the_first_screen_of_a_phone_in_chinese(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str
) -> None:
    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}?lang=zh-hans",
                              viewport=PHONE, locale="zh-CN", color_scheme="dark")
    box = page.locator("#verdict").bounding_box()
    assert box is not None and box["y"] + box["height"] <= PHONE[1], box
    assert axe_violations(page) == []
    context.close()


VERDICT_WORDS = {
    "valid": "This receipt checks out.",
    "tampered bytes": "Warning: this receipt does not verify",
    "compromised key": "Warning: this receipt does not verify",
    "withdrawn": "This receipt was withdrawn",
}


@pytest.mark.parametrize("state", list(VERDICT_WORDS))
def test_the_verdict_is_on_the_first_printed_page(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str, tmp_path: Path
) -> None:
    import pdfplumber

    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}")
    page.emulate_media(media="print")
    # An A4 page at 96 px an inch, with the 1 cm margins the PDF below is printed with.
    content = (794 - 76, 1123 - 76)
    page.set_viewport_size({"width": content[0], "height": content[1]})
    box = page.locator("#verdict").bounding_box()
    assert box is not None and box["y"] + box["height"] <= content[1], box
    pdf = page.pdf(format="A4", margin={"top": "1cm", "right": "1cm", "bottom": "1cm",
                                        "left": "1cm"})
    with pdfplumber.open(io.BytesIO(pdf)) as printed:
        first = " ".join((printed.pages[0].extract_text() or "").split())
        later = " ".join(" ".join((p.extract_text() or "").split()) for p in printed.pages[1:])
    assert VERDICT_WORDS[state] in first
    assert VERDICT_WORDS[state] not in later
    context.close()


# --- 2. never shown as fact --------------------------------------------------------------------

UNVERIFIED = ["tampered column", "tampered bytes", "compromised key"]


@pytest.mark.parametrize("state", UNVERIFIED)
def test_a_receipt_that_does_not_verify_is_never_shown_as_fact(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str
) -> None:
    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}")
    heading = page.locator("h1").inner_text()
    said = ("What the record says, though its signature could be forged:"
            if state == "compromised key" else "What the altered record now says:")
    assert heading.startswith(said), heading
    assert "as the record now says: not verified" in page.locator("p.outcome").inner_text()
    assert page.locator(".outcome-good, .verdict-valid").count() == 0
    assert "✓" not in page.locator("body").inner_text()
    # The page's hand-off block, what "Copy hand-off" copies, and handoff.txt: a warning first.
    block = page.locator("#handoff-block").inner_text()
    first = block.splitlines()[0]
    assert re.fullmatch(r"WARNING: this receipt does not verify \([a-z ,]+\); do not rely on "
                        r"it\.", first), first
    page.get_by_role("button", name="Copy hand-off").click()
    expect(page.locator("button[data-copy]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()").splitlines()[0] == first
    text = live.get(f"/run/{receipt['id']}/handoff.txt").text
    assert text.splitlines()[0] == first and text == block
    verify_in_browser(page)
    assert "✓" not in page.locator("body").inner_text()
    context.close()


def test_the_warning_names_the_checks_that_failed(sites: dict[str, dict[str, Any]]) -> None:
    firsts = {
        state: receipt_of(sites, state)[0].get(
            f"/run/{receipt_of(sites, state)[1]['id']}/handoff.txt").text.splitlines()[0]
        for state in UNVERIFIED
    }
    assert firsts == {
        "tampered column": "WARNING: this receipt does not verify (listed details); do not "
                           "rely on it.",
        # The stored hash no longer is the bytes' (listed details compares it too).
        "tampered bytes": "WARNING: this receipt does not verify (fingerprint, listed details, "
                          "signature, public log); do not rely on it.",
        "compromised key": "WARNING: this receipt does not verify (signature); do not rely on "
                           "it.",
    }


def test_a_receipt_that_verifies_has_no_warning_in_its_handoff(
    sites: dict[str, dict[str, Any]]
) -> None:
    for state in ("valid", "signed again", "witnessed"):
        live, receipt = receipt_of(sites, state)
        assert live.get(f"/run/{receipt['id']}/handoff.txt").text.startswith("Work item:")


def test_a_parent_lists_each_linked_receipt_with_its_own_verdict(
    browser: Browser, site: dict[str, Any]
) -> None:
    context, page = open_page(browser, site["live"], f"/run/{site['parent']['id']}",
                              viewport=PHONE)
    assert page.locator("#verdict").get_attribute("data-verdict") == "valid"
    items = page.locator("ul.links li")
    assert items.count() == 3
    verdicts = [item.locator(".link-verdict").get_attribute("data-link-verdict")
                for item in items.all()]
    # One element says the page's own verdict; a linked receipt's is its own attribute.
    assert page.locator("[data-verdict]").count() == 1
    assert verdicts == ["valid", "invalid", "withdrawn"]
    ok, bad, gone = (item.inner_text() for item in items.all())
    assert "website_audit (end, succeeded)" in ok and "✓ checks out" in ok
    # The altered child: what its record now says, never as fact, and no success mark.
    assert "as the altered record now says: end, failed" in bad and "does not verify" in bad
    assert "✓" not in bad and "succeeded" not in bad
    assert "withdrawn" in gone and "website_audit" not in gone
    assert axe_violations(page) == []
    context.close()


# --- 3. who vouches for what ---------------------------------------------------------------------


def test_the_page_says_who_vouches_for_each_claim_as_the_verification_json_does(
    browser: Browser, sites: dict[str, dict[str, Any]]
) -> None:
    for state in ("valid", "tampered bytes", "witnessed"):
        live, receipt = receipt_of(sites, state)
        answer = live.get(f"/api/receipt/{receipt['id']}/verify").json()
        context, page = open_page(browser, live, f"/run/{receipt['id']}")
        shown = {
            claim.get_attribute("data-claim"): claim.locator("xpath=..").get_attribute(
                "data-basis")
            for claim in page.locator("#vouches .claim").all()
        }
        assert shown == {item["claim"]: item["basis"] for item in answer["assurance"]}
        bytes_claim = page.locator('#vouches [data-claim="bytes_unchanged"]').inner_text()
        assert bytes_claim.endswith("(does not check out)" if state == "tampered bytes"
                                    else "(checks out)")
        context.close()


# --- 6. phone layout ---------------------------------------------------------------------------


def overflow(page: Page) -> dict[str, Any]:
    """How wide the document is, and the elements whose right edge passes the screen's."""
    result: dict[str, Any] = page.evaluate(
        "(() => { const width = window.innerWidth; const over = [];"
        " document.querySelectorAll('body *').forEach(e => { const r = e.getBoundingClientRect();"
        "   if (r.width && r.height && r.right > width + 0.5) over.push("
        "     e.tagName + '.' + e.className + ' ' + Math.round(r.right)); });"
        " return {scroll: document.documentElement.scrollWidth, width: width,"
        "         over: over.slice(0, 10)}; })()"
    )
    return result


def assert_fits(page: Page, after: str) -> None:
    found = overflow(page)
    assert found["scroll"] <= found["width"], (after, found)
    assert found["over"] == [], (after, found)


@pytest.mark.parametrize("width", [320, 390])
@pytest.mark.parametrize("state", list(STATES))
def test_nothing_overflows_a_phone_after_any_button(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str, width: int
) -> None:
    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}", viewport=(width, 700))
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert_fits(page, "loading")
    if STATES[state][2] != "withdrawn":
        verify_in_browser(page)
        assert_fits(page, "Verify in this browser")
        page.get_by_role("button", name="Copy hand-off").click()
        expect(page.locator("button[data-copy]")).to_have_text("Copied")
        assert_fits(page, "Copy hand-off")
        with page.expect_response(lambda r: "part=verification" in r.url):
            page.get_by_role("link", name="Check again").click()
        page.locator("#server-check .checks li").first.wait_for()
        assert_fits(page, "Check again")
    assert axe_violations(page) == []
    context.close()


# --- 7. the signature line says what changed ---------------------------------------------------


def test_the_signature_line_of_a_tampered_receipt_blames_the_changed_bytes_not_the_key(
    browser: Browser, sites: dict[str, dict[str, Any]]
) -> None:
    live, receipt = receipt_of(sites, "tampered bytes")
    context, page = open_page(browser, live, f"/run/{receipt['id']}")
    server = page.locator('#server-check li[data-check="signature"]').inner_text()
    plain = server.split("(signature:")[0]
    assert "bytes were changed after they were signed" in plain and "key" not in plain
    assert "bytes were changed" in page.get_by_role("alert").inner_text()
    verify_in_browser(page)
    in_browser = page.locator('#browser-results li[data-check="signature"]').inner_text()
    assert "not the bytes that were signed" in in_browser and "key" not in in_browser
    context.close()
    # Only a compromised key is blamed on the key.
    live, receipt = receipt_of(sites, "compromised key")
    context, page = open_page(browser, live, f"/run/{receipt['id']}")
    server = page.locator('#server-check li[data-check="signature"]').inner_text()
    assert "reported compromised" in server and "bytes were changed" not in server
    context.close()


# --- 8. the withdrawn page -----------------------------------------------------------------------


def test_the_withdrawn_page_names_the_receipt_when_it_was_recorded_and_how_to_check_a_copy(
    browser: Browser, site: dict[str, Any]
) -> None:
    receipt = site["withdrawn"]
    context, page = open_page(browser, site["live"], f"/run/{receipt['id']}", viewport=PHONE)
    text = page.inner_text("main")
    assert receipt["id"] in text
    recorded = datetime.fromisoformat(receipt["recorded_at"])
    assert f"{recorded.day} {recorded:%B %Y, %H:%M:%S} UTC" in text
    assert receipt["output_hash"] in text
    assert "If you kept a copy" in text
    assert page.locator('pre[data-command^="copy-"]').count() == 3
    assert "sha256sum receipt.json" in page.locator('pre[data-command="copy-1"]').inner_text()
    assert axe_violations(page) == []
    context.close()


# --- 5. words ------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["valid", "tampered bytes", "compromised key", "witnessed"])
def test_the_page_speaks_plainly(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str
) -> None:
    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}")
    verify_in_browser(page)
    text = visible_text(page)
    for jargon in ("Canonical form", "RFC 8785", "Stored record", "Leaf ", "tree of"):
        assert jargon not in text, jargon
    assert ISO_TIME.findall(text) == []
    # "checkpoint" comes with what it is: the log's signed record.
    for found in re.finditer(r"checkpoint", text):
        around = text[max(0, found.start() - 120): found.end() + 120]
        assert "signed record" in around, around
    # Times in one form: the recorded time, the check's, a compromise's, the witnesses'.
    assert ENGLISH_TIME.search(page.locator("p.when").inner_text())
    if state == "compromised key":
        alert = page.get_by_role("alert").inner_text()
        assert ENGLISH_TIME.search(alert) and not ISO_TIME.search(alert)
    local = page.locator("p.when .local-time").inner_text().strip()
    assert re.fullmatch(r"\(your time: \d{1,2} [A-Z][a-z]+ \d{4}, \d\d:\d\d:\d\d\)", local)
    context.close()


def test_the_page_without_javascript_gives_utc_alone(
    browser: Browser, site: dict[str, Any]
) -> None:
    context, page = open_page(browser, site["live"], f"/run/{site['valid']['id']}",
                              java_script_enabled=False)
    assert re.fullmatch(r"Recorded at: " + ENGLISH_TIME.pattern,
                        page.locator("p.when").inner_text())
    context.close()


CHINESE_TIME = re.compile(r"\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d:\d\d UTC")


@pytest.mark.parametrize("state", ["valid", "tampered bytes", "compromised key"])
def test_in_chinese_the_page_the_handoff_and_the_checks_are_translated(
    browser: Browser, sites: dict[str, dict[str, Any]], state: str
) -> None:
    """A browser whose own language is English, on the page's Chinese link: the page and the
    in-browser verifier's words (the JavaScript catalogue follows `?lang=`) are Chinese, with
    one word for receipt and dates in Chinese form."""
    live, receipt = receipt_of(sites, state)
    context, page = open_page(browser, live, f"/run/{receipt['id']}?lang=zh-hans",
                              locale="en-US")
    verify_in_browser(page)
    text = page.inner_text("main")
    assert "回执" not in text and "收据" in text
    assert re.search(r"\d{1,2} [一二三四五六七八九十]+月", text) is None
    assert CHINESE_TIME.search(page.locator("p.when").inner_text())
    local = page.locator("p.when .local-time").inner_text().strip()
    assert re.fullmatch(r"（您的本地时间：\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d:\d\d）", local), local
    # The verifier's lines, in Chinese.
    assert page.locator('#browser-results li[data-check="hash"] strong').inner_text() == "指纹"
    # The hand-off's own words, and every check's sentence, in Chinese.
    block = page.locator("#handoff-block").inner_text()
    assert "工作项：" in block and "Work item" not in block
    for item in page.locator("#server-check .checks li").all():
        plain = item.inner_text().split("(")[0]
        assert re.search(r"[\u4e00-\u9fff]", plain) and not re.search(r"[a-z]{4,}", plain), plain
    if state != "valid":
        assert page.locator("#handoff-block").inner_text().startswith("警告：这份收据未通过验证（")
        assert CHINESE_TIME.search(text) and not ISO_TIME.search(visible_text(page))
    assert axe_violations(page) == []
    context.close()

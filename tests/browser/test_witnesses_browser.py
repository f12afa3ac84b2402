"""Witnesses on the reviewer's page, in Chromium (Playwright) against a live gunicorn whose
checkpoints two real witness processes of the tests' own cosign (tests/witnesses.py) under a
2-of-2 policy: the page says in words who witnessed the log and when, or that nobody has yet;
"Verify in this browser" checks the cosignatures itself, against the keys document's policy,
with Web Crypto; an answer whose cosignature was changed on its way, or that lacks one, fails
there; a browser without Ed25519 says it could not check; axe finds no violation in English
or in Chinese; and nothing overflows a phone's width."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from playwright.sync_api import Browser, Locator, Page, Route

from receiptsite.integrity import cosignature
from receiptsite.integrity.keys import public_raw
from tests.browser.test_browser import Watched, axe_violations, publish
from tests.browser.test_browser import browser as browser  # the fixture, re-exported
from tests.live.test_witnessing import witnessed_site

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

ORIGIN = "witnessed-page.test.example/receipts"
CHECKS = ["hash", "signature", "log inclusion", "checkpoint signature"]
# An older browser: Web Crypto, but no Ed25519 (as tests/browser/test_browser.py has it).
NO_ED25519 = (
    "const original = crypto.subtle.importKey.bind(crypto.subtle);"
    "crypto.subtle.importKey = (format, data, algorithm, ...rest) =>"
    " (algorithm && algorithm.name === 'Ed25519')"
    "   ? Promise.reject(new DOMException('Unsupported', 'NotSupportedError'))"
    "   : original(format, data, algorithm, ...rest);"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The witnesses first (they must know the log's key, made here, under a fixed origin),
    then the policy naming both, then the site, which reads it as it starts. Two receipts are
    witnessed (`witness --once` exits 0 only once both cosigned); a third, published after it,
    is not."""
    tmp = tmp_path_factory.mktemp("witnessed-page")
    with witnessed_site(tmp, "all", origin=ORIGIN, interval=1) as made:
        live = made.site
        publish(live, idempotency_key="witnessed-first")
        witnessed = publish(live, idempotency_key="witnessed")
        live.manage("witness", "--once")
        newer = publish(live, idempotency_key="not-yet-witnessed")
        answer = live.get(f"/api/receipt/{witnessed['id']}/verify").json()
        assert answer["log"]["witnessed"] is not None
        assert live.get(f"/api/receipt/{newer['id']}/verify").json()["log"]["witnessed"] \
            is None
        yield {"live": live, "witnessed": witnessed, "newer": newer,
               "witnesses": made.witnesses, "cosigners": answer["log"]["witnessed"]["cosigners"]}


@pytest.fixture
def watched(browser: Browser, site: dict[str, Any]) -> Iterator[Watched]:
    context = browser.new_context(base_url=site["live"].url)
    yield Watched(context.new_page())
    context.close()


def page_time(stamp: str) -> str:
    """A cosignature time of the verification JSON as the page writes it (English)."""
    when = datetime.fromisoformat(stamp)
    return f"{when.day} {when:%B %Y, %H:%M:%S} UTC"


def browser_time(stamp: str) -> str:
    """...and as the in-browser verifier writes it: the same form."""
    return page_time(stamp)


def witness_line(page: Page, label: str = "witnesses") -> Locator:
    # The line of the check named "witnesses" (`label`: its name in the page's language).
    return page.locator('#browser-results li[data-check="witnesses"]').filter(
        has=page.locator("strong", has_text=label))


def verify_with_witnesses(page: Page, label: str = "witnesses") -> dict[str, str]:
    """Click "Verify in this browser"; once the witnesses' line is there (the last), every
    line's name and result."""
    page.locator("#verify-button").click()  # its name is in the page's language
    witness_line(page, label).wait_for(timeout=20_000)
    return {item.get_attribute("data-check") or "": item.locator(".result").inner_text()
            for item in page.locator("#browser-results li").all()}


def serve_witnessed(page: Page, receipt_id: str, craft: Callable[[str], str]) -> None:
    """Pass the receipt's verification JSON through from the live site with only its
    witnessed checkpoint replaced by craft(the real one)."""
    def handle(route: Route) -> None:
        response = route.fetch()
        answer = response.json()
        witnessed = answer["log"]["witnessed"]
        witnessed["checkpoint"] = craft(witnessed["checkpoint"])
        route.fulfill(response=response, json=answer)

    page.route(f"**/api/receipt/{receipt_id}/verify", handle)


def cosignature_lines(text: str) -> list[str]:
    """The signature lines of a note that are cosignatures (key id, time, signature: 76
    bytes), in order."""
    lines = text[text.rindex("\n\n") + 2 : -1].split("\n")
    return [line for line in lines if len(base64.b64decode(line.split(" ")[2])) == 76]


def flip_last_cosignature(text: str) -> str:
    """The note with one bit of the last cosignature's Ed25519 signature flipped."""
    line = cosignature_lines(text)[-1]
    dash, name, encoded = line.split(" ")
    blob = bytearray(base64.b64decode(encoded))
    blob[-1] ^= 1
    return text.replace(line, f"{dash} {name} {base64.b64encode(bytes(blob)).decode()}")


# --- what the page says -------------------------------------------------------------------


def test_the_page_of_a_witnessed_receipt_names_both_witnesses_and_when(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    page.goto(f"/run/{site['witnessed']['id']}")
    block = page.locator("#witnesses")
    assert block.get_attribute("data-witnessed") == "witnessed"
    text = " ".join(block.inner_text().split())
    assert text.startswith("Witnesses: 2 independent witnesses each confirmed this log: ")
    for witness, cosigner in zip(site["witnesses"], site["cosigners"], strict=True):
        assert cosigner["name"] == witness.name
        assert f"{witness.name} at {page_time(cosigner['time'])}" in text
    assert "Each saw the log's record of 2 receipts, which includes this receipt" in text
    assert "This does not show that what the receipt says happened." in text
    watched.assert_clean(site["live"].url)


def test_a_receipt_published_after_the_last_round_is_not_witnessed_yet(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    page.goto(f"/run/{site['newer']['id']}")
    block = page.locator("#witnesses")
    assert block.get_attribute("data-witnessed") == "pending"
    text = " ".join(block.inner_text().split())
    names = " and ".join(w.name for w in site["witnesses"])
    assert f"This site asks 2 independent witnesses ({names}) to confirm its log" in text
    assert "The witnesses have not yet confirmed a record of the log that includes this " \
        "receipt." in text
    assert "within 1 second of a receipt being recorded" in text
    # The browser's verifier: a neutral line, no failure.
    results = verify_with_witnesses(page)
    assert results == {**dict.fromkeys(CHECKS, "PASS"), "witnesses": "NONE YET"}
    assert "only the site's own signature vouches for the log" in witness_line(page).inner_text()
    watched.assert_clean(site["live"].url)


# --- what the browser checks ------------------------------------------------------------------


def test_verify_in_this_browser_checks_both_cosignatures_and_the_quorum(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    page.goto(f"/run/{site['witnessed']['id']}")
    results = verify_with_witnesses(page)
    assert results == {**dict.fromkeys(CHECKS, "PASS"), "witnesses": "PASS"}
    line = witness_line(page).inner_text()
    assert "2 of the policy's witnesses cosigned the log's record of 2 receipts (which " \
        "includes this one)" in line
    for cosigner in site["cosigners"]:
        assert f"{cosigner['name']} at {browser_time(cosigner['time'])}" in line
    assert "The policy naming them comes from this site." in line
    watched.assert_clean(site["live"].url)


def test_a_cosignature_changed_on_its_way_does_not_verify_in_the_browser(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    receipt_id = site["witnessed"]["id"]
    real = site["live"].get(f"/api/receipt/{receipt_id}/verify").json()["log"]["witnessed"]
    changed = flip_last_cosignature(real["checkpoint"])
    assert changed != real["checkpoint"] and len(cosignature_lines(changed)) == 2
    serve_witnessed(page, receipt_id, flip_last_cosignature)
    page.goto(f"/run/{receipt_id}")
    results = verify_with_witnesses(page)
    assert results == {**dict.fromkeys(CHECKS, "PASS"), "witnesses": "FAIL"}
    last = cosignature_lines(changed)[-1].split(" ")[1]
    assert f"The cosignature of {last} does not verify" in witness_line(page).inner_text()
    watched.assert_clean(site["live"].url)


def test_a_witnessed_checkpoint_short_of_the_quorum_fails_in_the_browser(
    watched: Watched, site: dict[str, Any]
) -> None:
    """One of the two cosignature lines left out: each left verifies, but 2-of-2 is not met."""
    page = watched.page
    receipt_id = site["witnessed"]["id"]

    def one_left(text: str) -> str:
        return text.replace(cosignature_lines(text)[0] + "\n", "")

    serve_witnessed(page, receipt_id, one_left)
    page.goto(f"/run/{receipt_id}")
    assert verify_with_witnesses(page) == {**dict.fromkeys(CHECKS, "PASS"), "witnesses": "FAIL"}
    line = witness_line(page).inner_text()
    assert "Only 1 of the policy's witnesses cosigned" in line
    assert "not enough for the policy's quorum" in line
    watched.assert_clean(site["live"].url)


def serve_policy(page: Page, craft: Callable[[str], str]) -> None:
    """Pass the keys document through with only its witness policy replaced by craft(it)."""
    def handle(route: Route) -> None:
        response = route.fetch()
        document = response.json()
        document["log"]["witness_policy"] = craft(document["log"]["witness_policy"])
        route.fulfill(response=response, json=document)

    page.route("**/.well-known/receipt-keys.json", handle)


def other_key_for(name: str) -> Callable[[str], str]:
    """A policy in which the witness whose key is `name` has another (valid) key."""
    stranger = cosignature.witness_vkey(name, public_raw(Ed25519PrivateKey.generate()))

    def craft(text: str) -> str:
        return "".join(
            f"witness {line.split(' ')[1]} {stranger}\n"
            if line.startswith("witness ") and line.split(" ")[2].startswith(name + "+")
            else line + "\n"
            for line in text.splitlines()
        )

    return craft


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # Only the policy's keys count: the real cosignature of a key it does not name is
        # ignored, as tlog-cosignature says, and 2-of-2 is then short by one.
        ("w2 has another key", "Only 1 of the policy's witnesses cosigned"),
        ("quorum of an undefined group", "cannot be read (line 5: \"nobody\" is not defined"),
        ("a key id that does not match", "the key id does not match the name and key"),
    ],
)
def test_the_cosignatures_are_checked_against_the_policy_of_the_keys_document(
    watched: Watched, site: dict[str, Any], change: str, said: str
) -> None:
    page = watched.page
    w2 = site["witnesses"][1]
    if change == "w2 has another key":
        serve_policy(page, other_key_for(w2.name))
    elif change == "quorum of an undefined group":
        serve_policy(page, lambda text: text.replace("quorum witnesses", "quorum nobody"))
    else:
        name, key_id, key = w2.vkey.split("+", 2)
        wrong = f"{int(key_id, 16) ^ 1:08x}"
        serve_policy(page, lambda text: text.replace(w2.vkey, f"{name}+{wrong}+{key}"))
    page.goto(f"/run/{site['witnessed']['id']}")
    assert verify_with_witnesses(page) == {**dict.fromkeys(CHECKS, "PASS"), "witnesses": "FAIL"}
    assert said in witness_line(page).inner_text()
    watched.assert_clean(site["live"].url)


def test_a_browser_without_ed25519_could_not_check_the_witnesses_and_never_failed(
    browser: Browser, site: dict[str, Any]
) -> None:
    context = browser.new_context(base_url=site["live"].url)
    page = context.new_page()
    page.add_init_script(NO_ED25519)  # the browser's own injection, not a page script
    page.goto(f"/run/{site['witnessed']['id']}")
    results = verify_with_witnesses(page)
    assert results["witnesses"] == "COULD NOT CHECK HERE"
    assert "FAIL" not in page.locator("#browser-results").inner_text()
    assert "cosignatures could not be checked" in witness_line(page).inner_text()
    context.close()


# --- accessible, and on a phone ---------------------------------------------------------------
# In Chinese, the browser's own language too: the JavaScript catalogue (/jsi18n/) follows
# Accept-Language, the page `?lang=` as well.
LANGUAGES = pytest.mark.parametrize(
    ("locale", "query", "label"),
    [("en-US", "", "witnesses"), ("zh-CN", "?lang=zh-hans", "见证方")],
    ids=["english", "chinese"],
)


@LANGUAGES
@pytest.mark.parametrize("which", ["witnessed", "newer"])
def test_axe_finds_no_violation_with_the_witnesses_said_and_checked(
    browser: Browser, site: dict[str, Any], locale: str, query: str, label: str, which: str
) -> None:
    context = browser.new_context(locale=locale, base_url=site["live"].url)
    watched = Watched(context.new_page())
    page = watched.page
    page.goto(f"/run/{site[which]['id']}{query}")
    assert page.locator("#witnesses p").count() >= 2
    assert axe_violations(page) == []
    results = verify_with_witnesses(page, label)
    assert len(results) == 5
    assert axe_violations(page) == []
    watched.assert_clean(site["live"].url)
    context.close()


@LANGUAGES
def test_nothing_overflows_a_390_px_screen_after_verify_in_this_browser(
    browser: Browser, site: dict[str, Any], locale: str, query: str, label: str
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, locale=locale,
                                  base_url=site["live"].url)
    page = context.new_page()
    page.goto(f"/run/{site['witnessed']['id']}{query}")
    results = verify_with_witnesses(page, label)
    passed = "PASS" if locale == "en-US" else "通过"
    assert list(results.values()) == [passed] * 5
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # ...and the integrity section itself fits: no element in it reaches past the screen.
    widest = page.evaluate(
        "Math.max(...Array.from(document.querySelectorAll('#integrity *'),"
        " e => e.getBoundingClientRect().right))"
    )
    assert widest <= 390, widest
    context.close()


def test_each_witness_holds_the_tree_it_cosigned_and_no_newer(site: dict[str, Any]) -> None:
    """The witnesses are real processes the site spoke to over HTTP: each persisted the tree
    of 2 receipts that `witness --once` submitted, not the newer one published after it."""
    for witness in site["witnesses"]:
        assert witness.state()[ORIGIN]["size"] == 2

"""The conformance vectors (vectors/) through the page's own "Verify in this browser".

Debian's Chromium, driven by Playwright, opens a real receipt page of a live site; Playwright
answers the page's two requests (the verification JSON and the keys document) with a vector's
files instead of the site's, and the page's JavaScript (static/js/receipt.js) and the
browser's Web Crypto do all the checking. Each valid vector passes the page's four checks;
each corrupted one fails exactly the page's checks that cover the manifest's failing checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_browser import Watched, publish, verify_in_browser
from tests.browser.test_browser import browser as browser  # the fixture, re-exported
from tests.livesite import LiveSite

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
MANIFEST: dict[str, Any] = json.loads((VECTORS / "manifest.json").read_text("utf-8"))

# The manifest's check names -> the page's. The page does not check canonical form; its "hash"
# also checks that the bytes are the receipt's the page shows, and its "checkpoint signature"
# covers both the checkpoint's content and its signature.
PAGE_CHECK = {
    "hash": "hash",
    "receipt_id": "hash",
    "signature": "signature",
    "log_inclusion": "log inclusion",
    "checkpoint": "checkpoint signature",
    "checkpoint_signature": "checkpoint signature",
}
PAGE_CHECKS = ("hash", "signature", "log inclusion", "checkpoint signature")


def page_expectation(entry: dict[str, Any]) -> dict[str, str]:
    failing = {PAGE_CHECK[name] for name in entry["fails"] if name in PAGE_CHECK}
    return {name: "FAIL" if name in failing else "PASS" for name in PAGE_CHECKS}


def params() -> list[Any]:
    out = []
    for entry in MANIFEST["vectors"]:
        marks: list[Any] = []
        out.append(pytest.param(entry, id=entry["name"], marks=marks))
    return out


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2) as live:
        yield {"live": live, "receipt": publish(live, idempotency_key="browser-vectors")}


@pytest.fixture(scope="module")
def shared_page(browser: Any, site: dict[str, Any]) -> Iterator[Watched]:
    context = browser.new_context(base_url=site["live"].url)
    yield Watched(context.new_page())
    context.close()


@pytest.fixture
def watched(shared_page: Watched) -> Watched:
    """The module's one page, as new for each vector: the routes, errors and requests of the
    vector before are dropped, and each test navigates afresh (a new context for each of the
    71 cost more than the checks themselves: a renderer process each)."""
    shared_page.page.unroute_all()
    for seen in (shared_page.errors, shared_page.requests, shared_page.failed):
        seen.clear()
    return shared_page


def shown_receipt(entry: dict[str, Any]) -> str:
    """The receipt a page showing this vector is for: that of the valid vector it was made
    from (a corrupted vector is named `<valid vector>--<what was changed>`)."""
    base = entry["name"].split("--")[0]
    valid = next(e for e in MANIFEST["vectors"] if e["name"] == base)
    receipt_id: str = json.loads((VECTORS / valid["file"]).read_text("utf-8"))["receipt_id"]
    return receipt_id


def serve_vector(watched: Watched, entry: dict[str, Any]) -> None:
    verification = (VECTORS / entry["file"]).read_text("utf-8")
    keys = (VECTORS / entry["keys"]).read_text("utf-8")
    page = watched.page
    wanted = shown_receipt(entry)

    def as_that_receipts_page(route: Any) -> None:
        # The live page, but for the vector's receipt: the one attribute naming it is changed.
        response = route.fetch()
        body = re.sub(r'data-receipt-id="[^"]*"', f'data-receipt-id="{wanted}"', response.text())
        route.fulfill(response=response, body=body)

    page.route("**/run/*", as_that_receipts_page)
    page.route(
        "**/api/receipt/*/verify",
        lambda route: route.fulfill(status=200, content_type="application/json", body=verification),
    )
    page.route(
        "**/.well-known/receipt-keys.json",
        lambda route: route.fulfill(status=200, content_type="application/json", body=keys),
    )


@pytest.mark.parametrize("entry", params())
def test_the_page_reaches_each_vector_verdict(
    watched: Watched, site: dict[str, Any], entry: dict[str, Any]
) -> None:
    serve_vector(watched, entry)
    page = watched.page
    page.goto(f"/run/{site['receipt']['id']}")
    results = verify_in_browser(page)
    assert results == page_expectation(entry), entry["changed"]
    text = page.inner_text("#browser-results")
    if entry["expected"] == "valid":
        assert "FAIL" not in text and "could not check" not in text.lower()
    else:
        assert "FAIL" in text
    watched.assert_clean(site["live"].url)


def test_the_vectors_really_reach_the_page(watched: Watched, site: dict[str, Any]) -> None:
    """The page shows the vector's hash, not the live receipt's: the routes took effect."""
    entry = next(e for e in MANIFEST["vectors"] if e["name"] == "unicode-start")
    serve_vector(watched, entry)
    page = watched.page
    page.goto(f"/run/{site['receipt']['id']}")
    verify_in_browser(page)
    stated = json.loads((VECTORS / entry["file"]).read_text("utf-8"))["output_hash"]
    assert stated != site["receipt"]["output_hash"]
    assert stated in page.inner_text("#browser-results")

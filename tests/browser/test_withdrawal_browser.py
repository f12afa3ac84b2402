"""A withdrawn receipt's page in a real browser (Chromium via Playwright, a live gunicorn): the
410 page says plainly when, by whom and why, in English and in Chinese, and axe-core finds no
violation in either, in light and dark mode; it loads nothing from elsewhere and breaks no CSP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest

from tests.browser.test_browser import (
    Watched,
    axe_violations,
    browser,  # noqa: F401 - the fixture
    publish,
)
from tests.livesite import LiveSite

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

from playwright.sync_api import Browser  # noqa: E402


@pytest.fixture(scope="module")
def withdrawn_site() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2) as live:
        by_publisher = publish(live, idempotency_key="withdrawn/1")
        answer = live.post(
            f"/api/receipts/{by_publisher['id']}/withdrawal",
            {"reason": "personal_data", "note": "names a customer"},
        )
        assert answer.status == 201, answer
        yield {"live": live, "id": by_publisher["id"], "answer": answer.json()}


@pytest.mark.parametrize(
    ("locale", "scheme", "lang", "words"),
    [
        (
            "en-GB",
            "light",
            "en",
            [
                "This receipt was withdrawn",
                "by the publisher",
                "for personal data",
                "tamper-evident log is kept",
            ],
        ),
        (
            "zh-CN",
            "dark",
            "zh-hans",
            ["此收据已撤回", "由发布者撤回", "个人数据", "防篡改日志中的位置得以保留"],
        ),
    ],
)
def test_the_withdrawn_page_is_plain_and_accessible(
    browser: Browser,  # noqa: F811
    withdrawn_site: dict[str, Any],
    locale: str,
    scheme: Literal["light", "dark"],
    lang: str,
    words: list[str],
) -> None:
    live = withdrawn_site["live"]
    context = browser.new_context(locale=locale, color_scheme=scheme, base_url=live.url)
    watched = Watched(context.new_page())
    page = watched.page
    response = page.goto(f"/run/{withdrawn_site['id']}")
    assert response is not None and response.status == 410
    assert page.locator("html").get_attribute("lang") == lang
    text = page.inner_text("main")
    for word in words:
        assert word in text
    stamp = withdrawn_site["answer"]["withdrawn_at"]
    # The first time the page gives is the withdrawal's (the receipt's recorded time follows).
    assert page.locator("main time").first.get_attribute("datetime") == stamp
    assert "website_audit" not in text  # the erased content is nowhere on the page
    # The withdrawal's signed statement, by its hash, as the verification answer carries it.
    stated = live.get(f"/api/receipt/{withdrawn_site['id']}/verify").json()["statement"]
    assert page.locator("main code.statement-hash").inner_text() == stated["hash"]
    assert axe_violations(page) == []
    # The browser reports the page's own 410 as a failed load; nothing else may fail.
    errors = [e for e in watched.errors if "status of 410" not in e]
    assert errors == [] and watched.csp_violations() == []
    assert all(url.startswith(live.url) for url in watched.requests), watched.requests
    context.close()


def test_the_language_link_keeps_the_410(
    browser: Browser,  # noqa: F811
    withdrawn_site: dict[str, Any],
) -> None:
    context = browser.new_context(base_url=withdrawn_site["live"].url)
    page = context.new_page()
    page.goto(f"/run/{withdrawn_site['id']}")
    with page.expect_navigation() as navigation:
        page.locator("nav.languages a[lang='zh-hans']").click()
    assert navigation.value is not None and navigation.value.status == 410
    assert "此收据已撤回" in page.inner_text("h1")
    context.close()

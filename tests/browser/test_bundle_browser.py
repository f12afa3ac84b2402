"""The page's "Download for offline checking", its JSON-LD block and its commands, in Chromium
(Playwright) against a live gunicorn: the download is the bundle, receipt-verify checks the
downloaded file offline with a pinned key, axe finds no violation in English and in Chinese,
and the JSON-LD data block costs no CSP violation (it is data, never executed)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_browser import Watched, axe_violations, publish
from tests.browser.test_browser import browser as browser  # the fixture, re-exported
from tests.livesite import VENV_BIN, LiveSite

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

CLI = VENV_BIN / "receipt-verify"


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2) as live:
        receipt = publish(live, idempotency_key="bundle-browser")
        publish(live, idempotency_key="bundle-browser-2")
        keys = live.get("/.well-known/receipt-keys.json").json()
        yield {"live": live, "receipt": receipt, "x": keys["keys"][0]["x"]}


@pytest.fixture
def watched(browser: Any, site: dict[str, Any]) -> Iterator[Watched]:
    context = browser.new_context(base_url=site["live"].url, accept_downloads=True)
    yield Watched(context.new_page())
    context.close()


@pytest.mark.parametrize(
    ("query", "label"),
    [("", "Download for offline checking"), ("?lang=zh-hans", "下载以供离线核验")],
    ids=["english", "chinese"],
)
def test_the_download_is_the_bundle_and_checks_offline(
    watched: Watched, site: dict[str, Any], tmp_path: Path, query: str, label: str
) -> None:
    page = watched.page
    receipt = site["receipt"]
    page.goto(f"/run/{receipt['id']}{query}")
    assert axe_violations(page) == []
    link = page.get_by_role("link", name=label)
    with page.expect_download() as info:
        link.click()
    download = info.value
    assert download.suggested_filename == f"receipt-{receipt['id']}.bundle.json"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    bundle = json.loads(saved.read_text("utf-8"))
    assert bundle["bundle"] == "receipt-bundle/v1"
    assert bundle["verification"]["receipt_id"] == receipt["id"]
    assert bundle["tlog_proof"].startswith("c2sp.org/tlog-proof@v1\nindex 0\n")
    done = subprocess.run(
        [str(CLI), str(saved), f"--key={site['x']}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Verdict: VALID. Every check passed."
    watched.assert_clean(site["live"].url)


def test_the_json_ld_block_is_read_without_a_csp_violation(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    receipt = site["receipt"]
    page.goto(f"/run/{receipt['id']}?lang=zh-hans")
    blocks = page.locator('script[type="application/ld+json"]')
    assert blocks.count() == 1
    facts = json.loads(blocks.text_content() or "")
    assert facts["@type"] == "DigitalDocument"
    assert facts["@id"] == receipt["url"]
    assert facts["identifier"] == receipt["id"]
    assert facts["additionalProperty"]["value"] == receipt["output_hash"]
    # The page's own script still ran (the CSP let it), and nothing was refused.
    assert page.locator("html.js").count() == 1
    watched.assert_clean(site["live"].url)


def test_each_system_has_its_command(watched: Watched, site: dict[str, Any]) -> None:
    page = watched.page
    page.goto(f"/run/{site['receipt']['id']}?lang=zh-hans")
    for system, heading in (("linux", "在 Linux 上"), ("macos", "在 macOS 上"),
                            ("windows", "在 Windows 上")):  # fmt: skip
        command = page.locator(f'pre[data-system="{system}"]')
        assert command.is_visible()
        assert heading in page.inner_text(f"#command-{system}")
    assert "sha256sum" in page.inner_text('pre[data-system="linux"]')
    assert "shasum -a 256" in page.inner_text('pre[data-system="macos"]')
    assert "Get-FileHash" in page.inner_text('pre[data-system="windows"]')
    watched.assert_clean(site["live"].url)

"""GET /run/<id>/bundle.json, the offline bundle, and the page's machine-readable facts and
"check it yourself" commands.

End to end through a live gunicorn (tests/livesite.py) on the suite's database (SQLite, or
PostgreSQL with DATABASE_URL): the bundle is downloaded over HTTP, the site is stopped, and
`receipt-verify --key` checks the file with no network. The page's JSON-LD block is parsed
from the live page, and its Linux command (and the parts of the macOS one that this machine
has) is run against the live site.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from receiptsite_client.verify import verify_bundle

from receiptsite.config import rate_limits
from tests.conftest import Producer

pytestmark = pytest.mark.db


# --- reading the page ----------------------------------------------------------------------


class _PageParts(HTMLParser):
    """The JSON-LD blocks, the command blocks (by system) and the download link of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.json_ld: list[str] = []
        self.commands: dict[str, str] = {}
        self.download: dict[str, str | None] | None = None
        self._into: tuple[str, str] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script" and named.get("type") == "application/ld+json":
            self._into, self._text = ("ld", ""), []
        elif tag == "pre" and named.get("data-system"):
            self._into, self._text = ("command", named["data-system"] or ""), []
        elif tag == "a" and named.get("id") == "bundle-download":
            self.download = named

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._into is None or tag not in ("script", "pre"):
            return
        kind, system = self._into
        text = "".join(self._text)
        if kind == "ld":
            self.json_ld.append(text)
        else:
            self.commands[system] = text
        self._into = None


def page_parts(html: str) -> _PageParts:
    parts = _PageParts()
    parts.feed(html)
    return parts


# --- the live site -------------------------------------------------------------------------


# --- the page: JSON-LD and commands ---------------------------------------------------------


def test_producer_text_cannot_end_the_json_ld_block(producer: Producer, client: Client) -> None:
    name = "</script><script>alert(1)</script><!--"
    receipt = producer.publish(subject={"type": "tool", "name": name})
    html = client.get(f"/run/{receipt['id']}").content.decode()
    start = html.index('<script type="application/ld+json">')
    block = html[start : html.index("</script>", start)]
    assert "<" not in block.removeprefix('<script type="application/ld+json">')
    [text] = page_parts(html).json_ld
    assert json.loads(text)["name"] == f"Execution receipt: {name}"


def test_the_page_offers_the_download_and_the_offline_command(
    producer: Producer, client: Client
) -> None:
    receipt = producer.publish()
    html = client.get(f"/run/{receipt['id']}").content.decode()
    parts = page_parts(html)
    assert parts.download is not None
    assert parts.download["href"] == f"/run/{receipt['id']}/bundle.json"
    assert parts.download["download"] == f"receipt-{receipt['id']}.bundle.json"
    assert "Download for offline checking" in html
    x = client.get("/.well-known/receipt-keys.json").json()["keys"][0]["x"]
    assert f"receipt-verify receipt-{receipt['id']}.bundle.json --key={x}" in html


# --- through Django's test client: rate limit, library check --------------------------------


def test_the_bundle_is_rate_limited_like_the_page(
    producer: Producer, client: Client, settings: Any
) -> None:
    receipt_id = producer.publish()["id"]
    settings.RATE_LIMITS = rate_limits("read=2/0.001")
    assert client.get(f"/run/{receipt_id}/bundle.json").status_code == 200
    assert client.get(f"/run/{receipt_id}").status_code == 200  # the same bucket
    refused = client.get(f"/run/{receipt_id}/bundle.json")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert refused["Cache-Control"] == "no-store"
    assert refused["Access-Control-Allow-Origin"] == "*"


def test_a_bundle_checks_with_the_library_and_fails_when_its_proof_is_changed(
    producer: Producer, client: Client
) -> None:
    receipt_id = producer.publish()["id"]
    producer.publish(idempotency_key="second")
    producer.publish(idempotency_key="third")
    bundle = client.get(f"/run/{receipt_id}/bundle.json").json()
    x = bundle["keys"]["keys"][0]["x"]
    assert verify_bundle(bundle, None, x).status == "valid"
    # One proof hash changed in the tlog proof alone: it no longer agrees, nor proves.
    text = bundle["tlog_proof"]
    first_hash = text.split("\n")[2]
    flipped = ("A" if first_hash[0] != "A" else "B") + first_hash[1:]
    changed = {**bundle, "tlog_proof": text.replace(first_hash, flipped, 1)}
    result = verify_bundle(changed, None, x)
    assert result.failed() == ["tlog_proof"]
    assert "does not lead from the receipt's leaf hash" in result.check("tlog_proof").detail  # type: ignore[union-attr]


def test_a_withdrawn_receipt_bundle_is_a_410_that_still_proves_its_place(
    producer: Producer, client: Client
) -> None:
    receipt_id = producer.publish()["id"]
    producer.publish(idempotency_key="second")
    withdrawn = producer.post(
        {"reason": "personal_data", "note": "asked by the subject"},
        path=f"/api/receipts/{receipt_id}/withdrawal",
    )
    assert withdrawn.status_code == 201, withdrawn.content
    answer = client.get(f"/run/{receipt_id}/bundle.json")
    assert answer.status_code == 410
    assert answer["Cache-Control"] == "no-store"
    bundle = answer.json()
    verify = client.get(f"/api/receipt/{receipt_id}/verify")
    assert verify.status_code == 410
    assert bundle["verification"] == verify.json()
    assert "canonical_bytes" not in bundle["verification"]
    assert bundle["tlog_proof"] == (
        "c2sp.org/tlog-proof@v1\nindex 0\n"
        + "".join(f"{h}\n" for h in verify.json()["log"]["inclusion_proof"])
        + "\n"
        + verify.json()["log"]["checkpoint"]
    )
    result = verify_bundle(bundle, None, bundle["keys"]["keys"][0]["x"])
    assert result.status == "invalid"
    assert result.failed() == ["withdrawn"]  # no evidence now; its place is still proven
    assert result.check("tlog_proof").result == "pass"  # type: ignore[union-attr]

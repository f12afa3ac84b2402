#!/usr/bin/env python
"""Page weight of the reviewer's page: GET /run/<id> for a valid receipt, plus every CSS and JS
file the HTML references under /static/, raw and gzip-compressed.

Run from the repository root:

    .venv/bin/python bench/page_weight.py

The receipt is the request body of SPEC's EXAMPLES.md, stored with services.receipt_ingest in
a temporary SQLite database of the script's own (`--database-url postgres://...` works too).
The page is fetched with Django's test Client (settings: tests.settings). Static files are read
with the staticfiles finders (django.contrib.staticfiles.finders.find), so the figures are
those of the source files in static/ and the installed apps, which is what a deployment
collects. Files referenced from the CSS (url(), @import) under /static/ are followed and
counted too. gzip is level 9 (what WhiteNoise uses for its precompressed .gz files); the HTML
itself is dynamic, and whether it travels compressed depends on the front proxy (settings has
no GZipMiddleware), so its gzip figure is what it would be.

Also printed, not counted in the total: what the "Verify in this browser" button fetches on
click (the verification JSON and the public keys), and the HTML of a large receipt (4,000
code points of input summary and result, 20 observed lines).

Exits 1 if the page does not answer 200 or references a static file that cannot be found.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from hot_paths import BODY  # noqa: E402

CSS_REF = re.compile(r"""url\(\s*['"]?([^'")]+)['"]?\s*\)|@import\s+['"]([^'"]+)['"]""")
HASHED = re.compile(r"\.[0-9a-f]{12}(?=\.[^./]+$)")


class References(HTMLParser):
    """Every URL in a src or href attribute, with the tag it came from."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.found.append((tag, value))


def gz(data: bytes) -> int:
    return len(gzip.compress(data, compresslevel=9, mtime=0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_database_argument(parser)
    args = parser.parse_args()
    description = _common.setup_django(args)

    from django.conf import settings
    from django.contrib.staticfiles import finders
    from django.test import Client

    from receiptsite.receipts.models import ApiKey, Tenant
    from receiptsite.receipts.services import receipt_ingest

    tenant = Tenant.objects.create(slug="acme", name="Acme Corp")
    key, _ = ApiKey.issue(tenant)
    receipt = receipt_ingest(api_key=key, payload=copy.deepcopy(BODY)).receipt
    client = Client()
    path = f"/run/{receipt.uuid}"
    response = client.get(path)
    if response.status_code != 200:
        print(f"WRONG: GET {path} answered {response.status_code}", file=sys.stderr)
        return 1
    html = response.content
    if "alert-bad" in html.decode():
        print("WRONG: the page says the receipt does not verify", file=sys.stderr)
        return 1

    print(f"page_weight: {_common.machine()}")
    print(f"database: {description}")
    print(f"GET /run/<id> of the EXAMPLES.md receipt: {response.status_code}, "
          f"{response['Content-Type']}\n")

    static = settings.STATIC_URL
    rows: list[tuple[str, str, bytes]] = [("HTML", "/run/<id>", html)]
    refs = References()
    refs.feed(html.decode())
    queue = [(tag, url) for tag, url in refs.found]
    seen: set[str] = set()
    missing: list[str] = []
    others: list[str] = []
    while queue:
        tag, url = queue.pop(0)
        target = urlsplit(urljoin("http://testserver" + path, url)).path
        if not target.startswith(static):
            if tag in ("script", "link", "img", "source"):
                others.append(f"{tag} {url}")
            continue
        if target in seen:
            continue
        seen.add(target)
        relative = target[len(static):]
        found = finders.find(relative) or finders.find(HASHED.sub("", relative))
        if not found:
            missing.append(target)
            continue
        data = Path(found).read_bytes()
        kind = {"css": "CSS", "js": "JS", "mjs": "JS"}.get(target.rsplit(".", 1)[-1], "other")
        label = kind if tag != "css" else f"{kind} (from CSS)"
        rows.append((label, target, data))
        if kind == "CSS":
            for match in CSS_REF.finditer(data.decode("utf-8", "replace")):
                ref = match.group(1) or match.group(2)
                if not ref.startswith("data:"):
                    queue.append(("css", urljoin(target, ref)))

    print(f"{'kind':<14} {'file':<40} {'raw bytes':>10} {'gzip -9':>9}")
    total_raw = total_gz = 0
    for kind, name, data in rows:
        total_raw += len(data)
        total_gz += gz(data)
        print(f"{kind:<14} {name:<40} {len(data):>10,} {gz(data):>9,}")
    print(f"{'total':<14} {f'{len(rows)} files':<40} {total_raw:>10,} {total_gz:>9,}")
    print(f"\n(raw total {total_raw / 1024:.1f} KiB, gzip total {total_gz / 1024:.1f} KiB; "
          f"requests for first view: {len(rows)})")

    if others:
        print("\nreferences outside /static/ (not counted):")
        for other in others:
            print(f"  {other}")

    print("\nloaded only when the reader presses \"Verify in this browser\" (not counted):")
    for label, url in (
        ("verification JSON", f"/api/receipt/{receipt.uuid}/verify"),
        ("public keys", "/.well-known/receipt-keys.json"),
    ):
        answer: Any = client.get(url)
        shown = url.replace(receipt.uuid, "<id>")
        print(f"  {label:<18} {shown:<40} {len(answer.content):>10,} {gz(answer.content):>9,}")

    large = copy.deepcopy(BODY)
    large["idempotency_key"] = "page-weight/large"
    large["input_summary"] = "i" * 4000
    large["result"] = "r" * 4000
    large["observed"] = [f"Observation {n}: " + "o" * 200 for n in range(20)]
    big = receipt_ingest(api_key=key, payload=large).receipt
    big_html = client.get(f"/run/{big.uuid}").content
    print(f"\nHTML of a large receipt (4,000-character input summary and result, 20 observed "
          f"lines): {len(big_html):,} bytes raw, {gz(big_html):,} gzip -9")

    if missing:
        print(f"\nWRONG: referenced but not found by the staticfiles finders: {missing}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Page weight of the reviewer's page: GET /run/<id> for a valid receipt, plus every CSS and JS
file the HTML references under /static/, raw and gzip-compressed.

Run from the repository root:

    .venv/bin/python bench/page_weight.py

The receipt is the test vector's request body (tests/examples.py), stored with
services.receipt_ingest in a temporary SQLite database of the script's own (`--database-url
postgres://...` works too).
The page is fetched with Django's test Client (settings: tests.settings). Static files are read
with the staticfiles finders (django.contrib.staticfiles.finders.find), so the figures are
those of the source files in static/ and the installed apps, which is what a deployment
collects. Files referenced from the CSS (url(), @import) under /static/ are followed and
counted too. The total asked for is the HTML plus the CSS and JS under /static/; below it the
script lists, with a second total, whatever else a first view loads: other static files (an
icon) and same-origin CSS/JS served by a view rather than from /static/ (fetched with the
test Client). A reference to another origin is reported as wrong. gzip is level 9 (what
WhiteNoise uses for its precompressed .gz files); the HTML itself is dynamic, and whether it
travels compressed depends on the front proxy (settings has no GZipMiddleware), so its gzip
figure is what it would be.

Also printed, not counted in the total: what the "Verify in this browser" button fetches on
click (the verification JSON and the public keys), and the HTML of a large receipt (4,000
code points of input summary and result, 20 observed lines).

Exits 1 if the page does not answer 200, or references a static file that cannot be found,
a same-origin script or style that does not answer 200, or anything on another origin.
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
    print(
        f"GET /run/<id> of the test vector's receipt: {response.status_code}, "
        f"{response['Content-Type']}\n"
    )

    static = settings.STATIC_URL
    rows: list[tuple[str, str, bytes]] = [("HTML", "/run/<id>", html)]
    dynamic: list[tuple[str, str, bytes]] = []  # same-origin, outside /static/
    refs = References()
    refs.feed(html.decode())
    queue = [(tag, url) for tag, url in refs.found]
    seen: set[str] = set()
    missing: list[str] = []
    while queue:
        tag, url = queue.pop(0)
        parts = urlsplit(urljoin("http://testserver" + path, url))
        target = parts.path
        if target in seen or tag in ("a", "form"):
            continue
        seen.add(target)
        if not target.startswith(static):
            if parts.netloc != "testserver":
                missing.append(f"{url} (another origin: the page must load nothing from one)")
                continue
            answer: Any = client.get(target)
            if answer.status_code != 200:
                missing.append(f"{target} (answered {answer.status_code})")
                continue
            kind = "JS" if tag == "script" else "CSS" if "css" in answer["Content-Type"] else tag
            dynamic.append((f"{kind} (dynamic)", target, answer.content))
            continue
        relative = target[len(static) :]
        found = finders.find(relative) or finders.find(HASHED.sub("", relative))
        if not found:
            missing.append(target)
            continue
        data = Path(found).read_bytes()
        extension = target.rsplit(".", 1)[-1]
        kind = {"css": "CSS", "js": "JS", "mjs": "JS"}.get(extension, f"other ({tag})")
        rows.append((kind if tag != "css" else f"{kind} (from CSS)", target, data))
        if kind == "CSS":
            for match in CSS_REF.finditer(data.decode("utf-8", "replace")):
                ref = match.group(1) or match.group(2)
                if not ref.startswith("data:"):
                    queue.append(("css", urljoin(target, ref)))

    def line(kind: str, name: str, raw: int, packed: int) -> None:
        print(f"{kind:<16} {name:<42} {raw:>10,} {packed:>9,}")

    counted = [r for r in rows if r[0] == "HTML" or r[0].startswith(("CSS", "JS"))]
    extra = [r for r in rows if r not in counted] + dynamic
    print(f"{'kind':<16} {'file':<42} {'raw bytes':>10} {'gzip -9':>9}")
    for kind, name, data in counted:
        line(kind, name, len(data), gz(data))
    total_raw = sum(len(d) for _, _, d in counted)
    total_gz = sum(gz(d) for _, _, d in counted)
    line("TOTAL", f"HTML + CSS/JS under {static} ({len(counted)} files)", total_raw, total_gz)
    if extra:
        print()
        for kind, name, data in extra:
            line(kind, name, len(data), gz(data))
        all_raw = total_raw + sum(len(d) for _, _, d in extra)
        all_gz = total_gz + sum(gz(d) for _, _, d in extra)
        count = len(counted) + len(extra)
        line("ALL", f"everything a first view loads ({count} files)", all_raw, all_gz)
    print(
        f"\n(requested total: {total_raw / 1024:.1f} KiB raw, {total_gz / 1024:.1f} KiB gzip; "
        "the rows below it are other static files and same-origin scripts or styles outside "
        f"{static}, fetched with the test Client)"
    )

    print('\nloaded only when the reader presses "Verify in this browser" (not counted):')
    for url in (f"/api/receipt/{receipt.uuid}/verify", "/.well-known/receipt-keys.json"):
        fetched = client.get(url).content
        line("on click", url.replace(receipt.uuid, "<id>"), len(fetched), gz(fetched))

    large = copy.deepcopy(BODY)
    large["idempotency_key"] = "page-weight/large"
    large["input_summary"] = "i" * 4000
    large["result"] = "r" * 4000
    large["observed"] = [f"Observation {n}: " + "o" * 200 for n in range(20)]
    big = receipt_ingest(api_key=key, payload=large).receipt
    big_html = client.get(f"/run/{big.uuid}").content
    print(
        f"\nHTML of a large receipt (4,000-character input summary and result, 20 observed "
        f"lines): {len(big_html):,} bytes raw, {gz(big_html):,} gzip -9"
    )

    if missing:
        print(
            f"\nWRONG: references that do not load: {missing}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

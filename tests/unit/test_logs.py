"""The logs: one JSON object per line, carrying the request id, for Django's loggers and
gunicorn's error and access logs alike; no API key, no Authorization header and no full
receipt id in any of them, however the id was spelt (receiptsite/logconfig.py).

The live test runs a whole session against a real gunicorn and reads every line it wrote.
"""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest

from receiptsite import logconfig

pytestmark = pytest.mark.unit

RECEIPT_ID = "f5245d22-e650-49ae-8876-f1a335f309bc"
API_KEY = "rk_6dac8a669810_Zx3v9QpL-k2_mN8sTq"


# --- the mask -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        RECEIPT_ID,
        RECEIPT_ID.upper(),
        RECEIPT_ID.replace("-", ""),
        RECEIPT_ID.replace("-", "%2D"),
        RECEIPT_ID.replace("-", "%2d"),
        RECEIPT_ID.replace("-", "%2D", 2),
        "".join(f"%{ord(c):02X}" for c in RECEIPT_ID),
        "".join(f"%{ord(c):02x}" for c in RECEIPT_ID),
    ],
)
def test_the_mask_cuts_a_receipt_id_however_it_is_spelt(spelling: str) -> None:
    masked = logconfig.mask(f'"GET /run/{spelling}/handoff.txt HTTP/1.1" 200')
    assert masked.startswith('"GET /run/') and masked.endswith('-…/handoff.txt HTTP/1.1" 200')
    assert spelling not in masked
    assert RECEIPT_ID[8:].replace("-", "") not in masked.replace("-", "").lower()


SHORT_ID = RECEIPT_ID[:-1]  # one hex digit short: no id, but 31 of its 32 digits


@pytest.mark.parametrize(
    "path",
    [
        f"/run/{SHORT_ID}",
        f"/run/{SHORT_ID}/bundle.json",
        f"/api/receipt/{SHORT_ID}/verify",
        f"/api/receipt/{SHORT_ID.replace('-', '')}/verify",
        f"/api/receipt/{SHORT_ID.replace('-', '%2D').upper()}/verify",
        f"/run/{RECEIPT_ID[9:]}",  # the id without its first 8 digits
        f"/run/{RECEIPT_ID.replace('-', '')[:16]}",
        f"/run/{'-'.join(RECEIPT_ID.replace('-', '')[i:i + 4] for i in range(0, 20, 4))}",
    ],
)
def test_a_line_holds_no_run_of_hex_that_could_be_most_of_an_id(path: str) -> None:
    record = logging.LogRecord("django.request", logging.WARNING, __file__, 1,
                               "Not Found: %s", (path,), None)  # fmt: skip
    message = format_line(record)["message"]
    runs = re.findall(r"[0-9a-f](?:(?:-|%2d)?[0-9a-f])*", message.lower())
    assert max(len(run.replace("-", "").replace("%2d", "")) for run in runs) <= 8, message
    assert message.startswith("Not Found: /") and "…" in message


def test_the_mask_leaves_short_runs_of_hex_and_the_rest_of_a_line_alone() -> None:
    line = '127.0.0.1 [02/Dec/2026:01:23:50 +0000] "GET /run/0123456789abcde HTTP/1.1" 404 179'
    assert logconfig.mask(line) == line  # 15 hex digits: not most of an id
    assert logconfig.mask(f"/run/{SHORT_ID}/x") == f"/run/{RECEIPT_ID[:8]}-…/x"


def test_the_mask_cuts_an_api_key_to_its_prefix_and_a_bearer_credential() -> None:
    assert logconfig.mask(f"key={API_KEY}&x=1") == "key=rk_6dac8a669810_…&x=1"
    assert logconfig.mask("Authorization: Bearer abc.def-123") == "Authorization: Bearer …"
    assert logconfig.mask("GET /healthz 200") == "GET /healthz 200"


def format_line(record: logging.LogRecord) -> dict[str, Any]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logconfig.MaskCapabilityURLs())
    handler.setFormatter(logconfig.JSONFormatter())
    handler.handle(record)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    return dict(json.loads(lines[0]))


def test_a_line_carries_the_request_id_of_the_request_being_served() -> None:
    record = logging.LogRecord("django.request", logging.WARNING, __file__, 1,
                               "Not Found: %s", (f"/run/{RECEIPT_ID}",), None)  # fmt: skip
    token = logconfig.request_id.set("0123456789abcdef0123456789abcdef")
    try:
        line = format_line(record)
    finally:
        logconfig.request_id.reset(token)
    assert line["request_id"] == "0123456789abcdef0123456789abcdef"
    assert line["message"] == "Not Found: /run/f5245d22-…"
    assert (line["level"], line["logger"]) == ("WARNING", "django.request")
    assert line["time"].endswith("+00:00") and isinstance(line["pid"], int)
    # Outside a request: no request id.
    assert "request_id" not in format_line(logging.makeLogRecord({"msg": "Booting worker"}))


def test_the_middleware_sets_the_request_id_for_the_request_and_only_for_it(rf: Any) -> None:
    from django.http import HttpRequest, HttpResponse

    from receiptsite.middleware import RequestIDMiddleware

    seen: list[str | None] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(logconfig.request_id.get())
        return HttpResponse("ok")

    response = RequestIDMiddleware(view)(rf.get("/healthz"))
    assert seen == [response["X-Request-ID"]] and len(response["X-Request-ID"]) == 32
    assert logconfig.request_id.get() is None


# --- a whole session, live ------------------------------------------------------------------




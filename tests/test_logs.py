"""The logs: one JSON object per line, carrying the request id, for Django's loggers and
gunicorn's error and access logs alike; no API key, no Authorization header and no full
receipt id in any of them, however the id was spelt (receiptsite/logconfig.py).

The live test runs a whole session against a real gunicorn and reads every line it wrote.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from receiptsite import logconfig
from tests.examples import EXAMPLE_BODY
from tests.livesite import LiveSite, Response

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


def test_an_access_line_drops_the_authorization_header_and_masks_every_atom() -> None:
    atoms = {
        "r": f"GET /run/{RECEIPT_ID.replace('-', '%2D')}?k={API_KEY} HTTP/1.1",
        "m": "GET",
        "U": f"/run/{RECEIPT_ID}",
        "s": "200",
        "D": 1500,
        "{authorization}i": f"Bearer {API_KEY}",
        "{http_authorization}e": f"Bearer {API_KEY}",
        "{x-request-id}o": "abcdefabcdefabcdefabcdefabcdefab",
    }
    record = logging.LogRecord("gunicorn.access", logging.INFO, __file__, 1,
                               '"%(r)s" %(s)s %({authorization}i)s', (atoms,), None)  # fmt: skip
    line = format_line(record)
    assert line["request_id"] == "abcdefabcdefabcdefabcdefabcdefab"
    assert (line["method"], line["path"], line["status"]) == ("GET", "/run/f5245d22-…", 200)
    assert line["duration_ms"] == 1.5
    text = json.dumps(line)
    assert API_KEY not in text and API_KEY.split("_", 2)[2] not in text
    assert "Bearer" not in text and RECEIPT_ID[9:] not in text and "%2D" not in text


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


@pytest.fixture(scope="module")
def session() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2, env={"LOG_LEVEL": "info"}) as site:
        answers: list[Response] = []

        def call(method: str, path: str, body: Any = None, **options: Any) -> Response:
            answer = site.request(method, path, body, **options)
            assert answer.status < 500, (method, path, answer, site.logs())
            answers.append(answer)
            return answer

        key = site.api_key
        workflow = f"wf-logs-{secrets.token_hex(4)}"
        one = {**EXAMPLE_BODY, "workflow_id": workflow, "idempotency_key": f"{workflow}/1"}
        created = call("POST", "/api/receipts", one, key=key)
        assert created.status == 201, created
        receipt_id = created.json()["id"]
        batch = {"receipts": [{**one, "idempotency_key": f"{workflow}/b{n}"} for n in range(3)]}
        batched = call("POST", "/api/receipts/batch", batch, key=key)
        assert batched.status == 200, batched
        ids = [receipt_id, *(r["id"] for r in batched.json()["results"])]
        assert call("GET", f"/api/receipts?workflow_id={workflow}", key=key).status == 200
        assert call("GET", f"/api/receipts/{receipt_id}", key=key).status == 200
        assert call("GET", f"/api/receipt/{receipt_id}/verify").status == 200
        page = call("GET", f"/run/{receipt_id}", headers={"Referer": f"{site.url}/run/{ids[1]}"})
        assert page.status == 200
        assert call("GET", f"/run/{receipt_id}/handoff.txt").status == 200
        assert call("GET", f"/run/{receipt_id.replace('-', '%2D')}").status == 200
        unknown = "3f0f8a1c-5b7e-4d2a-9c4e-1a2b3c4d5e6f"
        assert call("GET", f"/run/{unknown}").status == 404
        assert call("GET", f"/api/receipts/{unknown}", key=key).status == 404
        wrong = key[:16] + secrets.token_urlsafe(24)
        assert call("POST", "/api/receipts", one, key=wrong).status == 401
        # A key where it does not belong, in a query string: the access line would show it.
        assert call("GET", f"/api/receipts?api_key={key}", key=wrong).status == 401
        invalid = {**one, "idempotency_key": f"{workflow}/bad", "outcome": "maybe"}
        assert call("POST", "/api/receipts", invalid, key=key).status == 422
        deadline = time.monotonic() + 15  # gunicorn writes each access line after its answer
        while len(site.stdout().splitlines()) < len(answers) + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the last Django lines of the last request
        stdout, stderr = site.stdout(), site.stderr()
    yield {"stdout": stdout, "stderr": stderr, "answers": answers, "ids": [*ids, unknown],
           "keys": [key, wrong]}  # fmt: skip


def lines_of(session: dict[str, Any]) -> list[dict[str, Any]]:
    lines = []
    for stream in ("stdout", "stderr"):
        for text in session[stream].splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                pytest.fail(f"a {stream} line is not JSON: {text!r}")
            assert isinstance(lines[-1], dict), text
    return lines


@pytest.mark.live
def test_every_log_line_is_one_json_object(session: dict[str, Any]) -> None:
    lines = lines_of(session)
    assert lines, session
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
    loggers = {line["logger"] for line in lines}
    assert {"gunicorn.access", "gunicorn.error", "django.request"} <= loggers, loggers
    assert all(json.loads(t)["logger"] == "gunicorn.access" for t in session["stdout"].split("\n")
               if t)  # fmt: skip


@pytest.mark.live
def test_access_lines_carry_the_request_id_the_client_got(session: dict[str, Any]) -> None:
    access = [line for line in lines_of(session) if line["logger"] == "gunicorn.access"]
    sent = {answer.headers["X-Request-ID"] for answer in session["answers"]}
    logged = {line.get("request_id") for line in access}
    assert sent <= logged, (sent - logged, access)
    for line in access:
        assert {"method", "path", "status", "duration_ms", "request_id"} <= line.keys(), line
    by_id = {line["request_id"]: line for line in access}
    for answer in session["answers"]:
        assert by_id[answer.headers["X-Request-ID"]]["status"] == answer.status


@pytest.mark.live
def test_django_lines_carry_the_request_id(session: dict[str, Any]) -> None:
    sent = {answer.headers["X-Request-ID"] for answer in session["answers"]}
    django = [line for line in lines_of(session) if line["logger"].startswith("django")]
    # The 404s, the 401s and the 422 are logged by Django, each with its request's id.
    assert len(django) >= 5, django
    for line in django:
        assert line.get("request_id") in sent, line


@pytest.mark.live
def test_no_line_holds_a_key_a_credential_or_a_full_receipt_id(session: dict[str, Any]) -> None:
    text = session["stdout"] + "\n" + session["stderr"]
    lowered = text.lower()
    for key in session["keys"]:
        assert key not in text and key.split("_", 2)[2] not in text, "an API key is logged"
    assert "authorization" not in lowered and "bearer " not in lowered
    for receipt_id in session["ids"]:
        for form in (receipt_id, receipt_id.replace("-", ""), receipt_id.replace("-", "%2d")):
            assert form not in lowered, f"receipt id {receipt_id} is in the logs ({form})"
    # Not vacuous: the ids and the key are there, cut short.
    assert f"/run/{session['ids'][0][:8]}-\u2026" in text
    assert f"{session['keys'][0][:15]}_\u2026" in text

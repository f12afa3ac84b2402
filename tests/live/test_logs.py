"""The logs: one JSON object per line, carrying the request id, for Django's loggers and
gunicorn's error and access logs alike; no API key, no Authorization header and no full
receipt id in any of them, however the id was spelt (receiptsite/logconfig.py).

The live test runs a whole session against a real gunicorn and reads every line it wrote.
"""

from __future__ import annotations

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
from tests.unit.test_logs import API_KEY, RECEIPT_ID, format_line

# The log lines: the same whichever database is behind the site.
pytestmark = [pytest.mark.live, pytest.mark.any_database]


# --- the mask -----------------------------------------------------------------------------------


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


def test_an_access_record_keeps_only_the_atoms_its_line_names() -> None:
    # What something reading the record after the filter finds (an error reporter's logging
    # integration reads record.args): the atoms the format names, a secret one as "-", and
    # none of the others gunicorn hands over (every request header, environ entry, cookie).
    atoms = {
        "h": "127.0.0.1",
        "r": "GET /healthz HTTP/1.1",
        "{authorization}i": f"Bearer {API_KEY}",
        "{cookie}i": "sessionid=0123456789abcdef",
        "{http_authorization}e": f"Bearer {API_KEY}",
        "{x-request-id}o": "abcdefabcdefabcdefabcdefabcdefab",
    }
    line_format = '%(h)s "%(r)s" %({Authorization}i)s %(b)s'
    record = logging.LogRecord("gunicorn.access", logging.INFO, __file__, 1, line_format,
                               (atoms,), None)  # fmt: skip
    assert logconfig.MaskCapabilityURLs().filter(record)
    assert record.args == {"h": "127.0.0.1", "r": "GET /healthz HTTP/1.1",
                           "{Authorization}i": "-", "b": "-"}  # fmt: skip
    assert record.getMessage() == '127.0.0.1 "GET /healthz HTTP/1.1" - -'
    assert record.request_id == "abcdefabcdefabcdefabcdefabcdefab"  # type: ignore[attr-defined]


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
        # An id one digit short is no id (404), but 31 of its 32 digits: cut short as well.
        assert call("GET", f"/run/{ids[2][:-1]}").status == 404
        assert call("GET", f"/api/receipt/{ids[2][:-1]}/verify").status == 404
        unknown = "3f0f8a1c-5b7e-4d2a-9c4e-1a2b3c4d5e6f"
        assert call("GET", f"/run/{unknown}").status == 404
        assert call("GET", f"/api/receipts/{unknown}", key=key).status == 404
        wrong = key[:16] + secrets.token_urlsafe(24)
        assert call("POST", "/api/receipts", one, key=wrong).status == 401
        # A key where it does not belong, in a query string: the access line would show it.
        assert call("GET", f"/api/receipts?api_key={key}", key=wrong).status == 401
        invalid = {**one, "idempotency_key": f"{workflow}/bad", "outcome": "maybe"}
        assert call("POST", "/api/receipts", invalid, key=key).status == 422
        # gunicorn writes each access line after its answer: wait for the line of each request
        # (by its id), not for a count of lines, which other requests (the start's probe) share.
        sent = {answer.headers["X-Request-ID"] for answer in answers}
        deadline = time.monotonic() + 30
        while any(i not in site.stdout() for i in sent) and time.monotonic() < deadline:
            time.sleep(0.05)
        # And Django's line of the last request (the 422), on the other stream.
        while "Unprocessable" not in site.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
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
            assert form[9:-1] not in lowered, f"most of receipt id {receipt_id} is in the logs"
    # Not vacuous: the ids and the key are there, cut short.
    assert f"/run/{session['ids'][0][:8]}-\u2026" in text
    assert f"{session['keys'][0][:15]}_\u2026" in text

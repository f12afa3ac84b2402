"""HTTP as a client may really send it, spoken to a real gunicorn over a raw socket: bodies with
`Transfer-Encoding: chunked` and no Content-Length, receipt ids with percent-encoded hyphens,
request lines over gunicorn's limit. Each gets the contract's answer: the body read (within its
limit: 413 problem+json beyond it, without reading it all), the page served with no full id in
any log, and a 414 problem+json.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.examples import EXAMPLE_BODY
from tests.livesite import LiveSite

# The HTTP layer (gunicorn and the request stack): the same whichever database is behind it.
pytestmark = [pytest.mark.live, pytest.mark.any_database]

RECEIPT_MAX_BYTES = 256 * 1024
BATCH_MAX_BYTES = 5 * 1024 * 1024
REQUEST_LINE_LIMIT = 8190  # gunicorn.conf.py's limit_request_line
TIMEOUT = 30  # seconds for one exchange


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as live:
        yield live


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def exchange(site: LiveSite, data: bytes) -> Answer:
    """Send `data` as it is and read the answer. The sending runs in a thread of its own: a
    server that refuses an oversize body answers before it has read it, and may stop reading."""
    with socket.create_connection(("127.0.0.1", site.port), timeout=TIMEOUT) as sock:

        def send() -> None:
            # OSError: the server answered and closed before reading all of it.
            with contextlib.suppress(OSError):
                sock.sendall(data)

        sender = threading.Thread(target=send)
        sender.start()
        try:
            response = http.client.HTTPResponse(sock)
            response.begin()
            answer = Answer(response.status, response.headers, response.read())
        finally:
            sender.join(TIMEOUT)
    return answer


def chunked(body: bytes, size: int = 16 * 1024) -> bytes:
    pieces = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
              for i in range(0, len(body), size)]  # fmt: skip
    return b"".join(pieces) + b"0\r\n\r\n"


def post_chunked(site: LiveSite, path: str, body: bytes) -> Answer:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {site.api_key}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    return exchange(site, head.encode() + chunked(body))


def receipt(workflow_id: str, n: int = 1, **changes: Any) -> dict[str, Any]:
    return {**EXAMPLE_BODY, "workflow_id": workflow_id, "idempotency_key": f"{workflow_id}/{n}",
            **changes}  # fmt: skip


def stored(site: LiveSite, workflow_id: str) -> list[dict[str, Any]]:
    answer = site.get(f"/api/receipts?workflow_id={workflow_id}", key=site.api_key)
    assert answer.status == 200, answer
    return list(answer.json()["receipts"])


def assert_problem(answer: Answer, status: int, slug: str) -> dict[str, Any]:
    assert answer.status == status, answer
    assert answer.headers["Content-Type"] == "application/problem+json", answer.headers
    body = answer.json()
    assert body["status"] == status and body["type"].endswith(f"/problems/{slug}"), body
    assert body["title"] and body["detail"], body
    assert answer.headers["X-Request-ID"], answer.headers
    return dict(body)


# --- chunked bodies ---------------------------------------------------------------------------


def test_a_chunked_receipt_without_content_length_is_stored(site: LiveSite) -> None:
    workflow = f"wf-chunked-{secrets.token_hex(4)}"
    answer = post_chunked(site, "/api/receipts", json.dumps(receipt(workflow)).encode())
    assert answer.status == 201, (answer, site.logs())
    created = answer.json()
    assert [r["id"] for r in stored(site, workflow)] == [created["id"]]


def test_a_chunked_batch_is_read_whole(site: LiveSite) -> None:
    workflow = f"wf-chunked-batch-{secrets.token_hex(4)}"
    # Many chunks, and more than one read of the site's (64 KiB each).
    items = [receipt(workflow, n, result="z" * 8000) for n in range(1, 31)]
    body = json.dumps({"receipts": items}).encode()
    assert len(body) > 3 * 64 * 1024
    answer = post_chunked(site, "/api/receipts/batch", body)
    assert answer.status == 200, answer
    assert [r["status"] for r in answer.json()["results"]] == [201] * 30
    assert len(stored(site, workflow)) == 30


def test_a_chunked_receipt_over_256_kib_is_a_413_and_stores_nothing(site: LiveSite) -> None:
    workflow = f"wf-chunked-big-{secrets.token_hex(4)}"
    body = json.dumps(receipt(workflow, result="x" * RECEIPT_MAX_BYTES)).encode()
    assert RECEIPT_MAX_BYTES < len(body) < RECEIPT_MAX_BYTES + 2000
    problem = assert_problem(post_chunked(site, "/api/receipts", body), 413, "payload-too-large")
    assert str(RECEIPT_MAX_BYTES) in problem["detail"]
    assert stored(site, workflow) == []
    # The same document within the limit is stored: the limit, not chunking, refused it.
    small = json.dumps(receipt(workflow, result="x" * 1000)).encode()
    assert post_chunked(site, "/api/receipts", small).status == 201


def test_a_chunked_batch_over_5_mib_is_a_413_and_stores_nothing(site: LiveSite) -> None:
    workflow = f"wf-chunked-huge-{secrets.token_hex(4)}"
    items = [receipt(workflow, n, result="y" * 20_000) for n in range(1, 301)]
    body = json.dumps({"receipts": items}).encode()
    assert len(body) > BATCH_MAX_BYTES
    problem = assert_problem(
        post_chunked(site, "/api/receipts/batch", body), 413, "payload-too-large"
    )
    assert str(BATCH_MAX_BYTES) in problem["detail"]
    assert stored(site, workflow) == []


# --- receipt ids spelt with percent-encoded hyphens ---------------------------------------------


def wait_for_lines(site: LiveSite, marker: str, count: int) -> str:
    """Gunicorn writes an access line just after the answer: wait (bounded) until `count`
    lines carry `marker`, then return both logs."""
    deadline = time.monotonic() + 15
    while site.stdout().count(marker) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return site.stdout() + "\n" + site.stderr()


def test_an_id_with_percent_encoded_hyphens_is_served_and_never_logged_in_full(
    site: LiveSite,
) -> None:
    workflow = f"wf-pct-{secrets.token_hex(4)}"
    answer = site.post("/api/receipts", receipt(workflow))
    assert answer.status == 201, answer
    receipt_id = answer.json()["id"]
    marker = f"pct-probe-{secrets.token_hex(4)}"
    spellings = [
        receipt_id.replace("-", "%2D"),
        receipt_id.replace("-", "%2d").upper(),
        "%2D".join(receipt_id.split("-")[:2]) + "-" + "-".join(receipt_id.split("-")[2:]),
        # Every character percent-encoded: Django decodes it all before routing.
        "".join(f"%{ord(c):02X}" for c in receipt_id),
    ]
    for spelling in spellings:
        for path in (f"/run/{spelling}", f"/api/receipt/{spelling}/verify"):
            page = exchange(
                site,
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {marker}\r\n\r\n".encode(),
            )
            assert page.status == 200, (path, page.status, page.body[:300])
    logs = wait_for_lines(site, marker, 2 * len(spellings))
    assert logs.count(marker) == 2 * len(spellings), logs[-3000:]
    lowered = logs.lower()
    for form in {receipt_id, receipt_id.replace("-", ""), *spellings}:
        assert form.lower() not in lowered, f"{form} is in the logs in full:\n{logs[-3000:]}"
    # Not vacuous: the access lines are there, their paths cut to the first 8 hex digits.
    access = [json.loads(line) for line in site.stdout().splitlines() if marker in line]
    assert {line["path"] for line in access} >= {f"/run/{receipt_id[:8]}-\u2026"}, access


# --- request lines over the limit -------------------------------------------------------------


def request_line_of(length: int, path: str) -> bytes:
    query = "x=" + "a" * (length - len(f"GET {path}?x= HTTP/1.1"))
    line = f"GET {path}?{query} HTTP/1.1"
    assert len(line) == length
    return f"{line}\r\nHost: 127.0.0.1\r\n\r\n".encode()


@pytest.mark.parametrize("path", ["/api/receipts", "/api/log/checkpoint", "/run/x", "/healthz"])
def test_a_request_line_over_the_limit_is_a_414_problem(site: LiveSite, path: str) -> None:
    answer = exchange(site, request_line_of(REQUEST_LINE_LIMIT + 1, path))
    problem = assert_problem(answer, 414, "uri-too-long")
    assert problem["type"] == f"{site.url}/problems/uri-too-long"
    assert str(REQUEST_LINE_LIMIT) in problem["detail"]


def test_a_request_line_up_to_the_limit_is_served(site: LiveSite) -> None:
    # Twice gunicorn's default (4094): the site raises it to gunicorn's maximum.
    assert exchange(site, request_line_of(REQUEST_LINE_LIMIT, "/healthz")).status == 200
    assert exchange(site, request_line_of(5000, "/healthz")).status == 200

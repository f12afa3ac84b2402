"""Helpers for the client's tests: a valid receipt document, reading back what a live site
stored, a small scripted HTTP server of the test's own on loopback, and the receipt-outbox
command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The one place the client's tests name the site's test harness (tests/livesite.py): a
# real gunicorn on a database of its own; every test module takes LiveSite from here.
from tests.livesite import PYTHON as PYTHON
from tests.livesite import LiveSite as LiveSite

# CrewAI's telemetry, tracing and version check off. CrewAI starts its telemetry (an
# OpenTelemetry exporter thread that calls telemetry.crewai.com) when it is first imported,
# at collection, before any fixture runs: conftest.py sets these for the whole session, and
# crewai_helpers.crewai_offline sets them again around each test.
CREWAI_OFFLINE = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}


# A site address where nothing listens, for a client that must never reach a site. Port 9
# (discard) is below 1024: every server these tests start binds port 0, and the kernel never
# hands out a port that low, so no test's server can appear there (a freed ephemeral port, as
# conftest's refused_url gives, could be taken by another worker's site meanwhile).
NO_SITE = "http://127.0.0.1:9"


def document(workflow_id: str, **changes: Any) -> dict[str, Any]:
    """A valid `end` receipt document; a change to None removes the field."""
    doc: dict[str, Any] = {
        "workflow_id": workflow_id,
        "step_id": "audit-site",
        "attempt": {"number": 1},
        "phase": "end",
        "subject": {"type": "tool", "name": "website_audit"},
        "framework": {"name": "tests", "run_id": "run-1"},
        "outcome": "succeeded",
        "input_summary": '{"url": "https://example.org"}',
        "result": "12 findings",
        "observed": ["The audit tool returned 12 findings."],
        "not_observed": ["Whether the findings were sent to the client."],
    }
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def site_receipts(site: LiveSite, workflow_id: str) -> list[dict[str, Any]]:
    """Every receipt the site holds for the workflow (the tenant's key), newest first."""
    found: list[dict[str, Any]] = []
    cursor = ""
    while True:
        answer = site.get(
            f"/api/receipts?workflow_id={workflow_id}&limit=200&cursor={cursor}",
            key=site.api_key,
        )
        assert answer.status == 200, answer
        page = answer.json()
        found += page["receipts"]
        if not page["next_cursor"]:
            return found
        cursor = page["next_cursor"]


def site_document(site: LiveSite, receipt_id: str) -> dict[str, Any]:
    """The evidence document the site stored for a receipt."""
    answer = site.get(f"/api/receipts/{receipt_id}", key=site.api_key)
    assert answer.status == 200, answer
    document: dict[str, Any] = answer.json()["document"]
    return document


def site_keys(site: LiveSite, workflow_id: str) -> list[str]:
    """The idempotency keys of the workflow's receipts on the site, one per receipt."""
    return sorted(
        site_document(site, receipt["id"])["idempotency_key"]
        for receipt in site_receipts(site, workflow_id)
    )


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Reply = tuple[int, dict[str, str], bytes]


@dataclass
class ScriptedServer:
    """A small HTTP server of the test's own on loopback: it answers the first requests from
    `script` (status, headers, body), and every later one with `then` (a function of the
    request), by default by forwarding it to `forward_to` (a live site). It records what it
    saw. A real server, not a stand-in for the client."""

    script: list[Reply] = field(default_factory=list)
    forward_to: str | None = None
    then: Callable[[Seen], Reply] | None = None
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def __enter__(self) -> ScriptedServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Seen(
                    self.command, self.path, dict(self.headers.items()), self.rfile.read(length)
                )
                with server._lock:
                    server.seen.append(request)
                    reply = server.script.pop(0) if server.script else None
                status, headers, body = reply if reply is not None else server._then(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _handle

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _then(self, request: Seen) -> Reply:
        if self.then is not None:
            return self.then(request)
        assert self.forward_to is not None, "nothing to answer with"
        forwarded = urllib.request.Request(
            self.forward_to + request.path,
            data=request.body or None,
            method=request.method,
            headers={
                k: v
                for k, v in request.headers.items()
                if k.lower() in ("authorization", "content-type", "accept")
            },
        )
        try:
            with urllib.request.urlopen(forwarded, timeout=30) as answer:
                return answer.status, _passed(answer.headers), answer.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, _passed(error.headers), error.read()


def _passed(headers: Any) -> dict[str, str]:
    keep = ("content-type", "idempotent-replayed", "location", "retry-after")
    return {k: v for k, v in headers.items() if k.lower() in keep}


def problem(status: int, slug: str, **members: Any) -> Reply:
    body = {"type": f"http://testserver/problems/{slug}", "title": slug, "status": status}
    body.update(members)
    return status, {"Content-Type": "application/problem+json"}, json.dumps(body).encode()


def created(receipt_id: str, base: str = "http://testserver") -> Reply:
    body = {
        "id": receipt_id,
        "url": f"{base}/run/{receipt_id}",
        "verify_url": f"{base}/api/receipt/{receipt_id}/verify",
        "output_hash": "0" * 64,
        "recorded_at": "2026-11-30T09:31:42.062797Z",
        "log_index": 0,
    }
    return 201, {"Content-Type": "application/json"}, json.dumps(body).encode()


# receipt-outbox, the installed command, run as a user runs it (a subprocess).
OUTBOX_COMMAND = shutil.which("receipt-outbox", path=str(Path(sys.executable).parent))


def run_outbox(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    assert OUTBOX_COMMAND, "receipt-outbox is not installed beside this python"
    env = {k: v for k, v in os.environ.items() if k != "RECEIPTSITE_API_KEY"}
    if key is not None:
        env["RECEIPTSITE_API_KEY"] = key
    return subprocess.run(
        [OUTBOX_COMMAND, *args], capture_output=True, text=True, env=env, timeout=120
    )

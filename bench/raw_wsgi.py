"""The baseline of bench/run.py: the smallest WSGI application there is, answering every request
with the same 2 KB JSON document. It runs under the same gunicorn command line as the site
(gunicorn.conf.py, the same worker class, workers and threads), so the ratio of a route to it is
the cost of the site's own work: Django, the database, the cryptography.

    gunicorn --pythonpath bench raw_wsgi:application -c gunicorn.conf.py -k gthread -w 2 --threads 4
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

SIZE = 2048  # bytes of the answer's body


def _body() -> bytes:
    doc: dict[str, Any] = {"status": "ok", "receipts": [], "padding": ""}
    doc["padding"] = "x" * (SIZE - len(json.dumps(doc, separators=(",", ":"))))
    data = json.dumps(doc, separators=(",", ":")).encode()
    assert len(data) == SIZE
    return data


BODY = _body()
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", HEADERS)
    return [BODY]

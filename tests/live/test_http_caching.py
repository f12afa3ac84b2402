"""Conditional requests through a real gunicorn (tests/livesite.py): each route's ETag, and
the `304 Not Modified` with no body that an If-None-Match naming it gets, over HTTP as a
verifier or a front proxy speaks it. What makes the ETags is in tests/db/test_http_caching.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import example_body
from tests.livesite import LiveSite

pytestmark = pytest.mark.live

# Each route and the Cache-Control of its 200 and its 304.
ROUTES = {
    "/api/receipt/{id}/verify": "no-store",
    "/run/{id}": "no-store",
    "/run/{id}/handoff.txt": "no-store",
    "/run/{id}/bundle.json": "no-store",
    "/.well-known/receipt-keys.json": "public, max-age=5, must-revalidate",
    "/api/log/checkpoint": "no-cache",
    "/log/checkpoint": "public, max-age=5",
    "/log/tile/0/000.p/1": "public, max-age=31536000, immutable",
}


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=1) as live:
        answer = live.post("/api/receipts", example_body(idempotency_key="caching"))
        assert answer.status == 201, answer
        yield {"live": live, "id": answer.json()["id"]}


@pytest.mark.parametrize("route", list(ROUTES))
def test_each_route_answers_304_with_no_body_to_its_etag(
    site: dict[str, Any], route: str
) -> None:
    live: LiveSite = site["live"]
    path = route.format(id=site["id"])
    first = live.get(path)
    assert first.status == 200, first
    etag = first.headers["ETag"]
    assert etag and first.headers["Cache-Control"] == ROUTES[route]
    for method in ("GET", "HEAD"):
        again = live.request(method, path, headers={"If-None-Match": etag})
        assert again.status == 304, (method, again)
        assert again.body == b""
        assert again.headers["ETag"] == etag
        assert again.headers["Cache-Control"] == ROUTES[route]
        assert again.headers["Vary"] == first.headers["Vary"]
        if "{id}" in route:
            assert again.headers["X-Robots-Tag"] == "noindex"
            assert again.headers["Referrer-Policy"] == "same-origin"
    other = live.get(path, headers={"If-None-Match": '"not-this-one"'})
    assert other.status == 200 and other.body and other.headers["ETag"] == etag

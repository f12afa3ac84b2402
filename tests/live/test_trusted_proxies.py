"""TRUSTED_PROXIES against a real gunicorn, with real forwarded headers from a listed proxy and
from any other address: X-Forwarded-Proto and X-Forwarded-For are believed from a proxy in a
listed range only.

The site listens on 127.0.0.1 and lists the range 127.0.0.2/31 (127.0.0.2 and 127.0.0.3).
Linux answers the whole of 127.0.0.0/8 on loopback, so the test connects from 127.0.0.2, a
listed proxy, and from 127.0.0.1, which is not listed. Which client the site believes it
serves shows in the rate limit (`read`: a burst of 3, refilled once in 1000 s), counted per
client address.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.livesite import LiveSite

pytestmark = [pytest.mark.live, pytest.mark.any_database]

PROXY = "127.0.0.2"  # in TRUSTED_PROXIES' range
STRANGER = "127.0.0.1"  # not in it
ENV = {"TRUSTED_PROXIES": "127.0.0.2/31, fd00::/8", "RATE_LIMITS": "read=3/0.001"}
# A path of the `read` limit, per client address: an unknown receipt's verification (404).
LIMITED = "/api/receipt/00000000-0000-4000-8000-{:012d}/verify"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def fetch(site: LiveSite, path: str, source: str, headers: dict[str, str]) -> Answer:
    """GET `path` from the address `source`; redirects are answers, never followed."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", site.port, timeout=30, source_address=(source, 0)
    )
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def tls_site() -> Iterator[LiveSite]:
    """As deployed behind a TLS proxy: SITE_URL on https."""
    with LiveSite(workers=1, env={**ENV, "SITE_URL": "https://127.0.0.1"}) as site:
        yield site


@pytest.fixture(scope="module")
def plain_site() -> Iterator[LiveSite]:
    """SITE_URL on plain http, so that no request is redirected before it is counted."""
    with LiveSite(workers=1, env=ENV) as site:
        yield site


def test_x_forwarded_proto_from_a_proxy_in_the_range_is_believed(tls_site: LiveSite) -> None:
    answer = fetch(tls_site, "/api/log/checkpoint", PROXY, {"X-Forwarded-Proto": "https"})
    assert answer.status == 200, answer
    assert answer.headers["Strict-Transport-Security"].startswith("max-age=31536000")
    plain = fetch(tls_site, "/api/log/checkpoint", PROXY, {"X-Forwarded-Proto": "http"})
    assert plain.status == 301
    assert plain.headers["Location"] == f"https://127.0.0.1:{tls_site.port}/api/log/checkpoint"


def test_x_forwarded_proto_from_any_other_address_is_ignored(tls_site: LiveSite) -> None:
    for forwarded in ({"X-Forwarded-Proto": "https"},
                      {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}):
        answer = fetch(tls_site, "/api/log/checkpoint", STRANGER, forwarded)
        # Taken as the plain http it is: redirected, and no HSTS on a plain answer.
        assert answer.status == 301, answer
        assert answer.headers["Location"].startswith("https://")
        assert "Strict-Transport-Security" not in answer.headers


def test_behind_a_proxy_in_the_range_each_client_counts_on_its_own(plain_site: LiveSite) -> None:
    def statuses(forwarded_for: str, times: int, start: int) -> list[int]:
        return [
            fetch(plain_site, LIMITED.format(start + i), PROXY,
                  {"X-Forwarded-For": forwarded_for}).status
            for i in range(times)
        ]  # fmt: skip

    assert statuses("203.0.113.1", 4, 0) == [404, 404, 404, 429]
    # Another client behind the same proxy has its own bucket.
    assert statuses("203.0.113.2", 1, 10) == [404]
    # What a client writes itself, left of the address the proxy saw, changes nothing.
    assert statuses("198.51.100.7, 203.0.113.1", 1, 20) == [429]
    # A second proxy of the site (127.0.0.3, in the range) is skipped: the client is left of it.
    assert statuses("203.0.113.3, 127.0.0.3", 3, 30) == [404, 404, 404]
    assert statuses("203.0.113.3", 1, 40) == [429]


def test_x_forwarded_for_from_any_other_address_is_ignored(plain_site: LiveSite) -> None:
    answers = [
        fetch(plain_site, LIMITED.format(100 + i), STRANGER,
              {"X-Forwarded-For": f"203.0.113.{100 + i}"}).status
        for i in range(4)
    ]  # fmt: skip
    # Every one counted as 127.0.0.1's, whatever it claimed.
    assert answers == [404, 404, 404, 429]

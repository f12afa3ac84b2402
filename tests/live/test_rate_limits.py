"""Rate limits: token buckets that every worker and host share, in the database by default and
in Redis with REDIS_URL. Each behaviour runs on both stores (`store`); time passes by handing
`throttle` a clock, never by sleeping. The live tests count what 4 gunicorn workers let through.

Redis is a throwaway `redis-server` of this module's own, on a Unix socket; the tests that need
it are skipped, saying so, where redis-server is not installed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import example_body, flush_redis
from tests.livesite import LiveSite

pytestmark = pytest.mark.live


# --- the bucket ------------------------------------------------------------------------------


# --- the routes ------------------------------------------------------------------------------


# --- the stores ------------------------------------------------------------------------------


# --- several workers -------------------------------------------------------------------------


def _fire(site: LiveSite, path: str, count: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda _: site.get(path), range(count)))


@pytest.mark.live
@pytest.mark.parametrize("backend", ["database", "redis"])
def test_four_workers_let_the_configured_number_through_not_four_times_it(
    backend: str, request: pytest.FixtureRequest
) -> None:
    env = {"RATE_LIMITS": "ingest=20/0.001,read=20/0.001"}
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        flush_redis(url)
        env["REDIS_URL"] = url
    with LiveSite(workers=4, env=env) as site:
        published = site.post("/api/receipts", example_body())
        assert published.status == 201, published
        answers = _fire(site, f"/api/receipt/{published.json()['id']}/verify", 60)
        pages = _fire(site, f"/run/{published.json()['id']}", 5)  # the same address's bucket
        healthz = _fire(site, "/healthz", 10)
    statuses = [answer.status for answer in answers]
    assert statuses.count(200) == 20, statuses
    assert statuses.count(429) == 40, statuses
    refusal = next(answer for answer in answers if answer.status == 429)
    assert refusal.content_type == "application/problem+json"
    assert int(refusal.headers["Retry-After"]) >= 1
    assert [page.status for page in pages] == [429] * 5
    assert [answer.status for answer in healthz] == [200] * 10

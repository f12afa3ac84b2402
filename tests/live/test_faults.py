"""Promises under faults: a real gunicorn on a throwaway PostgreSQL cluster that the
tests stop and start. The machine's shared PostgreSQL server is never touched.

Runs only when the suite runs on PostgreSQL (DATABASE_URL=postgres://...): the promises are
about a database server that can go away, which an SQLite file cannot.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from urllib.parse import quote

import pytest

from tests.conftest import example_body
from tests.livesite import LiveSite, Response, is_postgres, suite_database_url
from tests.pgcluster import PG_BIN, ThrowawayCluster

WORKERS = 3
DATABASE_TIMEOUT = 2  # seconds: the site's connect timeout (settings read DATABASE_TIMEOUT)
BOUND = 10.0  # seconds: an answer while the database is down must come within this (a
# correctness bound, not a benchmark: the promise is "within the configured timeout")
RECOVERY = 30.0  # seconds the site may take to notice the database is back


pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not is_postgres(suite_database_url()),
        reason="fault tests stop and start a PostgreSQL server (a throwaway cluster of their "
        "own); they run when the suite runs on PostgreSQL (DATABASE_URL=postgres://...)",
    ),
    pytest.mark.skipif(PG_BIN is None, reason="initdb and pg_ctl are not installed"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    cluster = ThrowawayCluster()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="module")
def site(cluster: ThrowawayCluster) -> Iterator[LiveSite]:
    live = LiveSite(
        workers=WORKERS, server_url=cluster.url, env={"DATABASE_TIMEOUT": str(DATABASE_TIMEOUT)}
    )
    with live:
        yield live
        # A test that failed half-way may have left the cluster down: the site's database is
        # dropped from it at the end, so bring it back first.
        if not cluster.running():
            cluster.start()


def body_for(name: str) -> dict[str, object]:
    return example_body(
        workflow_id=f"faults-{name}",
        idempotency_key=f"faults/{name}/end/1",
        result=f"result of {name}",
    )


def assert_problem_503(answer: Response, what: str, logs: str) -> None:
    assert answer.status == 503, (what, answer, logs)
    assert answer.content_type == "application/problem+json", (what, answer)
    problem = answer.json()
    assert problem["status"] == 503, (what, problem)
    assert problem["type"] and problem["title"] and problem["detail"], (what, problem)
    assert answer.elapsed < BOUND, (what, f"{answer.elapsed:.2f} s")


def test_a_lost_answer_is_found_again_by_replaying_its_key(site: LiveSite) -> None:
    # The plain case: the answer came, and the producer sends the same request again.
    body = body_for(f"again-{secrets.token_hex(4)}")
    first = site.post("/api/receipts", body)
    assert first.status == 201, (first, site.logs())
    assert first.headers.get("Idempotent-Replayed") is None
    again = site.post("/api/receipts", body)
    assert again.status == 201, again
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.body == first.body

    # The answer lost: the whole request is sent, the connection closed before the answer is
    # read. The commit still happens; the producer, not knowing, replays its key.
    name = f"lost-{secrets.token_hex(4)}"
    body = body_for(name)
    data = json.dumps(body).encode()
    head = (
        "POST /api/receipts HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{site.port}\r\n"
        f"Authorization: Bearer {site.api_key}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", site.port), timeout=10) as connection:
        connection.sendall(head.encode() + data)
    listed: list[dict[str, object]] = []
    deadline = time.monotonic() + 15
    while not listed and time.monotonic() < deadline:
        page = site.get(f"/api/receipts?workflow_id={body['workflow_id']}", key=site.api_key)
        assert page.status == 200, page
        listed = page.json()["receipts"]
        time.sleep(0.1)
    assert len(listed) == 1, (listed, site.logs())
    replay = site.post("/api/receipts", body)
    assert replay.status == 201, replay
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert replay.json()["id"] == listed[0]["id"]
    page = site.get(f"/api/receipts?workflow_id={body['workflow_id']}", key=site.api_key)
    assert [r["id"] for r in page.json()["receipts"]] == [listed[0]["id"]]


def test_while_the_database_is_down_answers_are_503_and_the_site_recovers_by_itself(
    site: LiveSite, cluster: ThrowawayCluster
) -> None:
    run = secrets.token_hex(4)
    earlier = []
    for i in range(5):
        answer = site.post("/api/receipts", body_for(f"{run}-{i}"))
        assert answer.status == 201, (answer, site.logs())
        earlier.append(answer.json())
    size_before = int(site.get("/api/log/checkpoint").text.split("\n")[1])
    assert site.get("/healthz").status == 200

    cluster.stop("fast")
    try:
        # Every worker, one after the other (round robin is not promised, so more than one
        # round), then many at once.
        for i in range(2 * WORKERS):
            assert_problem_503(
                site.post("/api/receipts", body_for(f"{run}-down-{i}")), "POST", site.logs()
            )
            assert_problem_503(site.get("/healthz"), "healthz", site.logs())
        receipt_id = earlier[0]["id"]
        for path in (
            f"/api/receipt/{receipt_id}/verify",
            f"/api/receipts/{receipt_id}",
            "/api/receipts",
            "/api/log/checkpoint",
        ):
            assert_problem_503(site.get(path, key=site.api_key), path, site.logs())
        page = site.get(f"/run/{receipt_id}")
        assert page.status == 503, (page, site.logs())
        assert page.elapsed < BOUND

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=12) as pool:
            answers = list(
                pool.map(
                    lambda i: (
                        site.post("/api/receipts", body_for(f"{run}-burst-{i}"))
                        if i % 2
                        else site.get("/healthz")
                    ),
                    range(12),
                    timeout=60,
                )
            )
        for answer in answers:
            assert_problem_503(answer, "burst", site.logs())
        burst = time.monotonic() - started
    finally:
        cluster.start()

    # Back by itself: no restart of gunicorn, no operator.
    started = time.monotonic()
    while True:
        try:
            health = site.get("/healthz", timeout=5)
        except OSError as error:  # a broken connection is as good as a 503 here
            health = None
            last = repr(error)
        else:
            last = repr(health)
        if health is not None and health.status == 200:
            break
        assert time.monotonic() - started < RECOVERY, (last, site.logs(), cluster.log())
        time.sleep(0.25)
    recovery = time.monotonic() - started
    # Every worker is back (each had its own broken connection).
    for _ in range(2 * WORKERS):
        assert site.get("/healthz").status == 200

    new = []
    for i in range(2 * WORKERS):
        answer = site.post("/api/receipts", body_for(f"{run}-after-{i}"))
        assert answer.status == 201, (answer, site.logs())
        assert answer.headers.get("Idempotent-Replayed") is None
        new.append(answer.json())
    # Nothing was stored while the database was down, and nothing answered before was lost.
    assert [a["log_index"] for a in new] == list(range(size_before, size_before + 2 * WORKERS))
    for answer in [*earlier, *new]:
        verdict = site.get(f"/api/receipt/{answer['id']}/verify")
        assert verdict.status == 200, verdict
        assert verdict.json()["status"] == "valid", verdict.json()
        assert verdict.json()["log"]["index"] == answer["log_index"]
    for i, answer in enumerate(earlier):  # still the same receipts, never stored twice
        replay = site.post("/api/receipts", body_for(f"{run}-{i}"))
        assert replay.status == 201 and replay.headers.get("Idempotent-Replayed") == "true"
        assert replay.json()["id"] == answer["id"]
    print(f"outage burst answered in {burst:.2f} s; recovered {recovery:.2f} s after restart")


def test_a_load_running_through_an_outage_loses_nothing_and_stores_nothing_twice(
    site: LiveSite, cluster: ThrowawayCluster
) -> None:
    """PostgreSQL stopped and started again while client threads keep posting receipts (each
    with its idempotency key) and reading a verification, a page and /healthz."""
    run = secrets.token_hex(4)
    seed = site.post("/api/receipts", body_for(f"{run}-seed"))
    assert seed.status == 201, (seed, site.logs())
    seed_id = seed.json()["id"]
    stop = threading.Event()
    lock = threading.Lock()
    bodies: dict[str, dict[str, object]] = {}  # every key posted, with its body
    answered: dict[str, dict[str, object]] = {}  # key -> the 201's body
    seen: list[tuple[str, Response]] = []  # (what, answer) for every answer
    failures: list[object] = []  # a hang, a broken connection, a status not promised

    def call(what: str, send: Callable[[], Response]) -> Response | None:
        try:
            answer = send()
        except (OSError, http.client.HTTPException) as error:  # a timeout is a hang
            failures.append((what, repr(error)))
            return None
        with lock:
            seen.append((what, answer))
        return answer

    def poster(number: int) -> None:
        sent = 0
        while not stop.is_set():
            body = body_for(f"{run}-load-{number}-{sent}")
            key = str(body["idempotency_key"])
            sent += 1
            with lock:
                bodies[key] = body
            answer = call("POST", partial(site.post, "/api/receipts", body, timeout=BOUND + 5))
            if answer is not None and answer.status == 201:
                with lock:
                    answered[key] = answer.json()
            else:
                time.sleep(0.1)  # a producer backs off (and replays this key later)

    def reader(number: int) -> None:
        paths = [f"/api/receipt/{seed_id}/verify", f"/run/{seed_id}", "/healthz"]
        turn = number
        while not stop.is_set():
            path = paths[turn % len(paths)]
            turn += 1
            call(path, partial(site.get, path, timeout=BOUND + 5))
            time.sleep(0.02)

    recovered = None
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(poster, n) for n in range(4)]
        futures += [pool.submit(reader, n) for n in range(2)]
        def until(condition: Callable[[list[tuple[str, Response]]], bool], why: str) -> None:
            """Wait until the answers seen since now meet `condition`."""
            with lock:
                mark = len(seen)
            deadline = time.monotonic() + 60
            while True:
                with lock:
                    if condition(seen[mark:]):
                        return
                assert time.monotonic() < deadline, (why, site.logs(), cluster.log())
                time.sleep(0.05)

        def stored_some(answers: list[tuple[str, Response]]) -> bool:
            return sum(what == "POST" and a.status == 201 for what, a in answers) >= 8

        def refused(answers: list[tuple[str, Response]]) -> bool:
            # The outage as the load meets it: ingest and reads both answered 503.
            kinds = {what for what, a in answers if a.status == 503}
            return "POST" in kinds and len(kinds) >= 2

        try:
            until(stored_some, "the load stored nothing before the outage")
            cluster.stop("fast")
            stopped = time.monotonic()
            until(refused, "the load never met the outage")
            cluster.start()
            # Recovery by itself, seen by the load: a 201 after the restart.
            with lock:
                mark = len(seen)
            while recovered is None:
                assert time.monotonic() - stopped < RECOVERY, (site.logs(), cluster.log())
                time.sleep(0.2)
                with lock:
                    later = seen[mark:]
                if any(what == "POST" and answer.status == 201 for what, answer in later):
                    recovered = time.monotonic() - stopped
            until(stored_some, "the load stored nothing after the recovery")
        finally:
            stop.set()
            if not cluster.running():
                cluster.start()
            for future in futures:
                future.result(timeout=60)

    assert not failures, (failures[:5], site.logs()[-4000:])
    for what, answer in seen:
        if answer.status == 503:
            if what != f"/run/{seed_id}":  # the page's 503 is a page for people
                assert_problem_503(answer, what, "")
        else:
            assert answer.status == (201 if what == "POST" else 200), (what, answer)
        assert answer.elapsed < BOUND, (what, f"{answer.elapsed:.2f} s")
    statuses = {(what, answer.status) for what, answer in seen}
    assert ("POST", 503) in statuses and ("/healthz", 503) in statuses, statuses
    assert ("/healthz", 200) in statuses, statuses

    # Every key not answered 201 is replayed: it returns the receipt stored before its answer
    # was lost, or stores it now.
    unanswered = [key for key in bodies if key not in answered]
    for key, body in bodies.items():
        if key not in answered:
            replay = site.post("/api/receipts", body)
            assert replay.status == 201, (replay, site.logs())
            answered[key] = replay.json()
    ids = {key: str(answer["id"]) for key, answer in answered.items()}
    assert len(set(ids.values())) == len(ids) == len(bodies)
    listed: list[str] = []
    cursor = ""
    while True:
        page = site.get(f"/api/receipts?limit=200{cursor}", key=site.api_key)
        assert page.status == 200, page
        listed += [str(r["id"]) for r in page.json()["receipts"]
                   if str(r["workflow_id"]).startswith(f"faults-{run}-load-")]  # fmt: skip
        if not page.json()["next_cursor"]:
            break
        cursor = f"&cursor={quote(page.json()['next_cursor'])}"
    # No receipt exists that was neither answered nor found again by its key.
    assert sorted(listed) == sorted(ids.values())
    for stored in answered.values():
        verdict = site.get(f"/api/receipt/{stored['id']}/verify")
        assert verdict.status == 200 and verdict.json()["status"] == "valid", verdict
        assert verdict.json()["log"]["index"] == stored["log_index"]
    # The log has no gap: checklog recomputes the tree from every stored receipt.
    assert "OK:" in site.manage("checklog")
    size = int(site.get("/api/log/checkpoint").text.split("\n")[1])
    assert len({stored["log_index"] for stored in answered.values()}) == len(answered)
    assert all(int(str(stored["log_index"])) < size for stored in answered.values())
    print(
        f"{len(bodies)} keys posted, {len(unanswered)} replayed; "
        f"recovered {recovered:.2f} s after the stop"
    )

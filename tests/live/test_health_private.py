"""The health check as a load balancer uses it, against a real gunicorn and its log: /healthz on
the host's private address (a Host that ALLOWED_HOSTS does not name) answers, without a
traceback, and every other path keeps its Host check; and a host whose key another host
retired (a rolling restart half done) signs nothing, says so in its log and on /healthz, while
`signcheckpoint` with the old key refuses in one line."""

from __future__ import annotations

import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from receiptsite.integrity.keys import generate_private_key_pem
from tests.conftest import example_body
from tests.livesite import PYTHON, REPO, LiveSite

pytestmark = pytest.mark.live

PRIVATE = "10.0.0.5:8000"


def get(site: LiveSite, path: str, host: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
    try:
        connection.request("GET", path, headers={"Host": host})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def log_events(site: LiveSite) -> list[dict[str, str]]:
    time.sleep(0.5)  # gunicorn writes its lines after the answer
    return [json.loads(line) for line in site.stderr().splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=1) as live:
        yield live


def test_healthz_on_the_private_address_answers_200_without_a_traceback(site: LiveSite) -> None:
    before = len(log_events(site))
    for host in (PRIVATE, "10.0.0.5", "[fd00::5]:8000"):
        status, body = get(site, "/healthz", host)
        assert (status, json.loads(body)) == (200, {"status": "ok"}), (host, body)
    events = log_events(site)[before:]
    assert [e for e in events if e["level"] in ("ERROR", "CRITICAL")] == [], events
    assert "Traceback" not in site.stderr()


def test_every_other_path_keeps_its_host_check(site: LiveSite) -> None:
    for path in ("/api/log/checkpoint", "/"):
        status, _ = get(site, path, PRIVATE)
        assert status == 400, path
    assert get(site, "/api/log/checkpoint", f"127.0.0.1:{site.port}")[0] == 200


def manage(site: LiveSite, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """manage.py against the site's database, as another host would run it."""
    return subprocess.run(
        [str(PYTHON), "manage.py", *args], cwd=REPO, env={**site.base_env, **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_host_whose_key_was_retired_elsewhere_signs_nothing_and_says_so(
    tmp_path: Path,
) -> None:
    with LiveSite(workers=1) as host_b:
        assert host_b.post("/api/receipts", example_body(idempotency_key="a")).status == 201
        old = host_b.base_env["SIGNING_KEY_FILE"]
        new = tmp_path / "signing-2027.pem"
        new.write_bytes(generate_private_key_pem())
        # Host A, restarted first with the new key, rotates (its `signcheckpoint`).
        done = manage(host_b, "signcheckpoint", SIGNING_KEY_FILE=str(new),
                      PREVIOUS_SIGNING_KEY_FILE=old)  # fmt: skip
        assert done.returncode == 0, done.stderr
        keys = {k["status"]: k["kid"] for k in host_b.get("/.well-known/receipt-keys.json").json()
                ["keys"]}  # fmt: skip
        old_kid, new_kid = keys["retired"], keys["active"]

        # Host B, not yet restarted, still holds the old key: it refuses to sign with it.
        answer = host_b.post("/api/receipts", example_body(idempotency_key="b"))
        assert answer.status == 503, answer
        problem = answer.json()
        assert problem["type"].endswith("/problems/cannot-sign")
        assert f"({old_kid}) is retired" in problem["detail"]
        assert f"the active key is {new_kid}" in problem["detail"]
        health = host_b.get("/healthz")
        assert health.status == 503 and health.json()["detail"] == problem["detail"]
        refused = [e for e in log_events(host_b) if e["logger"] == "receiptsite.ledger.keyring"]
        assert refused and refused[0]["level"] == "ERROR", host_b.logs()
        assert refused[0]["message"].startswith("signing key: refusing to sign: the key in")
        assert host_b.get("/api/log/checkpoint").status == 200  # reads keep working

        # A shell that still names the old key: signcheckpoint refuses, in one line.
        done = manage(host_b, "signcheckpoint", PREVIOUS_SIGNING_KEY_FILE=str(new))
        assert done.returncode == 1
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("CommandError: The site has no signing key it may use: the key "
                               f"in SIGNING_KEY_FILE ({old_kid}) is retired"), line
        assert f"the active key is {new_kid}" in line
        keys_now = host_b.get("/.well-known/receipt-keys.json").json()["keys"]
        assert {k["kid"]: k["status"] for k in keys_now} == {old_kid: "retired",
                                                             new_kid: "active"}

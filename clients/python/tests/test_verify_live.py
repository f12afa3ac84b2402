"""receipt-verify against a real site (tests/livesite.py): a receipt checked from a /run/<id>
URL and a verify URL, with and without a pinned key, a key that is not the site's, and the site
stopped. The offline checks (every conformance vector, RFC 8785, keys) are in test_verify.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vector_helpers import fresh_x, load, run

pytestmark = pytest.mark.live


# --- a live site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[dict[str, Any]]:
    from client_helpers import LiveSite

    from tests.examples import EXAMPLE_BODY

    with LiveSite(workers=2) as site:
        answer = site.post("/api/receipts", {**EXAMPLE_BODY, "idempotency_key": "verify-live"})
        assert answer.status == 201, answer
        keys = site.get("/.well-known/receipt-keys.json").json()
        yield {"site": site, "receipt": answer.json(), "keys": keys}


def test_a_receipt_link_verifies_against_the_published_key(live: dict[str, Any]) -> None:
    done = run(live["receipt"]["url"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verdict: VALID" in done.stdout
    assert "not independent of the site" in done.stdout
    assert live["receipt"]["id"] in done.stdout


def test_a_verify_url_verifies_and_a_pinned_key_needs_no_trust(live: dict[str, Any]) -> None:
    done = run(live["receipt"]["verify_url"], "--json")
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["status"] == "valid"
    x = live["keys"]["keys"][0]["x"]
    pinned = run(live["receipt"]["url"], f"--key={x}")
    assert pinned.returncode == 0, pinned.stdout
    assert "not independent" not in pinned.stdout


def test_a_pinned_key_that_is_not_the_sites_is_invalid(
    live: dict[str, Any], tmp_path: Path
) -> None:
    done = run(live["receipt"]["url"], f"--key={fresh_x()}", "--json")
    assert done.returncode == 1, done.stdout
    failed = [c["name"] for c in json.loads(done.stdout)["checks"] if c["result"] == "fail"]
    assert failed == ["signature", "checkpoint_signature"]
    # The same with another site's keys document in a file.
    other = load("keys.json")
    (tmp_path / "other-keys.json").write_text(json.dumps(other))
    assert run(live["receipt"]["url"], "--key", str(tmp_path / "other-keys.json")).returncode == 1


def test_an_unknown_receipt_cannot_be_checked(live: dict[str, Any]) -> None:
    done = run(f"{live['site'].url}/run/00000000-0000-4000-8000-000000000000")
    assert done.returncode == 2
    assert "404" in done.stdout


def test_with_the_site_stopped_only_a_saved_verification_and_a_pinned_key_work(
    live: dict[str, Any], tmp_path: Path
) -> None:
    site = live["site"]
    saved = tmp_path / "verify.json"
    saved.write_text(site.get(f"/api/receipt/{live['receipt']['id']}/verify").text)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(live["keys"]))
    assert run(str(saved)).returncode == 2  # a saved file names its own keys_url: not fetched
    site.stop()
    try:
        done = run(live["receipt"]["url"], timeout=90)
        assert done.returncode == 2, done.stdout
        assert "cannot reach" in done.stdout
        assert run(live["receipt"]["url"], "--key", str(keys)).returncode == 2
        assert run(str(saved)).returncode == 2  # no key pinned
        assert run(str(saved), "--key", str(keys)).returncode == 0
    finally:
        site._serve()

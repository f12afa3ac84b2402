"""schemathesis against the OpenAPI description the site serves, on a live gunicorn: every
route, valid and invalid data, `--checks all`, with a valid key, an unknown key and none.
No answer may be a 5xx, none may contradict the description, and the description must not
allow what the site refuses. Examples are bounded (SCHEMATHESIS_EXAMPLES, default 10 per
operation) so that the suite's time stays in check."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.livesite import REPO, VENV_BIN, LiveSite

pytestmark = pytest.mark.live

EXAMPLES = os.environ.get("SCHEMATHESIS_EXAMPLES", "10")


def run_schemathesis(site: LiveSite, *headers: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(VENV_BIN / "schemathesis"),
        "--config-file",
        str(REPO / "schemathesis.toml"),
        "run",
        f"{site.url}/api/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        EXAMPLES,
        "--seed",
        "20261201",
        "--request-timeout",
        "20",
        "--generation-deterministic",
    ]
    for header in headers:
        command += ["--header", header]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"}
    )


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    """One site for the three runs (what one run stores, the others may meet: any answer must
    still hold to the description)."""
    with LiveSite(workers=2) as live:
        yield live


@pytest.mark.parametrize(
    "key",
    [
        "valid",
        # A key that is unknown or missing is refused before any tenant's data is read (one
        # lookup of a prefix that names nothing): the same answers on any database.
        pytest.param("unknown", marks=pytest.mark.any_database),
        pytest.param("none", marks=pytest.mark.any_database),
    ],
)
def test_schemathesis_finds_no_failure(site: LiveSite, key: str) -> None:
    headers = {
        "valid": [f"Authorization: Bearer {site.api_key}"],
        "unknown": ["Authorization: Bearer rk_000000000000_unknownkeyunknownkeyunknownkey00"],
        "none": [],
    }[key]
    done = run_schemathesis(site, *headers)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Traceback" not in site.logs()

"""Configuration is read and checked once, at start: a variable the site cannot use stops
`manage.py` and gunicorn with one line that names it, never a traceback and never a 500 later.

Real processes: `manage.py check` and gunicorn with the repository's gunicorn.conf.py, each
with an environment of its own (the suite's variables removed, see tests/livesite.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.livesite import GUNICORN, REPO, LiveSite, free_port
from tests.unit.test_configuration import BAD, TIMEOUT, assert_one_line, environment
from tests.unit.test_configuration import folder as folder  # the fixture

pytestmark = [pytest.mark.live, pytest.mark.any_database]


@pytest.fixture
def gunicorn_port() -> Iterator[int]:
    yield free_port()


@pytest.mark.parametrize(("variable", "value", "words"), BAD)
def test_gunicorn_stops_before_serving_with_one_line_naming_the_variable(
    folder: Path, gunicorn_port: int, variable: str, value: str, words: str
) -> None:
    env = environment(folder, **{variable: value}, BIND=f"127.0.0.1:{gunicorn_port}")
    done = subprocess.run(
        [str(GUNICORN), "receiptsite.wsgi", "-c", "gunicorn.conf.py"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert_one_line(done, variable, words)
    assert done.stdout == ""  # no access line: it never served


@pytest.mark.live
def test_log_level_info_serves_under_gunicorn_with_one_logging_configuration() -> None:
    # migrate, createtenant and createapikey (manage.py), then gunicorn, all with LOG_LEVEL=info.
    with LiveSite(workers=1, env={"LOG_LEVEL": "info"}) as site:
        assert site.get("/healthz").status == 200
        missing = "0f0e0d0c-0000-4000-8000-000000000000"
        assert site.get(f"/run/{missing}").status == 404
        deadline = time.monotonic() + 15  # gunicorn writes the access line after the answer
        while "/run/" not in site.stdout() and time.monotonic() < deadline:
            time.sleep(0.1)
        stdout, stderr = site.stdout(), site.stderr()
    # gunicorn's access line (stdout) and Django's "Not Found" warning (stderr) share the one
    # format (a JSON object per line) and the one mask.
    assert f"GET /run/{missing[:8]}-\u2026" in stdout, stdout
    assert missing not in stdout + stderr
    events = [json.loads(line) for line in stderr.splitlines()]
    said = {(e["level"], e["logger"], e["message"].split(" with pid")[0]) for e in events}
    assert ("INFO", "gunicorn.error", "Booting worker") in said, stderr
    assert ("WARNING", "django.request", f"Not Found: /run/{missing[:8]}-\u2026") in said, stderr


# --- the parsers themselves ------------------------------------------------------------------




"""Configuration is read and checked once, at start: a variable the site cannot use stops
`manage.py` and gunicorn with one line that names it, never a traceback and never a 500 later.

Real processes: `manage.py check` and gunicorn with the repository's gunicorn.conf.py, each
with an environment of its own (the suite's variables removed, see tests/livesite.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from receiptsite.integrity import cosignature
from receiptsite.integrity.keys import generate_private_key_pem
from tests.livesite import PYTHON, REPO, SERVE, SITE_VARIABLES, LiveSite, free_port

pytestmark = [pytest.mark.live, pytest.mark.any_database]


TIMEOUT = 60  # seconds for a process that should stop at once


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    key = tmp_path / "signing-key.pem"
    key.write_bytes(generate_private_key_pem())
    (tmp_path / "ec-key.pem").write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (tmp_path / "garbage.pem").write_text("not a key\n")
    witness = cosignature.witness_vkey("witness.test.example/w1", bytes(range(32)))
    (tmp_path / "policy-bad-line.txt").write_text(f"witness w1 {witness} http://w\nquorm w1\n")
    (tmp_path / "policy-none.txt").write_text("quorum none\n")
    (tmp_path / "policy-no-url.txt").write_text(f"witness w1 {witness}\nquorum w1\n")
    return tmp_path


def environment(folder: Path, **changes: str) -> dict[str, str]:
    """A production-like environment that starts, with `changes` made ("" removes)."""
    env = {k: v for k, v in os.environ.items() if k not in SITE_VARIABLES}
    env.update(
        DJANGO_SETTINGS_MODULE="receiptsite.settings",
        SECRET_KEY="test-only-secret-key-not-for-production",
        SIGNING_KEY_FILE=str(folder / "signing-key.pem"),
        DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
        LOG_STATE_FILE=str(folder / "log-state.json"),
        VAR_DIR=str(folder / "var"),
        SITE_URL="http://127.0.0.1:8000",
    )
    for name, value in changes.items():
        if value:
            env[name] = value.replace("{folder}", str(folder))
        else:
            env.pop(name, None)
    return env


# (variable, value, a few words the one line must hold)
BAD = [
    ("RATE_LIMITS", "ingest=fast", "ingest"),
    ("RATE_LIMITS", "ingest=100/0", "positive"),
    ("RATE_LIMITS", "reads=30/5", "reads=30/5"),
    ("RATE_LIMITS", "sometimes", "must be off, on"),
    ("RATE_LIMITS", "auth=20/0", "positive numbers for auth"),
    ("REDIS_URL", "localhost:6379", "must be redis://host:port/db"),
    ("REDIS_URL", "redis://cache:port/0", "could not be cast to integer"),
    ("REDIS_URL", "redis://:s3cret@cache:6379/zero", "'redis://:***@cache:6379/zero'"),
    ("LOG_LEVEL", "loud", "must be one of debug, info"),
    ("SIGNING_KEY_FILE", "{folder}/missing.pem", "does not exist"),
    ("SIGNING_KEY_FILE", "{folder}", "cannot be read"),  # a directory
    ("SIGNING_KEY_FILE", "{folder}/ec-key.pem", "not an Ed25519 private key"),
    ("SIGNING_KEY_FILE", "{folder}/garbage.pem", "not an Ed25519 private key"),
    ("SIGNING_KEY_FILE", "", "must be set when DEBUG is off"),
    ("PREVIOUS_SIGNING_KEY_FILE", "{folder}/missing.pem", "does not exist"),
    ("PREVIOUS_SIGNING_KEY_FILE", "{folder}/garbage.pem", "not an Ed25519 private key"),
    ("DATABASE_URL", "mysql://user@db.internal/receipts", "not mysql:"),
    ("DATABASE_URL", "receipts.sqlite3", "must be sqlite:///"),
    ("DATABASE_TIMEOUT", "soon", "whole number"),
    ("DATABASE_TIMEOUT", "0", "at least 1"),
    ("DATABASE_PREPARED_STATEMENTS", "sometimes", "must be true or false, not 'sometimes'"),
    ("DEBUG", "maybe", "true or false"),
    ("SITE_URL", "ftp://receipts.example.org", "absolute http(s) URL"),
    ("TEXT_LIMIT", "lots", "whole number"),
    ("WITNESS_POLICY_FILE", "{folder}/missing.txt", "does not exist"),
    ("WITNESS_POLICY_FILE", "{folder}/policy-bad-line.txt", "line 2: unknown keyword 'quorm'"),
    ("WITNESS_POLICY_FILE", "{folder}/policy-none.txt", "whose quorum is 'none'"),
    ("WITNESS_POLICY_FILE", "{folder}/policy-no-url.txt", "needs its submission URL"),
    ("WITNESS_INTERVAL", "often", "whole number"),
    ("WITNESS_INTERVAL", "0", "at least 1"),
    ("TRUSTED_PROXIES", "proxy.internal", "'proxy.internal' does not appear to be an IPv4 or"),
    ("TRUSTED_PROXIES", "10.0.0.1/24", "10.0.0.1/24 has host bits set"),
    ("TRUSTED_PROXIES", "127.0.0.1, fd00::/129", "not 'fd00::/129'"),
    ("TRUSTED_PROXIES", "*", "takes IP addresses and CIDR ranges"),
    ("METRICS_ALLOWED_FROM", "prometheus.internal",
     "'prometheus.internal' does not appear to be an IPv4 or IPv6 network"),
    ("METRICS_ALLOWED_FROM", "10.0.0.1/8", "10.0.0.1/8 has host bits set"),
    ("METRICS_ALLOWED_FROM", "*", "CIDR ranges, IPv4 or IPv6, comma-separated (10.0.0.7, "
     "10.0.0.0/24, fd00::/8), or none, not '*'"),
    ("WEB_CONCURRENCY", "many", "must be a whole number of worker processes, not 'many'"),
    ("WEB_CONCURRENCY", "2.5", "must be a whole number of worker processes, not '2.5'"),
    ("WEB_CONCURRENCY", "-1", "must be a whole number of worker processes, not '-1'"),
    ("WEB_CONCURRENCY", "0", "must be at least 1, not 0"),
]


def assert_one_line(done: subprocess.CompletedProcess[str], variable: str, words: str) -> None:
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"receiptsite: {variable} "), lines
    assert words in lines[0], lines


@pytest.mark.parametrize(("variable", "value", "words"), BAD)
def test_manage_py_stops_with_one_line_naming_the_variable(
    folder: Path, variable: str, value: str, words: str
) -> None:
    done = subprocess.run(
        [str(PYTHON), "manage.py", "check"], cwd=REPO, env=environment(folder, **{variable: value}),
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert_one_line(done, variable, words)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file, whatever its mode")
def test_an_unreadable_signing_key_stops_manage_py(folder: Path) -> None:
    (folder / "signing-key.pem").chmod(0)
    done = subprocess.run(
        [str(PYTHON), "manage.py", "check"], cwd=REPO, env=environment(folder),
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert_one_line(done, "SIGNING_KEY_FILE", "cannot be read (Permission denied)")


@pytest.mark.parametrize("spelling", ["info", "INFO", "Warning", "debug"])
def test_log_level_is_taken_in_any_case_by_manage_py(folder: Path, spelling: str) -> None:
    done = subprocess.run(
        [str(PYTHON), "manage.py", "check"], cwd=REPO,
        env=environment(folder, LOG_LEVEL=spelling), capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


# --- the parsers themselves ------------------------------------------------------------------


@pytest.fixture
def gunicorn_port() -> Iterator[int]:
    yield free_port()


# gunicorn, started as the README says (`python -m receiptsite.serve`: the settings are read
# before gunicorn is imported, which would itself parse WEB_CONCURRENCY, with a traceback for
# `many`): every bad value stops it with the same one line.
@pytest.mark.parametrize(("variable", "value", "words"), BAD)
def test_gunicorn_stops_before_serving_with_one_line_naming_the_variable(
    folder: Path, gunicorn_port: int, variable: str, value: str, words: str
) -> None:
    env = environment(folder, **{variable: value}, BIND=f"127.0.0.1:{gunicorn_port}")
    done = subprocess.run(
        SERVE, cwd=REPO, env=env,
        capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert_one_line(done, variable, words)
    assert done.stdout == ""  # no access line: it never served


# gunicorn's own: the folder of the workers' metrics (gunicorn.conf.py), which manage.py never
# reads.
METRICS_DIR_BAD = [
    ("{folder}/signing-key.pem", "names {folder}/signing-key.pem, which cannot be used as a "
     "folder for the workers' metrics (File exists)"),
    ("{folder}/signing-key.pem/metrics", "(Not a directory)"),
]


@pytest.mark.parametrize(("value", "words"), METRICS_DIR_BAD)
def test_gunicorn_stops_on_a_metrics_dir_it_cannot_use(
    folder: Path, gunicorn_port: int, value: str, words: str
) -> None:
    env = environment(folder, METRICS_DIR=value, BIND=f"127.0.0.1:{gunicorn_port}")
    done = subprocess.run(
        SERVE, cwd=REPO, env=env,
        capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert_one_line(done, "METRICS_DIR", words.replace("{folder}", str(folder)))
    assert done.stdout == ""


def test_metrics_dir_names_the_workers_folder_which_is_emptied_at_start(tmp_path: Path) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "counter_4242.db").write_bytes(b"left by another run, and unreadable")
    (folder / "notes.txt").write_text("the operator's own\n")
    with LiveSite(workers=1, env={"METRICS_DIR": str(folder)}) as site:
        assert not (folder / "counter_4242.db").exists()
        answer = site.get("/metrics")  # the stale file would have made it a 500
        assert answer.status == 200, answer
        assert 'route="healthz"' in answer.text  # LiveSite's start, counted
        assert any(path.name.startswith("histogram_") for path in folder.glob("*.db"))
    assert (folder / "notes.txt").exists()  # the operator's folder stays, with what else it holds


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


# --- what gunicorn.conf.py does in a worker --------------------------------------------------


def test_a_worker_that_has_loaded_the_site_freezes_what_it_loaded(folder: Path) -> None:
    # gunicorn.conf.py's post_worker_init: what a worker loaded is out of the garbage
    # collector's reach, so that no full collection pauses the worker to look at it again.
    script = (
        "import gc, runpy\n"
        "conf = runpy.run_path('gunicorn.conf.py')\n"
        "import receiptsite.wsgi\n"  # what the worker loads before the hook
        "before = gc.get_freeze_count()\n"
        "conf['post_worker_init'](None)\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    done = subprocess.run(
        [str(PYTHON), "-c", script], cwd=REPO, env=environment(folder),
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    before, frozen, left = (int(n) for n in done.stdout.split())
    assert frozen > 50_000 > 100 * before, (before, frozen)  # Django and the site
    assert left < frozen / 10, (left, frozen)

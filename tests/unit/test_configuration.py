"""Configuration is read and checked once, at start: a variable the site cannot use stops
`manage.py` and gunicorn with one line that names it, never a traceback and never a 500 later.

Real processes: `manage.py check` and gunicorn with the repository's gunicorn.conf.py, each
with an environment of its own (the suite's variables removed, see tests/livesite.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from receiptsite.config import ConfigurationError, log_level, rate_limits, redis_url
from receiptsite.integrity.keys import generate_private_key_pem
from tests.livesite import PYTHON, REPO, SITE_VARIABLES

pytestmark = pytest.mark.unit

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
    ("REDIS_URL", "localhost:6379", "must be redis://host:port/db"),
    ("REDIS_URL", "redis://cache:port/0", "could not be cast to integer"),
    ("REDIS_URL", "redis://:s3cret@cache:6379/zero", "'redis://:***@cache:6379/zero'"),
    ("LOG_LEVEL", "loud", "must be one of debug, info"),
    ("SIGNING_KEY_FILE", "{folder}/missing.pem", "does not exist"),
    ("SIGNING_KEY_FILE", "{folder}", "cannot be read"),  # a directory
    ("SIGNING_KEY_FILE", "{folder}/ec-key.pem", "not an Ed25519 private key"),
    ("SIGNING_KEY_FILE", "{folder}/garbage.pem", "not an Ed25519 private key"),
    ("SIGNING_KEY_FILE", "", "must be set when DEBUG is off"),
    ("DATABASE_URL", "mysql://user@db.internal/receipts", "not mysql:"),
    ("DATABASE_URL", "receipts.sqlite3", "must be sqlite:///"),
    ("DATABASE_TIMEOUT", "soon", "whole number"),
    ("DATABASE_TIMEOUT", "0", "at least 1"),
    ("DEBUG", "maybe", "true or false"),
    ("SITE_URL", "ftp://receipts.example.org", "absolute http(s) URL"),
    ("TEXT_LIMIT", "lots", "whole number"),
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


def test_rate_limits_are_parsed_into_numbers() -> None:
    defaults = {"ingest": (200.0, 50.0), "read": (30.0, 5.0)}
    assert rate_limits("off") is None and rate_limits(" OFF ") is None
    assert rate_limits("on") == rate_limits("") == defaults
    assert rate_limits("ingest=10/0.5") == {"ingest": (10.0, 0.5), "read": (30.0, 5.0)}
    assert rate_limits("read=2/1, ingest=3/4") == {"ingest": (3.0, 4.0), "read": (2.0, 1.0)}
    for bad in ["ingest", "ingest=", "ingest=1", "ingest=1/", "ingest=/1", "ingest=-1/1",
                "ingest=1/inf", "ingest=nan/1", "write=1/1", "ingest=1/1,", "on,off"]:
        with pytest.raises(ConfigurationError, match="^RATE_LIMITS "):
            rate_limits(bad)


def test_redis_url_is_checked_as_redis_py_reads_it() -> None:
    assert redis_url("") is None and redis_url("  ") is None
    for good in ["redis://127.0.0.1:6379/0", "redis://cache", "rediss://:pw@cache:6380/2",
                 "unix:///run/redis/redis.sock", "unix:///run/redis.sock?db=1"]:
        assert redis_url(f" {good} ") == good
    for bad in ["localhost:6379", "http://cache:6379", "redis://", "unix://", "redis://c:x/0",
                "redis://cache/zero", "unix:///s.sock?db=one", "redis://c/0?socket_timeout=no"]:
        with pytest.raises(ConfigurationError, match="^REDIS_URL "):
            redis_url(bad)
    with pytest.raises(ConfigurationError) as caught:
        redis_url("redis://user:s3cret@cache:nope/0")
    assert "s3cret" not in str(caught.value) and "user:***@cache:nope" in str(caught.value)


def test_log_levels_are_read_in_any_case() -> None:
    assert [log_level(x) for x in ["info", "INFO", " Debug ", "", "warning", "critical"]] == [
        "INFO", "INFO", "DEBUG", "INFO", "WARNING", "CRITICAL"
    ]
    for bad in ["verbose", "20", "warn", "notset"]:
        with pytest.raises(ConfigurationError, match="^LOG_LEVEL "):
            log_level(bad)

"""The parsers of configuration values, as settings.py calls them once at start (the site's
real processes stopping on a bad value are in tests/live/test_configuration.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from receiptsite.config import (
    ConfigurationError,
    log_level,
    rate_limits,
    redis_url,
    witness_policy,
)
from receiptsite.integrity import cosignature

pytestmark = pytest.mark.unit

def test_rate_limits_are_parsed_into_numbers() -> None:
    defaults = {"ingest": (200.0, 50.0), "read": (30.0, 5.0), "auth": (20.0, 0.1)}
    assert rate_limits("off") is None and rate_limits(" OFF ") is None
    assert rate_limits("on") == rate_limits("") == defaults
    assert rate_limits("ingest=10/0.5") == {**defaults, "ingest": (10.0, 0.5)}
    assert rate_limits("read=2/1, ingest=3/4") == {**defaults, "ingest": (3.0, 4.0),
                                                   "read": (2.0, 1.0)}
    assert rate_limits("auth=5/0.01") == {**defaults, "auth": (5.0, 0.01)}
    for bad in ["ingest", "ingest=", "ingest=1", "ingest=1/", "ingest=/1", "ingest=-1/1",
                "ingest=1/inf", "ingest=nan/1", "write=1/1", "ingest=1/1,", "on,off",
                "auth", "auth=5", "auth=0/1", "auth=5/0", "auth=-5/1", "auths=5/1"]:
        with pytest.raises(ConfigurationError, match="^RATE_LIMITS "):
            rate_limits(bad)
    # The usage names every scope there is.
    with pytest.raises(ConfigurationError, match="ingest=.*,read=.*,auth=BURST/PER_SECOND"):
        rate_limits("sometimes")


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


def test_a_witness_policy_is_read_once_and_held_to_the_sites_needs(tmp_path: Path) -> None:
    w1 = cosignature.witness_vkey("w1.test.example/w", bytes(range(32)))
    w2 = cosignature.witness_vkey("w2.test.example/w", bytes(range(1, 33)))
    good = tmp_path / "policy.txt"
    good.write_text(
        f"# two witnesses, both needed\nwitness a {w1} http://127.0.0.1:9/a\n"
        f"witness b {w2} https://witness.example/b/\ngroup both all a b\nquorum both\n"
    )
    read = witness_policy(str(good))
    assert read is not None and read.satisfied({"a", "b"}) and not read.satisfied({"a"})
    assert witness_policy("") is None
    bad = {
        "quorum none\n": "whose quorum is 'none'",
        f"witness a {w1}\nquorum a\n": "witness 'a' needs its submission URL",
        f"witness a {w1} ftp://w/\nquorum a\n": "witness 'a' needs its submission URL",
        f"witness a {w1} http://w/?x=1\nquorum a\n": "witness 'a' needs its submission URL",
        f"witness a {w1} http://w\nquorum b\n": "line 2: 'b' is not defined",
    }
    for text, words in bad.items():
        good.write_text(text)
        with pytest.raises(ConfigurationError, match="^WITNESS_POLICY_FILE ") as caught:
            witness_policy(str(good))
        assert words in str(caught.value)
    with pytest.raises(ConfigurationError, match="does not exist"):
        witness_policy(str(tmp_path / "missing.txt"))

"""Reading the environment, once, at start: the typed values settings.py is made of.

A value that cannot be used raises ConfigurationError, which names the variable and what is
wrong with it. manage.py, wsgi.py and gunicorn.conf.py print it as one line,
`receiptsite: <VARIABLE> ...`, and stop: a bad value never starts the site, so it can never
become a 500 later. No Django import beyond the exception class: gunicorn.conf.py uses this
before Django is set up.
"""

from __future__ import annotations

import ipaddress
import math
import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.exceptions import ImproperlyConfigured

from receiptsite.integrity import policy
from receiptsite.integrity.keys import load_private_key_pem
from receiptsite.integrity.policy import Policy


class ConfigurationError(ImproperlyConfigured):
    """A variable of the environment that the site cannot start with."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable} {problem}")
        self.variable = variable


def stop_line(error: Exception) -> str:
    """The one line manage.py, wsgi.py and gunicorn.conf.py print before they stop."""
    return "receiptsite: " + " ".join(str(error).split())


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, "").strip() or default


def envbool(name: str, default: bool) -> bool:
    value = env(name).lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(name, f"must be true or false, not {value!r}")


def envint(name: str, default: int, minimum: int = 1) -> int:
    value = env(name)
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(name, f"must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ConfigurationError(name, f"must be at least {minimum}, not {number}")
    return number


def envlist(name: str, default: list[str]) -> list[str]:
    items = [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]
    return items or default


# --- RATE_LIMITS ---------------------------------------------------------------------------

# scope -> (burst, tokens per second). Ingest counts receipts per API key; read counts
# requests (per key for the tenant's list, per client address for pages and verification);
# auth counts failed authentications on tenant routes (401s), per client address: a burst of
# 20, then 6 a minute.
RateLimits = dict[str, tuple[float, float]]
DEFAULT_RATE_LIMITS: RateLimits = {
    "ingest": (200.0, 50.0), "read": (30.0, 5.0), "auth": (20.0, 0.1)
}


def rate_limits(text: str) -> RateLimits | None:
    """`off` (None), `on` (the defaults), or `SCOPE=BURST/PER_SECOND,...` for the scopes of
    DEFAULT_RATE_LIMITS, each optional (an absent one keeps its default)."""
    value = text.strip().lower()
    if value == "off":
        return None
    limits = dict(DEFAULT_RATE_LIMITS)
    if value in ("", "on"):
        return limits
    usage = "must be off, on, or " + ",".join(f"{name}=BURST/PER_SECOND"
                                              for name in DEFAULT_RATE_LIMITS)
    for part in value.split(","):
        name, equals, spec = (piece.strip() for piece in part.partition("="))
        if name not in DEFAULT_RATE_LIMITS or not equals:
            raise ConfigurationError("RATE_LIMITS", f"{usage}, not {text.strip()!r}")
        burst_text, slash, rate_text = spec.partition("/")
        try:
            burst, rate = float(burst_text), float(rate_text)
        except ValueError:
            burst = rate = math.nan
        # A rate of 0 would make every wait infinite (and a division by zero).
        if not slash or not all(math.isfinite(x) and x > 0 for x in (burst, rate)):
            raise ConfigurationError(
                "RATE_LIMITS",
                f"needs two positive numbers for {name} (BURST/PER_SECOND), not {spec!r}",
            )
        limits[name] = (burst, rate)
    return limits


# --- TRUSTED_PROXIES, METRICS_ALLOWED_FROM -----------------------------------------------

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
TRUSTED_PROXIES_USAGE = (
    "takes IP addresses and CIDR ranges, IPv4 or IPv6, comma-separated (10.0.0.7, "
    "10.0.0.0/24, fd00::/8)"
)


def networks(variable: str, text: str, usage: str = TRUSTED_PROXIES_USAGE) -> tuple[Network, ...]:
    """Addresses and CIDR ranges, IPv4 or IPv6, comma-separated, as Python's ipaddress reads
    them (an address alone is a range of one): what `variable` names. Anything else stops the
    start with one line naming `variable`: a host name (a name is not what a connection comes
    from), a range with host bits set (`10.0.0.1/24`: 10.0.0.0/24 or 10.0.0.1/32?), `*`."""
    found: list[Network] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            found.append(ipaddress.ip_network(item))
        except ValueError as error:
            raise ConfigurationError(variable, f"{usage}, not {item!r} ({error})") from None
    return tuple(found)


def trusted_proxies(text: str) -> tuple[Network, ...]:
    """The proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (networks()). A
    proxy silently left untrusted would make every client look like the proxy: one rate limit
    and one admin lock-out for the whole site, so a bad entry stops the start."""
    return networks("TRUSTED_PROXIES", text)


# The loopback: a Prometheus (or its agent) on the same host.
METRICS_ALLOWED_FROM_DEFAULT = "127.0.0.1/32, ::1/128"


def metrics_allowed_from(text: str) -> tuple[Network, ...]:
    """The peers that may read /metrics (receiptsite/metrics): addresses and CIDR ranges as for
    TRUSTED_PROXIES (networks()); empty is the loopback, `none` is nobody."""
    value = text.strip()
    if value.lower() == "none":
        return ()
    return networks(
        "METRICS_ALLOWED_FROM",
        value or METRICS_ALLOWED_FROM_DEFAULT,
        f"{TRUSTED_PROXIES_USAGE}, or none",
    )


# --- WEB_CONCURRENCY -----------------------------------------------------------------------


def web_concurrency(text: str) -> int | None:
    """gunicorn's number of worker processes: a whole number from 1; None when empty
    (gunicorn.conf.py's default)."""
    value = text.strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ConfigurationError(
            "WEB_CONCURRENCY", f"must be a whole number of worker processes, not {value!r}"
        )
    if int(value) < 1:
        raise ConfigurationError("WEB_CONCURRENCY", f"must be at least 1, not {value}")
    return int(value)


# --- REDIS_URL -----------------------------------------------------------------------------

REDIS_SCHEMES = ("redis", "rediss", "unix")


def redis_url(text: str) -> str | None:
    """`redis://[:password@]host[:port][/db]`, `rediss://...` (TLS) or `unix:///path/to.sock`
    (`?db=N`), checked as redis-py will read it; None when empty (the database is used)."""
    url = text.strip()
    if not url:
        return None
    usage = "must be redis://host:port/db, rediss://... or unix:///path/to.sock"
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - reading it checks it
        from redis.connection import parse_url

        parse_url(url)
    except (ValueError, TypeError) as error:
        raise ConfigurationError(
            "REDIS_URL", f"{usage}, not {_redacted(url)!r} ({error})"
        ) from None
    if parts.scheme not in REDIS_SCHEMES or not (parts.hostname or parts.path):
        raise ConfigurationError("REDIS_URL", f"{usage}, not {_redacted(url)!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigurationError("REDIS_URL", f"{usage}, not {_redacted(url)!r} (no host)")
    if parts.scheme != "unix" and not parts.path.strip("/").isdigit() and parts.path.strip("/"):
        # redis-py would quietly use database 0 instead.
        raise ConfigurationError(
            "REDIS_URL", f"{usage}, not {_redacted(url)!r} (the database is a number)"
        )
    return url


def _redacted(url: str) -> str:
    # The one line goes to logs: never the password.
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:" if parts.username else ":"
    return urlunsplit(parts._replace(netloc=f"{user}***@{netloc}"))


# --- LOG_LEVEL -----------------------------------------------------------------------------

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """A level name in any case (`info` is gunicorn's spelling, `INFO` Python's): `INFO`."""
    level = text.strip().upper() or "INFO"
    if level not in LOG_LEVELS:
        raise ConfigurationError(
            "LOG_LEVEL", f"must be one of {', '.join(LOG_LEVELS).lower()}, not {text.strip()!r}"
        )
    return level


# --- AUDIT_LOG_DAYS ------------------------------------------------------------------------

# A hundred years: beyond that a cutoff would leave the calendar (and is "keep for ever").
AUDIT_LOG_MAX_DAYS = 36_500


def audit_log_days(text: str) -> int:
    """How many days API audit-log entries are kept (`pruneauditlog` removes older ones):
    a whole number from 1 to 36500; empty is the default, 400."""
    value = text.strip()
    if not value:
        return 400
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= AUDIT_LOG_MAX_DAYS:
        raise ConfigurationError(
            "AUDIT_LOG_DAYS",
            f"must be a whole number of days from 1 to {AUDIT_LOG_MAX_DAYS}, not {value!r}",
        )
    return int(value)


# --- SIGNING_KEY_FILE ----------------------------------------------------------------------


def signing_key(path: str, variable: str = "SIGNING_KEY_FILE") -> Ed25519PrivateKey:
    """The Ed25519 private key in the PKCS#8 PEM file at `path`, as `openssl genpkey
    -algorithm ed25519` writes it; a bad file is a ConfigurationError naming `variable`."""
    try:
        pem = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigurationError(
            variable, f"names {path}, which does not exist"
        ) from None
    except OSError as error:
        raise ConfigurationError(
            variable, f"names {path}, which cannot be read ({error.strerror})"
        ) from None
    try:
        return load_private_key_pem(pem)
    except ValueError as error:
        raise ConfigurationError(
            variable,
            f"names {path}, which is not an Ed25519 private key in PKCS#8 PEM ({error}; "
            "make one with `openssl genpkey -algorithm ed25519`)",
        ) from None


# --- WITNESS_POLICY_FILE -------------------------------------------------------------------


def witness_policy(path: str) -> Policy | None:
    """The witnesses the site asks to cosign its checkpoints, from a c2sp.org/tlog-policy file
    (integrity/policy.py); None when `path` is empty (nothing is witnessed). Every witness must
    have its submission URL (http or https: the site POSTs to `<url>/add-checkpoint`), and the
    quorum must need somebody: `quorum none` would call a checkpoint witnessed that nobody saw."""
    if not path:
        return None
    variable = "WITNESS_POLICY_FILE"
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigurationError(variable, f"names {path}, which does not exist") from None
    except OSError as error:
        raise ConfigurationError(
            variable, f"names {path}, which cannot be read ({error.strerror})"
        ) from None
    try:
        read = policy.parse(data)
    except policy.PolicyError as error:
        raise ConfigurationError(
            variable, f"names {path}, which is not a tlog-policy file: {error}"
        ) from None
    if read.quorum == policy.NONE:
        raise ConfigurationError(
            variable,
            f"names {path}, whose quorum is 'none': to have nothing witnessed, leave "
            f"{variable} unset",
        )
    if not read.witnesses:
        raise ConfigurationError(variable, f"names {path}, which lists no witness")
    for witness in read.witnesses.values():
        parts = urlsplit(witness.url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise ConfigurationError(
                variable,
                f"names {path}, whose witness {witness.name!r} needs its submission URL "
                f"(http or https, no query) after its key, not {witness.url or 'none'!r}",
            )
    return read

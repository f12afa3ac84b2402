"""receipt-mcp's configuration: three environment variables, read once at start. An MCP client
starts the server with the `env` of its `mcpServers` entry, so there is no config file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

URL_VARIABLE: Final = "RECEIPTSITE_URL"
KEY_VARIABLE: Final = "RECEIPTSITE_API_KEY"
OUTBOX_VARIABLE: Final = "RECEIPTSITE_OUTBOX"

# What each variable is, in the words of the one line the server prints when it is missing.
VARIABLES: Final = {
    URL_VARIABLE: "the site's base URL, e.g. https://receipts.example.org",
    KEY_VARIABLE: "the tenant's API key, rk_...",
    OUTBOX_VARIABLE: "the path of the outbox's SQLite file, created if missing",
}


class ConfigError(ValueError):
    """The configuration cannot start the server; the message is the one line to print."""


@dataclass(frozen=True)
class Config:
    site_url: str
    api_key: str
    outbox: Path


def read_config(environ: Mapping[str, str]) -> Config:
    """The configuration in `environ`; ConfigError naming the variable (each one missing, or
    the one that is wrong) otherwise. An empty variable counts as missing."""
    missing = [name for name in VARIABLES if not environ.get(name, "").strip()]
    if missing:
        what = "; ".join(f"{name} ({VARIABLES[name]})" for name in missing)
        raise ConfigError(f"set {what}")
    site_url = environ[URL_VARIABLE].strip()
    parts = urlsplit(site_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{URL_VARIABLE} must be an http(s) URL, not {site_url!r}")
    # MCP clients start servers in a folder of their choosing: "~" is the user's home, and a
    # relative path is taken from wherever that is (the README says to give an absolute one).
    outbox = Path(environ[OUTBOX_VARIABLE].strip()).expanduser()
    return Config(site_url.rstrip("/"), environ[KEY_VARIABLE].strip(), outbox)

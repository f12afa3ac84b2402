"""The embedded default's configuration, made before Django reads its settings.

`python manage.py quickstart` runs the embedded default (SQLite in var/) with no configuration
at all: it makes a secret key and an Ed25519 signing key into the ignored var/ folder the first
time, and reuses them after. Every other `manage.py` command on the embedded default (no
DATABASE_URL) finds them there too, so that `createtenant` or `createauditor` work after
quickstart with nothing exported. Anything already set in the environment wins; a missing file
is not made up (the site then stops at start, naming the variable).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def _var() -> Path:
    return Path(os.environ.get("VAR_DIR") or BASE_DIR / "var")


def prepare_environment() -> None:
    """For quickstart: make what is missing in var/, then use it."""
    var = _var()
    var.mkdir(parents=True, exist_ok=True)
    os.chmod(var, 0o700)

    secret = var / "secret-key"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(50))
        secret.chmod(0o600)

    signing_key = var / "signing-key.pem"
    if not signing_key.exists():
        from receiptsite.integrity.keys import generate_private_key_pem

        signing_key.write_bytes(generate_private_key_pem())
        signing_key.chmod(0o600)
    _use(var)


def use_embedded_default() -> None:
    """For every other manage.py command on the embedded default (no DATABASE_URL): the
    secret key and the signing key quickstart made in var/, unless the environment names
    others."""
    if not os.environ.get("DATABASE_URL"):
        _use(_var())


def _use(var: Path) -> None:
    secret = var / "secret-key"
    if not os.environ.get("SECRET_KEY") and secret.is_file():
        os.environ["SECRET_KEY"] = secret.read_text().strip()
    signing_key = var / "signing-key.pem"
    if not os.environ.get("SIGNING_KEY_FILE") and signing_key.is_file():
        os.environ["SIGNING_KEY_FILE"] = str(signing_key)

"""Configuration for `python manage.py quickstart`, made before Django reads its settings.

quickstart runs the embedded default (SQLite in var/) with no configuration at all: it makes a
secret key and an Ed25519 signing key into the ignored var/ folder the first time, and reuses
them after. Anything already set in the environment wins.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def prepare_environment() -> None:
    var = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))
    var.mkdir(parents=True, exist_ok=True)
    os.chmod(var, 0o700)

    secret = var / "secret-key"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(50))
        secret.chmod(0o600)
    os.environ.setdefault("SECRET_KEY", secret.read_text().strip())

    signing_key = var / "signing-key.pem"
    if not signing_key.exists():
        from receiptsite.integrity.keys import generate_private_key_pem

        signing_key.write_bytes(generate_private_key_pem())
        signing_key.chmod(0o600)
    os.environ.setdefault("SIGNING_KEY_FILE", str(signing_key))

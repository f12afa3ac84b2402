"""The site's Ed25519 signing key: loaded from SIGNING_KEY_FILE, its public half kept in the
database for ever.

Pointing SIGNING_KEY_FILE at a new key rotates: the first time a process sees the new file it
records the new public key as active and marks every other active key retired (still
published, so what they signed keeps verifying).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from receiptsite.integrity import keys
from receiptsite.receipts.models import SigningKey


@dataclass(frozen=True)
class ActiveKey:
    private: Ed25519PrivateKey
    public: bytes
    kid: str
    row: SigningKey


# (path, mtime) -> key. Checked with one stat() per use, so a rotated file is seen at once.
_cache: dict[str, tuple[tuple[str, int], ActiveKey]] = {}


def forget() -> None:
    """Drop the cached key (tests that roll back the database call this)."""
    _cache.clear()


def active_key() -> ActiveKey:
    path = settings.SIGNING_KEY_FILE
    if not path:
        raise ImproperlyConfigured("SIGNING_KEY_FILE is not set")
    try:
        stamp = (path, os.stat(path).st_mtime_ns)
    except OSError as error:
        raise ImproperlyConfigured(f"SIGNING_KEY_FILE cannot be read: {error.strerror}") from None
    cached = _cache.get("active")
    if cached and cached[0] == stamp:
        return cached[1]
    with open(path, "rb") as handle:
        private = keys.load_private_key_pem(handle.read())
    public = keys.public_raw(private)
    kid = keys.jwk_thumbprint(public)
    active = ActiveKey(private=private, public=public, kid=kid, row=_activate(kid, public))
    _cache["active"] = (stamp, active)
    return active


def _activate(kid: str, public: bytes) -> SigningKey:
    with transaction.atomic():
        row, _ = SigningKey.objects.get_or_create(kid=kid, defaults={"public_key": public})
        if row.status == SigningKey.COMPROMISED:
            raise ImproperlyConfigured(
                f"the key in SIGNING_KEY_FILE ({kid}) is marked compromised; "
                "point SIGNING_KEY_FILE at a new key"
            )
        now = timezone.now()
        SigningKey.objects.filter(status=SigningKey.ACTIVE).exclude(pk=row.pk).update(
            status=SigningKey.RETIRED, retired_at=now
        )
        if row.status != SigningKey.ACTIVE:
            row.status, row.retired_at = SigningKey.ACTIVE, None
            row.save(update_fields=["status", "retired_at"])
    return row


def sign(data: bytes) -> tuple[bytes, SigningKey]:
    key = active_key()
    return keys.sign(key.private, data), key.row

"""Base64 as receipts and keys carry it: padded standard base64 (signatures, hashes, canonical
bytes, signed notes) and unpadded base64url (RFC 4648 §5: JWK `x`, `kid`), read strictly."""

from __future__ import annotations

import base64
import binascii
import re

_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def b64decode(text: object) -> bytes:
    """Padded standard base64, strictly (no stray characters)."""
    if not isinstance(text, str):
        raise ValueError("not a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"not valid base64 ({error})") from None


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: object) -> bytes:
    """Unpadded base64url (RFC 4648 §5), as JWK uses it."""
    if not isinstance(text, str) or not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not valid unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

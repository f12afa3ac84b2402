"""Base64 flavours used by the receipt contract.

Standard padded base64 carries signatures, hashes and canonical bytes in JSON and notes;
unpadded URL-safe base64 is what JWK (RFC 7517/8037) requires for `x` and `kid`.
"""

from __future__ import annotations

import base64
import binascii
import re

_URL_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(s: str) -> bytes:
    # validate=True: the default silently drops non-alphabet characters, which would let two
    # different strings stand for one value.
    try:
        return base64.b64decode(s, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not valid base64: {exc}") from None


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(s: str) -> bytes:
    # urlsafe_b64decode neither validates the alphabet nor accepts missing padding, so check
    # the alphabet ourselves and restore the padding. Correct padding is tolerated too.
    body = s.rstrip("=")
    padded = body != s
    if (
        not _URL_ALPHABET.fullmatch(body)
        or len(body) % 4 == 1
        or (padded and (len(s) % 4 or len(s) - len(body) > 2))
    ):
        raise ValueError("not valid base64url")
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))

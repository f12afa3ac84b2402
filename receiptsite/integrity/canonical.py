"""RFC 8785 (JSON Canonicalization Scheme): the one byte form that is hashed and signed."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import rfc8785


def canonical_bytes(doc: object) -> bytes:
    # rfc8785 types its input narrowly; callers hand us plain JSON-shaped Python values.
    return rfc8785.dumps(cast(Any, doc))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of duplicate keys; a document whose meaning depends on the
    # parser is not canonical whatever its bytes look like.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate object key")
    return obj


def _no_constant(name: str) -> object:
    # NaN and Infinity are Python extensions, not JSON.
    raise ValueError(f"{name} is not JSON")


def is_canonical(data: bytes) -> bool:
    """True if `data` is UTF-8 JSON that RFC 8785 re-serialises to exactly these bytes."""
    if not isinstance(data, bytes | bytearray | memoryview):
        return False
    raw = bytes(data)  # database drivers may hand back memoryview
    try:
        # Decode explicitly: json.loads(bytes) would also accept UTF-16 and UTF-32.
        text = raw.decode("utf-8")
        parsed = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
        # rfc8785 raises ValueError subclasses for lone surrogates, unsafe integers and
        # non-finite floats (e.g. 1e999); deep nesting raises RecursionError in either step.
        return canonical_bytes(parsed) == raw
    except (ValueError, RecursionError):
        return False

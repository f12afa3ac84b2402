"""RFC 8785 (JSON Canonicalization Scheme): the one byte form that is hashed and signed."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import rfc8785

# Integers RFC 8785 writes as plain digits (beyond, it refuses them: I-JSON's safe range).
_SAFE = 2**53 - 1
_BMP_END = "\U00010000"


def _same_as_rfc8785(doc: object) -> bool:
    """True if the standard library's JSON encoder, with sorted keys, no whitespace and no
    ASCII escaping, writes `doc` byte for byte as RFC 8785 does. It does when the value holds
    only text, integers in the safe range, booleans, null, lists and objects with text keys,
    and no key has a character beyond the Basic Multilingual Plane (RFC 8785 sorts keys by
    UTF-16 code units, Python by code points: the two orders differ only there). Both then
    escape exactly `"`, `\\` and U+0000..U+001F (as \\b \\t \\n \\f \\r or \\u00xx),
    and write every other character as itself. A float, or anything else, takes rfc8785."""
    stack = [doc]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is str or kind is bool or value is None:
            continue
        if kind is int:
            if -_SAFE <= value <= _SAFE:  # type: ignore[operator]
                continue
            return False
        if kind is dict:
            for key in value:  # type: ignore[attr-defined]
                if type(key) is not str or not (key.isascii() or max(key) < _BMP_END):
                    return False
            stack.extend(value.values())  # type: ignore[attr-defined]
        elif kind is list:
            stack.extend(value)  # type: ignore[arg-type]
        else:
            return False
    return True


def canonical_bytes(doc: object) -> bytes:
    """The RFC 8785 bytes of a JSON-shaped Python value. The rfc8785 library is the reference;
    for the values receipts are made of (no floats), the C JSON encoder writes the same bytes
    about ten times faster, and tests/db/test_properties.py holds the two to each other."""
    if _same_as_rfc8785(doc):
        try:
            return json.dumps(
                doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                check_circular=False,
            ).encode("utf-8")
        except (ValueError, RecursionError):
            pass  # a lone surrogate, or nesting too deep: rfc8785 says which, in its words
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

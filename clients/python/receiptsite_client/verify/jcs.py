"""RFC 8785 (JSON Canonicalization Scheme): the canonical form a receipt's bytes must be in,
and the strict JSON reading it is checked with.

A full serialiser (keys sorted by UTF-16 code units, ECMAScript number formatting, minimal
string escaping), not `json.dumps(sort_keys=True)`: receipts hold no floats today, but sorting
by code point differs from RFC 8785 for keys outside the Basic Multilingual Plane, and a
verifier should not depend on what a document may hold.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _jcs_number(value: float) -> str:
    """ECMAScript Number::toString (ECMA-262 §6.1.6.1.20), which RFC 8785 §3.2.2.3 uses."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError("NaN and Infinity are not JSON")
    if value == 0:
        return "0"  # -0 too
    if value < 0:
        return "-" + _jcs_number(-value)
    # repr gives the shortest digit string that round-trips, as ECMAScript requires.
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    power = (int(exponent) if exponent else 0) - len(fraction)
    stripped = digits.rstrip("0")
    power += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = power + k  # value = 0.<digits> * 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}e{sign}{abs(e)}"


def _jcs_string(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif "\ud800" <= ch <= "\udfff":
            raise ValueError("a lone surrogate is not Unicode text")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _utf16_key(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly as the sequences of UTF-16 code units do.
    return key.encode("utf-16-be")


def jcs(value: object) -> str:
    """The RFC 8785 serialisation of a JSON value (as json.loads returns it)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        # RFC 8785 numbers are IEEE 754 doubles: outside the safe range an integer does not
        # survive the round trip, and is refused rather than silently rounded.
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError("an integer outside ±(2**53 - 1)")
        return str(value)
    if isinstance(value, float):
        return _jcs_number(value)
    if isinstance(value, str):
        return _jcs_string(value)
    if isinstance(value, list):
        return "[" + ",".join(jcs(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=_utf16_key)
        return "{" + ",".join(f"{_jcs_string(k)}:{jcs(value[k])}" for k in keys) + "}"
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate object key")
    return obj


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_strict_json(data: bytes) -> Any:
    """UTF-8 JSON with no duplicate keys and no NaN/Infinity; ValueError otherwise."""
    text = data.decode("utf-8")  # explicitly: json.loads(bytes) would take UTF-16 too
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def canonical_form_problem(data: bytes) -> str | None:
    """None when `data` is in RFC 8785 form, else why not."""
    try:
        parsed = parse_strict_json(data)
    except UnicodeDecodeError:
        return "the bytes are not UTF-8"
    except (ValueError, RecursionError) as error:
        return f"the bytes are not JSON ({error})"
    try:
        again = jcs(parsed).encode("utf-8")
    except (ValueError, RecursionError) as error:
        return f"the JSON has no RFC 8785 form ({error})"
    if again != data:
        return "RFC 8785 serialises the document to different bytes"
    return None

"""Request bodies as strict UTF-8 JSON: no byte order mark, no duplicate keys, no NaN.

Two parsers must never disagree on what was sent, so whatever Python's json module would
silently accept beyond RFC 8259 is refused here (a 400, before any field is looked at).
"""

from __future__ import annotations

import json
from typing import Any, Final


class BadJSON(Exception):
    """The body is not UTF-8 JSON this site accepts (a 400, before any field is looked at)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# An integer literal this long is far outside ±(2^53−1) anyway; cap it so that Python's
# int-from-string digit limit (a ValueError at 4300 digits) and the cost of converting huge
# literals never turn a 422 into a 400 or a slow request.
_MAX_INT_DIGITS: Final = 40
_HUGE_INT: Final = 10**_MAX_INT_DIGITS


def _parse_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > _MAX_INT_DIGITS:
        return -_HUGE_INT if text.startswith("-") else _HUGE_INT
    return int(text)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of duplicate keys silently; two parsers could then disagree on
    # what was sent, so the body is refused instead.
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> object:
    # NaN, Infinity and -Infinity are Python extensions, not JSON.
    raise _NonFinite(name)


def parse_json(body: bytes) -> object:
    """Parse a request body as strict UTF-8 JSON, or raise BadJSON with a plain sentence."""
    if body.startswith(b"\xef\xbb\xbf"):
        raise BadJSON("The body starts with a byte order mark; send UTF-8 JSON without one.")
    try:
        # Decode explicitly: json.loads(bytes) would also guess UTF-16 and UTF-32.
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJSON(f"The body is not valid UTF-8 (bad byte at offset {exc.start}).") from None
    try:
        return json.loads(
            text,
            object_pairs_hook=_refuse_duplicates,
            parse_constant=_refuse_constant,
            parse_int=_parse_int,
        )
    except _DuplicateKey as exc:
        shown = json.dumps(exc.key)
        raise BadJSON(f"The key {shown} appears more than once in one object.") from None
    except _NonFinite as exc:
        raise BadJSON(f"The body uses {exc}, which is not JSON.") from None
    except json.JSONDecodeError as exc:
        raise BadJSON(
            f"The body is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except RecursionError:
        raise BadJSON("The body nests arrays or objects too deeply.") from None

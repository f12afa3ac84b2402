"""Small helpers the framework adapters share (no framework imported here)."""

from __future__ import annotations

from typing import Any, Final

from receiptsite_client.redaction import find_secrets

MAX_ID: Final = 200  # receipt/v1: identifiers and names
MAX_LIST_TEXT: Final = 500  # receipt/v1: one observed / not_observed entry, a metadata string
MAX_REMEMBERED: Final = 10_000  # entries an adapter keeps in a table (attempt numbering)


def safe_id(value: object) -> str | None:
    """An identifier the site will take: a string of 1..200 characters that does not look like
    a secret (the site refuses, and never redacts, an identifier that does)."""
    if value is None:
        return None
    text = str(value)
    if not text or len(text) > MAX_ID or find_secrets(text):
        return None
    return text


def cut(text: str, limit: int = MAX_LIST_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_text(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def trim(table: dict[Any, Any]) -> None:
    """Drop the oldest entries of a table over its bound (dicts keep insertion order)."""
    while len(table) > MAX_REMEMBERED:
        del table[next(iter(table))]

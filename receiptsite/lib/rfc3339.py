"""RFC 3339 §5.6 date-times with an offset: the producer's timestamps and the list's `since`
and `until`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

_RFC3339 = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"[Tt](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?:\.(?P<fraction>[0-9]+))?"
    r"(?P<offset>[Zz]|(?P<sign>[+-])(?P<off_hour>[0-9]{2}):(?P<off_minute>[0-9]{2}))"
)
# The same shape for JSON Schema (ECMA-262 has no (?P<name>...) groups); the ranges of the
# fields (no 30 February) are the format's business, and is_rfc3339's.
SHAPE: Final = re.sub(r"\(\?P<\w+>", "(", _RFC3339.pattern)
_DAYS_IN_MONTH: Final = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_month(year: int, month: int) -> int:
    if month == 2 and _is_leap_year(year):
        return 29
    return _DAYS_IN_MONTH[month - 1]


def _rfc3339_match(s: str) -> re.Match[str] | None:
    # fullmatch, not `$`: `$` would also accept a trailing newline.
    match = _RFC3339.fullmatch(s)
    if match is None:
        return None
    year, month, day = (int(match[name]) for name in ("year", "month", "day"))
    hour, minute, second = (int(match[name]) for name in ("hour", "minute", "second"))
    if not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month):
        return None
    # Second 60 is a leap second, which RFC 3339 allows.
    if hour > 23 or minute > 59 or second > 60:
        return None
    if match["sign"] and (int(match["off_hour"]) > 23 or int(match["off_minute"]) > 59):
        return None
    return match


def is_rfc3339(s: str) -> bool:
    """True for an RFC 3339 §5.6 date-time with an offset, with every field in range."""
    return isinstance(s, str) and _rfc3339_match(s) is not None


def parse_rfc3339(s: str) -> datetime:
    """An aware datetime for an RFC 3339 date-time; ValueError for anything else.

    Fractions beyond microseconds are cut (not rounded, which could carry into the next
    second); a leap second :60 becomes the first instant of the next minute, which Python's
    datetime can hold.
    """
    match = _rfc3339_match(s) if isinstance(s, str) else None
    if match is None:
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    tz = UTC
    if match["sign"]:
        offset = timedelta(hours=int(match["off_hour"]), minutes=int(match["off_minute"]))
        tz = timezone(-offset if match["sign"] == "-" else offset)
    second = int(match["second"])
    microsecond = int((match["fraction"] or "0")[:6].ljust(6, "0"))
    # datetime cannot hold year 0 (RFC 3339 can): that raises ValueError, as promised.
    value = datetime(
        int(match["year"]),
        int(match["month"]),
        int(match["day"]),
        int(match["hour"]),
        int(match["minute"]),
        min(second, 59),
        microsecond,
        tzinfo=tz,
    )
    if second == 60:
        try:
            value += timedelta(seconds=1)
        except OverflowError:
            raise ValueError(f"out of range: {s!r}") from None
    return value

"""What a producer sends, checked and normalised, and the evidence document built from it.

Nothing here touches the database or Django settings: limits arrive as parameters, so the
same rules serve a single POST, a batch item and a management command alike.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

SCHEMA: Final = "receipt/v1"
MAX_SAFE_INTEGER: Final = 2**53 - 1

PHASES: Final = ("start", "end", "completion", "confirmation", "handoff")
SUBJECT_TYPES: Final = ("tool", "task", "chain", "agent_run", "model", "external")
OUTCOMES: Final = ("succeeded", "failed", "timed_out", "uncertain")
SITE_FIELDS: Final = frozenset({"schema", "id", "tenant", "recorded_at", "publisher", "redactions"})

INTEGER_MESSAGE: Final = "must be an integer (no fraction, no exponent)"
SURROGATE_MESSAGE: Final = "contains a lone surrogate"
UNKNOWN_MESSAGE: Final = "is not a field of receipt/v1"
SITE_FIELD_MESSAGE: Final = "is set by the site, not the producer"
REQUIRED_MESSAGE: Final = "is required"

_END_BOUNDARY: Final = (
    "This records what the agent runtime reported to this site. It does not show that any "
    "effect outside that report happened (an email received, a payment settled, a write "
    "accepted)."
)

BOUNDARY: Final[dict[str, str]] = {
    "start": "A start record shows that the step was invoked. It cannot show its result.",
    "end": _END_BOUNDARY,
    "completion": _END_BOUNDARY,
    "confirmation": (
        "This records the confirmation the runtime observed from the provider; it does not "
        "show anything the provider did not confirm."
    ),
    "handoff": (
        "This records what was handed over and when. It does not show that the recipient "
        "reviewed or accepted it."
    ),
}


# --------------------------------------------------------------------------------------------
# Parsing


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


# --------------------------------------------------------------------------------------------
# RFC 3339 date-times (also used by the query API for `since` and `until`)

_RFC3339 = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"[Tt](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?:\.(?P<fraction>[0-9]+))?"
    r"(?P<offset>[Zz]|(?P<sign>[+-])(?P<off_hour>[0-9]{2}):(?P<off_minute>[0-9]{2}))"
)
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


# --------------------------------------------------------------------------------------------
# Validation


class DocumentInvalid(Exception):
    """The document breaks receipt/v1 (a 422); `errors` names every offending field."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__(f"{len(errors)} field(s) are not valid")
        self.errors = errors


@dataclass(frozen=True)
class LinkRefs:
    parent_receipt_id: str | None
    parent_idempotency_key: str | None
    child_receipt_ids: tuple[str, ...]
    child_idempotency_keys: tuple[str, ...]


@dataclass
class Draft:
    producer: dict[str, Any]  # normalised producer fields, WITHOUT "links"
    links: LinkRefs | None  # None when no `links` was sent


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(s: str) -> bool:
    return _LONE_SURROGATE.search(s) is not None


def join_pointer(parent: str, token: str | int) -> str:
    """Extend an RFC 6901 JSON Pointer by one reference token."""
    # A lone surrogate cannot be written as UTF-8, so an error naming such a key would crash
    # whoever serialises it; the pointer shows U+FFFD in its place instead.
    text = _LONE_SURROGATE.sub("\ufffd", token) if isinstance(token, str) else str(token)
    return f"{parent}/{text.replace('~', '~0').replace('/', '~1')}"


class _Errors:
    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def add(self, pointer: str, message: str) -> None:
        self.items.append({"field": pointer, "message": message})


class _Invalid:
    """Marks a value that failed its check (the error is already recorded)."""


_INVALID: Final = _Invalid()

Check = Callable[[object, str, _Errors], Any]


@dataclass(frozen=True)
class _Field:
    name: str
    check: Check
    required: bool = False
    default: Callable[[], Any] | None = None


def _is_integer(value: object) -> bool:
    # bool is an int subclass in Python, but `true` is not a JSON integer.
    return isinstance(value, int) and not isinstance(value, bool)


def _clean_string(value: object, at: str, errors: _Errors) -> str | None:
    if not isinstance(value, str):
        errors.add(at, "must be a string")
        return None
    if has_lone_surrogate(value):
        errors.add(at, SURROGATE_MESSAGE)
        return None
    return value


def _length_message(min_len: int, max_len: int) -> str:
    if min_len == 0:
        return f"must be at most {max_len} characters long"
    return f"must be {min_len} to {max_len} characters long"


def _string(min_len: int, max_len: int) -> Check:
    def check(value: object, at: str, errors: _Errors) -> Any:
        text = _clean_string(value, at, errors)
        if text is None:
            return _INVALID
        # len() of a Python str counts code points, as the contract does.
        if not min_len <= len(text) <= max_len:
            errors.add(at, _length_message(min_len, max_len))
            return _INVALID
        return text

    return check


def _integer(minimum: int, maximum: int = MAX_SAFE_INTEGER) -> Check:
    def check(value: object, at: str, errors: _Errors) -> Any:
        if not _is_integer(value):
            errors.add(at, INTEGER_MESSAGE)
            return _INVALID
        assert isinstance(value, int)
        if not minimum <= value <= maximum:
            errors.add(at, f"must be between {minimum} and {maximum}")
            return _INVALID
        return value

    return check


def _enum(choices: tuple[str, ...]) -> Check:
    message = "must be one of " + ", ".join(choices)

    def check(value: object, at: str, errors: _Errors) -> Any:
        if isinstance(value, str) and has_lone_surrogate(value):
            errors.add(at, SURROGATE_MESSAGE)
            return _INVALID
        if value not in choices:
            errors.add(at, message)
            return _INVALID
        return value

    return check


def _refused(message: str) -> Check:
    def check(value: object, at: str, errors: _Errors) -> Any:
        errors.add(at, message)
        return _INVALID

    return check


def _timestamp(value: object, at: str, errors: _Errors) -> Any:
    text = _clean_string(value, at, errors)
    if text is None:
        return _INVALID
    if not is_rfc3339(text):
        errors.add(at, "must be an RFC 3339 date-time with an offset, like 2026-11-30T14:31:07Z")
        return _INVALID
    return text  # kept exactly as sent


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _receipt_id(value: object, at: str, errors: _Errors) -> Any:
    text = _clean_string(value, at, errors)
    if text is None:
        return _INVALID
    if not _UUID.fullmatch(text):
        errors.add(at, "must be a receipt id: a hyphenated UUID")
        return _INVALID
    return text.lower()


_KEY_CHARS = re.compile(r"[\x21-\x7e]*")
_KEY_LENGTH: Final = _string(1, 200)


def _idempotency_key(value: object, at: str, errors: _Errors) -> Any:
    text = _KEY_LENGTH(value, at, errors)
    if text is _INVALID:
        return _INVALID
    if not _KEY_CHARS.fullmatch(text):
        errors.add(at, "must use only visible ASCII characters (U+0021 to U+007E, no spaces)")
        return _INVALID
    return text


def _list(item: Check, max_items: int, noun: str, *, unique: bool = False) -> Check:
    def check(value: object, at: str, errors: _Errors) -> Any:
        if not isinstance(value, list):
            errors.add(at, f"must be a list of {noun}")
            return _INVALID
        before = len(errors.items)
        if len(value) > max_items:
            errors.add(at, f"must have at most {max_items} entries")
        out: list[Any] = []
        seen: dict[Any, int] = {}
        for index, raw in enumerate(value):
            here = join_pointer(at, index)
            result = item(raw, here, errors)
            if result is _INVALID:
                continue
            if unique and result in seen:
                errors.add(here, f"repeats the entry at {join_pointer(at, seen[result])}")
                continue
            seen.setdefault(result, index)
            out.append(result)
        return out if len(errors.items) == before else _INVALID

    return check


def _unexpected_key(key: str, at: str, errors: _Errors, site_fields: frozenset[str]) -> None:
    here = join_pointer(at, key)
    if has_lone_surrogate(key):
        errors.add(here, SURROGATE_MESSAGE)
    elif key in site_fields:
        errors.add(here, SITE_FIELD_MESSAGE)
    else:
        errors.add(here, UNKNOWN_MESSAGE)


def _check_fields(
    obj: dict[str, Any],
    at: str,
    fields: tuple[_Field, ...],
    errors: _Errors,
    site_fields: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    # Known fields first, in the contract's table order, then unexpected keys as sent: the
    # error list then reads like the table, whatever order the producer used.
    out: dict[str, Any] = {}
    for field in fields:
        here = join_pointer(at, field.name)
        raw = obj.get(field.name)
        if raw is None:  # null means absent
            if field.default is not None:
                out[field.name] = field.default()
            elif field.required:
                errors.add(here, REQUIRED_MESSAGE)
            continue
        value = field.check(raw, here, errors)
        if value is not _INVALID:
            out[field.name] = value
    known = {field.name for field in fields}
    for key in obj:
        if key not in known:
            _unexpected_key(key, at, errors, site_fields)
    return out


def _object(*fields: _Field) -> Check:
    def check(value: object, at: str, errors: _Errors) -> Any:
        if not isinstance(value, dict):
            errors.add(at, "must be a JSON object")
            return _INVALID
        before = len(errors.items)
        out = _check_fields(value, at, fields, errors)
        return out if len(errors.items) == before else _INVALID

    return check


_METADATA_KEY = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_METADATA_MAX_KEYS: Final = 20


_METADATA_INTEGER: Final = _integer(-MAX_SAFE_INTEGER)
_METADATA_STRING: Final = _string(0, 500)


def _metadata_value(value: object, at: str, errors: _Errors) -> Any:
    if value is None or isinstance(value, bool):
        return value  # null is kept here, and only here
    if _is_integer(value):
        return _METADATA_INTEGER(value, at, errors)
    if isinstance(value, str):
        return _METADATA_STRING(value, at, errors)
    errors.add(at, "must be a string, an integer (no fraction, no exponent), a boolean or null")
    return _INVALID


def _metadata(value: object, at: str, errors: _Errors) -> Any:
    if not isinstance(value, dict):
        errors.add(at, "must be a JSON object")
        return _INVALID
    before = len(errors.items)
    if len(value) > _METADATA_MAX_KEYS:
        errors.add(at, f"must have at most {_METADATA_MAX_KEYS} keys")
    out: dict[str, Any] = {}
    for key, raw in value.items():
        here = join_pointer(at, key)
        if has_lone_surrogate(key):
            errors.add(here, SURROGATE_MESSAGE)
        elif not _METADATA_KEY.fullmatch(key):
            errors.add(
                here,
                "is not an allowed metadata key (a lowercase letter, then up to 63 of "
                "a-z, 0-9, '_', '.' and '-')",
            )
        else:
            result = _metadata_value(raw, here, errors)
            if result is not _INVALID:
                out[key] = result
    return out if len(errors.items) == before else _INVALID


_MAX_CHILDREN: Final = 100

_LINK_FIELDS: Final = (
    _Field("parent_receipt_id", _receipt_id),
    _Field(
        "child_receipt_ids",
        _list(_receipt_id, _MAX_CHILDREN, "receipt ids", unique=True),
    ),
    _Field("parent_idempotency_key", _idempotency_key),
    _Field(
        "child_idempotency_keys",
        _list(_idempotency_key, _MAX_CHILDREN, "idempotency keys", unique=True),
    ),
)


def _links(value: object, at: str, errors: _Errors) -> Any:
    result = _object(*_LINK_FIELDS)(value, at, errors)
    if result is _INVALID:
        return _INVALID
    # Checks across fields point at the links object itself, after its own fields.
    valid = True
    if "parent_receipt_id" in result and "parent_idempotency_key" in result:
        errors.add(
            at,
            "names the parent twice: send parent_receipt_id or parent_idempotency_key, not both",
        )
        valid = False
    children = len(result.get("child_receipt_ids", ())) + len(
        result.get("child_idempotency_keys", ())
    )
    if children > _MAX_CHILDREN:
        errors.add(at, f"must name at most {_MAX_CHILDREN} child receipts in all")
        valid = False
    return result if valid else _INVALID


def _short_text(max_len: int) -> Check:
    return _string(0, max_len)


_ATTEMPT_FIELDS: Final = (
    _Field("number", _integer(1), default=lambda: 1),
    _Field("prior_attempt_id", _short_text(200)),
    _Field("retry_reason", _short_text(500)),
)
_SUBJECT_FIELDS: Final = (
    _Field("type", _enum(SUBJECT_TYPES), required=True),
    _Field("name", _string(1, 200), required=True),
    _Field("version", _short_text(100)),
)
_FRAMEWORK_FIELDS: Final = (
    _Field("name", _short_text(50)),
    _Field("version", _short_text(200)),
    _Field("run_id", _short_text(200)),
    _Field("parent_run_id", _short_text(200)),
    _Field("tool_call_id", _short_text(200)),
)
_FREE_TEXT_LIST: Final = _list(_short_text(500), 20, "strings")


def _unbounded_text(value: object, at: str, errors: _Errors) -> Any:
    # input_summary and result have no length limit here: redaction cuts them later, so a
    # long text is shortened rather than refused.
    text = _clean_string(value, at, errors)
    return _INVALID if text is None else text


def _outcome_field(phase: object) -> _Field:
    if phase == "start":
        return _Field("outcome", _refused("must not be sent on a start record"))
    # With a phase that is missing or wrong, whether outcome is required cannot be known;
    # the phase error says what to fix first.
    return _Field("outcome", _enum(OUTCOMES), required=phase in PHASES)


def _top_level_fields(phase: object) -> tuple[_Field, ...]:
    return (
        _Field("workflow_id", _string(1, 200), required=True),
        _Field("step_id", _short_text(200)),
        _Field("attempt", _object(*_ATTEMPT_FIELDS), default=lambda: {"number": 1}),
        _Field("phase", _enum(PHASES), required=True),
        _Field("subject", _object(*_SUBJECT_FIELDS), required=True),
        _Field("framework", _object(*_FRAMEWORK_FIELDS)),
        _Field("session_id", _short_text(200)),
        _Field("actor", _short_text(200)),
        _Field("trace_id", _short_text(200)),
        _Field("request_id", _short_text(200)),
        _outcome_field(phase),
        _Field("started_at", _timestamp),
        _Field("ended_at", _timestamp),
        _Field("duration_ms", _integer(0)),
        _Field("input_summary", _unbounded_text),
        _Field("result", _unbounded_text),
        _Field("observed", _FREE_TEXT_LIST),
        _Field("not_observed", _FREE_TEXT_LIST, default=list),
        _Field("operation_ref", _short_text(200)),
        _Field("links", _links),
        _Field("idempotency_key", _idempotency_key),
        _Field("metadata", _metadata),
    )


def _link_refs(links: dict[str, Any]) -> LinkRefs:
    return LinkRefs(
        parent_receipt_id=links.get("parent_receipt_id"),
        parent_idempotency_key=links.get("parent_idempotency_key"),
        child_receipt_ids=tuple(links.get("child_receipt_ids", ())),
        child_idempotency_keys=tuple(links.get("child_idempotency_keys", ())),
    )


def validate(payload: object) -> Draft:
    """Check a parsed body against receipt/v1 and normalise it; DocumentInvalid otherwise."""
    if not isinstance(payload, dict):
        raise DocumentInvalid([{"field": "", "message": "must be a JSON object"}])
    errors = _Errors()
    fields = _top_level_fields(payload.get("phase"))
    producer = _check_fields(payload, "", fields, errors, SITE_FIELDS)
    if errors.items:
        raise DocumentInvalid(errors.items)
    links = producer.pop("links", None)
    return Draft(producer=producer, links=None if links is None else _link_refs(links))


# --------------------------------------------------------------------------------------------
# Assembly


def producer_with_links(
    draft: Draft, parent_receipt_id: str | None, child_receipt_ids: list[str]
) -> dict[str, Any]:
    """The producer's part of the document, with links resolved to receipt ids only."""
    producer = copy.deepcopy(draft.producer)
    if draft.links is None:
        return producer
    links: dict[str, Any] = {}
    if parent_receipt_id is not None:
        links["parent_receipt_id"] = parent_receipt_id.lower()
    # An empty list names no child, so it is left out like any absent field.
    if child_receipt_ids:
        links["child_receipt_ids"] = [child.lower() for child in child_receipt_ids]
    producer["links"] = links
    return producer


def evidence_document(
    producer: dict[str, Any],
    *,
    receipt_id: str,
    tenant_slug: str,
    tenant_name: str,
    recorded_at: str,
    key_prefix: str,
    redactions: list[dict[str, Any]],
) -> dict[str, Any]:
    """The whole evidence document: the producer's fields plus the site's."""
    document = copy.deepcopy(producer)
    document["not_observed"] = [*producer.get("not_observed", ()), BOUNDARY[producer["phase"]]]
    document.update(
        {
            "schema": SCHEMA,
            "id": receipt_id,
            "tenant": {"slug": tenant_slug, "name": tenant_name},
            "recorded_at": recorded_at,
            "publisher": {"key_prefix": key_prefix},
            "redactions": copy.deepcopy(redactions),
        }
    )
    return document

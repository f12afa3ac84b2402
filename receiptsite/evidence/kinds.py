"""The kinds of value a declared JSON document is made of.

Each kind checks a parsed value (recording every error with its RFC 6901 JSON Pointer, never
stopping at the first), describes itself as JSON Schema, and says where it holds free text.
The evidence document (evidence.py) is declared with these; nothing here knows its fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from receiptsite_client import redaction

from receiptsite.lib import rfc3339

MAX_SAFE_INTEGER: Final = 2**53 - 1

INTEGER_MESSAGE: Final = "must be an integer (no fraction, no exponent)"
SURROGATE_MESSAGE: Final = "contains a lone surrogate"
NUL_MESSAGE: Final = "contains U+0000 (a NUL character), which no stored text may hold"
SECRET_MESSAGE: Final = (
    "looks like a secret (an API key, a token or a password); an identifier cannot be "
    "redacted without breaking what it correlates, so it is refused: send a reference instead"
)
UNKNOWN_MESSAGE: Final = "is not a field of receipt/v1"
SITE_FIELD_MESSAGE: Final = "is set by the site, not the producer"
REQUIRED_MESSAGE: Final = "is required"
OBJECT_MESSAGE: Final = "must be a JSON object"
METADATA_VALUE_MESSAGE: Final = (
    "must be a string, an integer (no fraction, no exponent), a boolean or null"
)


def json_copy(value: Any) -> Any:
    """A copy of a parsed JSON value whose objects and arrays are new, which the caller may
    change: copy.deepcopy's result, about 4x faster (16 against 4.4 us for a typical receipt;
    ingest makes three per receipt), since a JSON value holds no shared or cyclic parts and
    its strings and numbers are immutable."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value


def whole(pattern: str) -> str:
    """A JSON Schema `pattern` that must match the whole string. `$(?!\\n)`, not a bare `$`:
    Python's re (which jsonschema and schemathesis use) lets `$` match before a final line
    break, ECMA-262 does not; with the lookahead both read it alike."""
    return f"^(?:{pattern})$(?!\\n)"


# JSON Schema for "no U+0000": the regex escape, which ECMA-262 and Python's re both read.
NO_NUL: Final = whole("[^\\u0000]*")

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(s: str) -> bool:
    return _LONE_SURROGATE.search(s) is not None


def join_pointer(parent: str, token: str | int) -> str:
    """Extend an RFC 6901 JSON Pointer by one reference token."""
    # A lone surrogate cannot be written as UTF-8, so an error naming such a key would crash
    # whoever serialises it; the pointer shows U+FFFD in its place instead. Validation joins a
    # pointer for every member it checks, almost always a plain ASCII name: only a token that
    # could need it is searched or escaped (a surrogate is not ASCII).
    if not isinstance(token, str):
        return f"{parent}/{token}"
    if not token.isascii():
        token = _LONE_SURROGATE.sub("\ufffd", token)
    if "~" in token or "/" in token:
        token = token.replace("~", "~0").replace("/", "~1")
    return f"{parent}/{token}"


class Errors:
    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def add(self, pointer: str, message: str) -> None:
        self.items.append({"field": pointer, "message": message})


class _Invalid:
    """Marks a value that failed its check (the error is already recorded)."""


INVALID: Final = _Invalid()

# Where a free text sits: (pointer, its container, its key in the container, cut if long).
TextPlace = tuple[str, Any, "str | int", bool]


def is_integer(value: object) -> bool:
    # bool is an int subclass in Python, but `true` is not a JSON integer.
    return isinstance(value, int) and not isinstance(value, bool)


class Kind:
    """A kind of value. Subclasses check, describe and locate free text."""

    def check(self, value: object, at: str, errors: Errors) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def texts(self, value: Any, at: str, container: Any, key: str | int) -> Iterator[TextPlace]:
        """The free texts inside `value` (which sits at container[key]), for redaction."""
        return iter(())


def _clean_string(value: object, at: str, errors: Errors) -> str | None:
    if not isinstance(value, str):
        errors.add(at, "must be a string")
        return None
    if has_lone_surrogate(value):
        errors.add(at, SURROGATE_MESSAGE)
        return None
    if "\x00" in value:
        errors.add(at, NUL_MESSAGE)
        return None
    return value


def _length_message(min_len: int, max_len: int) -> str:
    if min_len == 0:
        return f"must be at most {max_len} characters long"
    return f"must be {min_len} to {max_len} characters long"


@dataclass(frozen=True)
class Text(Kind):
    """A string. Free text (`free`) is redacted, and cut to the site's limit when `cut`; any
    other string is an identifier, and one that looks like a secret is refused."""

    min_len: int = 0
    max_len: int | None = None
    free: bool = False
    cut: bool = False
    chars: str | None = None  # a regex character class every character must match
    chars_message: str = ""

    def check(self, value: object, at: str, errors: Errors) -> Any:
        text = _clean_string(value, at, errors)
        if text is None:
            return INVALID
        # len() of a Python str counts code points, as the contract does.
        if self.max_len is not None and not self.min_len <= len(text) <= self.max_len:
            errors.add(at, _length_message(self.min_len, self.max_len))
            return INVALID
        if self.chars is not None and not re.fullmatch(f"{self.chars}*", text):
            errors.add(at, self.chars_message)
            return INVALID
        if not self.free and redaction.find_secrets(text):
            errors.add(at, SECRET_MESSAGE)
            return INVALID
        return text

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.min_len:
            out["minLength"] = self.min_len
        if self.max_len is not None:
            out["maxLength"] = self.max_len
        out["pattern"] = whole(f"{self.chars}*") if self.chars else NO_NUL
        if self.cut:
            out["description"] = "Free text: secrets are redacted and a long text is cut."
        elif self.free:
            out["description"] = "Free text: secrets are redacted."
        else:
            out["description"] = "An identifier: one that looks like a secret is refused."
        return out

    def texts(self, value: Any, at: str, container: Any, key: str | int) -> Iterator[TextPlace]:
        if self.free and isinstance(value, str):
            yield at, container, key, self.cut


@dataclass(frozen=True)
class Integer(Kind):
    minimum: int
    maximum: int = MAX_SAFE_INTEGER

    def check(self, value: object, at: str, errors: Errors) -> Any:
        if not is_integer(value):
            errors.add(at, INTEGER_MESSAGE)
            return INVALID
        assert isinstance(value, int)
        if not self.minimum <= value <= self.maximum:
            errors.add(at, f"must be between {self.minimum} and {self.maximum}")
            return INVALID
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}


@dataclass(frozen=True)
class Enum(Kind):
    choices: tuple[str, ...]

    def check(self, value: object, at: str, errors: Errors) -> Any:
        if isinstance(value, str) and has_lone_surrogate(value):
            errors.add(at, SURROGATE_MESSAGE)
            return INVALID
        if value not in self.choices:
            errors.add(at, "must be one of " + ", ".join(self.choices))
            return INVALID
        return value

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.choices)}


@dataclass(frozen=True)
class Timestamp(Kind):
    """An RFC 3339 §5.6 date-time with an offset, kept exactly as sent."""

    def check(self, value: object, at: str, errors: Errors) -> Any:
        text = _clean_string(value, at, errors)
        if text is None:
            return INVALID
        if not rfc3339.is_rfc3339(text):
            errors.add(
                at, "must be an RFC 3339 date-time with an offset, like 2026-11-30T14:31:07Z"
            )
            return INVALID
        return text

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "format": "date-time", "pattern": whole(rfc3339.SHAPE)}


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@dataclass(frozen=True)
class ReceiptId(Kind):
    """A receipt id: a hyphenated UUID in any case, stored lowercased."""

    def check(self, value: object, at: str, errors: Errors) -> Any:
        text = _clean_string(value, at, errors)
        if text is None:
            return INVALID
        if not _UUID.fullmatch(text):
            errors.add(at, "must be a receipt id: a hyphenated UUID")
            return INVALID
        return text.lower()

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": whole(_UUID.pattern)}


@dataclass(frozen=True)
class ListOf(Kind):
    item: Kind
    max_items: int
    noun: str
    unique: bool = False

    def check(self, value: object, at: str, errors: Errors) -> Any:
        if not isinstance(value, list):
            errors.add(at, f"must be a list of {self.noun}")
            return INVALID
        before = len(errors.items)
        if len(value) > self.max_items:
            errors.add(at, f"must have at most {self.max_items} entries")
        out: list[Any] = []
        seen: dict[Any, int] = {}
        for index, raw in enumerate(value):
            here = join_pointer(at, index)
            result = self.item.check(raw, here, errors)
            if result is INVALID:
                continue
            if self.unique and result in seen:
                errors.add(here, f"repeats the entry at {join_pointer(at, seen[result])}")
                continue
            seen.setdefault(result, index)
            out.append(result)
        return out if len(errors.items) == before else INVALID

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "array",
            "maxItems": self.max_items,
            "items": self.item.schema(),
        }
        if self.unique:
            out["uniqueItems"] = True
        return out

    def texts(self, value: Any, at: str, container: Any, key: str | int) -> Iterator[TextPlace]:
        if isinstance(value, list):
            for index, entry in enumerate(value):
                yield from self.item.texts(entry, join_pointer(at, index), value, index)


@dataclass(frozen=True)
class Column:
    """A stored copy of a field, for lookups and filters; verification checks it agrees."""

    name: str
    max_length: int | None = None  # default: the field's own limit
    null: bool = False  # absent is NULL (else "")
    filter: bool = False  # an exact-match filter of the tenant's list (GET /api/receipts)


@dataclass(frozen=True)
class Field:
    """One member of an object: its kind, whether it is required, its default, its stored
    column, and how the reviewer's page labels it."""

    name: str
    kind: Kind
    required: bool = False
    default: Callable[[], Any] | None = None
    # (sibling, value): refused when the sibling has that value; otherwise `required` holds
    # once the sibling itself is valid.
    refused_when: tuple[str, str] | None = None
    column: Column | None = None
    label: Any = None  # a lazy translation: the page's label
    # Where the reviewer's page shows it under its label: "text" (what the record shows),
    # "workflow", "timing" (the workflow section), "technical" (technical details).
    section: str = ""
    unit: str = ""  # shown after the value on the page


@dataclass(frozen=True)
class Object(Kind):
    fields: tuple[Field, ...]
    # Site-set members: refused with their own message when a producer sends them.
    site_fields: frozenset[str] = field(default=frozenset())
    # A check across fields, after each field passed its own: returns [(pointer, message)].
    across: Callable[[dict[str, Any], str], list[tuple[str, str]]] | None = None
    across_description: str = ""
    across_schema: dict[str, Any] = field(default_factory=dict)  # what JSON Schema can say of it

    def check(self, value: object, at: str, errors: Errors) -> Any:
        if not isinstance(value, dict):
            errors.add(at, OBJECT_MESSAGE)
            return INVALID
        before = len(errors.items)
        out = self.check_fields(value, at, errors)
        if len(errors.items) != before:
            return INVALID
        if self.across is not None:
            problems = self.across(out, at)
            for pointer, message in problems:
                errors.add(pointer, message)
            if problems:
                return INVALID
        return out

    def check_fields(self, obj: dict[str, Any], at: str, errors: Errors) -> dict[str, Any]:
        # Known fields first, in the declaration's order, then unexpected keys as sent: the
        # error list then reads like the contract's table, whatever order the producer used.
        out: dict[str, Any] = {}
        for member in self.fields:
            here = join_pointer(at, member.name)
            raw = obj.get(member.name)
            required = member.required
            if member.refused_when is not None:
                sibling, refused = member.refused_when
                if obj.get(sibling) == refused:
                    if raw is not None:
                        errors.add(here, f"must not be sent on a {refused} record")
                    continue
                # With a sibling that is missing or wrong, whether this member is required
                # cannot be known; the sibling's own error says what to fix first.
                sibling_kind = self.member(sibling).kind
                sibling_valid = sibling_kind.check(obj.get(sibling), "", Errors()) is not INVALID
                required = required and sibling_valid
            if raw is None:  # null means absent
                if member.default is not None:
                    out[member.name] = member.default()
                elif required:
                    errors.add(here, REQUIRED_MESSAGE)
                continue
            result = member.kind.check(raw, here, errors)
            if result is not INVALID:
                out[member.name] = result
        known = {member.name for member in self.fields}
        for key in obj:
            if key not in known:
                here = join_pointer(at, key)
                if has_lone_surrogate(key):
                    errors.add(here, SURROGATE_MESSAGE)
                elif key in self.site_fields:
                    errors.add(here, SITE_FIELD_MESSAGE)
                else:
                    errors.add(here, UNKNOWN_MESSAGE)
        return out

    def member(self, name: str) -> Field:
        for member in self.fields:
            if member.name == name:
                return member
        raise KeyError(name)

    def schema(self) -> dict[str, Any]:
        # null means absent, so every optional member may also be null; a required one may not.
        properties: dict[str, Any] = {}
        for member in self.fields:
            described = member.kind.schema()
            if not member.required or member.refused_when is not None:
                described = {"anyOf": [described, {"type": "null"}]}
            properties[member.name] = described
        out: dict[str, Any] = {
            "type": "object",
            "additionalProperties": False,
            "properties": properties,
        }
        required = [m.name for m in self.fields if m.required and m.refused_when is None]
        if required:
            out["required"] = required
        conditions = [self._condition(m) for m in self.fields if m.refused_when is not None]
        if conditions:
            out["allOf"] = conditions
        if self.across_description:
            out["description"] = self.across_description
        out.update(self.across_schema)
        return out

    def _condition(self, member: Field) -> dict[str, Any]:
        assert member.refused_when is not None
        sibling, refused = member.refused_when
        then: dict[str, Any] = {"properties": {member.name: {"type": "null"}}}
        otherwise: dict[str, Any] = {}
        if member.required:
            otherwise = {
                "required": [member.name],
                "properties": {member.name: {"not": {"type": "null"}}},
            }
        return {
            "if": {"properties": {sibling: {"const": refused}}, "required": [sibling]},
            "then": then,
            "else": otherwise,
        }

    def texts(self, value: Any, at: str, container: Any, key: str | int) -> Iterator[TextPlace]:
        if isinstance(value, dict):
            for member in self.fields:
                if member.name in value:
                    here = join_pointer(at, member.name)
                    yield from member.kind.texts(value[member.name], here, value, member.name)


METADATA_KEY = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Metadata(Kind):
    """A flat object of allowlisted extra facts: string values are free text."""

    max_keys: int
    value_text: Text
    value_integer: Integer

    def check(self, value: object, at: str, errors: Errors) -> Any:
        if not isinstance(value, dict):
            errors.add(at, OBJECT_MESSAGE)
            return INVALID
        before = len(errors.items)
        if len(value) > self.max_keys:
            errors.add(at, f"must have at most {self.max_keys} keys")
        out: dict[str, Any] = {}
        for key, raw in value.items():
            here = join_pointer(at, key)
            if has_lone_surrogate(key):
                errors.add(here, SURROGATE_MESSAGE)
            elif not METADATA_KEY.fullmatch(key):
                errors.add(
                    here,
                    "is not an allowed metadata key (a lowercase letter, then up to 63 of "
                    "a-z, 0-9, '_', '.' and '-')",
                )
            else:
                result = self._value(raw, here, errors)
                if result is not INVALID:
                    out[key] = result
        return out if len(errors.items) == before else INVALID

    def _value(self, value: object, at: str, errors: Errors) -> Any:
        if value is None or isinstance(value, bool):
            return value  # null is kept here, and only here
        if is_integer(value):
            return self.value_integer.check(value, at, errors)
        if isinstance(value, str):
            return self.value_text.check(value, at, errors)
        errors.add(at, METADATA_VALUE_MESSAGE)
        return INVALID

    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "maxProperties": self.max_keys,
            "propertyNames": {"pattern": whole(METADATA_KEY.pattern)},
            "additionalProperties": {
                "anyOf": [
                    self.value_text.schema(),
                    self.value_integer.schema(),
                    {"type": "boolean"},
                    {"type": "null"},
                ]
            },
        }

    def texts(self, value: Any, at: str, container: Any, key: str | int) -> Iterator[TextPlace]:
        if isinstance(value, dict):
            # Key order, as in the canonical document, so that the report does not depend on
            # the order in which the producer happened to send its metadata.
            for name in sorted(value):
                yield from self.value_text.texts(value[name], join_pointer(at, name), value, name)

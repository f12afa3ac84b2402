"""The reference of receipt/v1's fields, written from the declaration (evidence.DOCUMENT).

docs/receipt-format.md holds a table of every field between two marker comments; this module
writes that table, and `python -m receiptsite.evidence.docgen` rewrites the block in place.
tests/unit/test_docs.py fails when the block and the declaration disagree, so the reference cannot
drift from what the site enforces.

The page labels are lazy translations: rendering the table needs Django settings (the
entry point configures a minimal set when none are given) and is done in English.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Final

from receiptsite.evidence import declaration as evidence
from receiptsite.evidence.kinds import (
    MAX_SAFE_INTEGER,
    METADATA_KEY,
    Enum,
    Field,
    Integer,
    Kind,
    ListOf,
    Metadata,
    Object,
    ReceiptId,
    Text,
    Timestamp,
)
from receiptsite.evidence.redaction import DEFAULT_LIMIT

START: Final = "<!-- generated from evidence.py: start -->"
END: Final = "<!-- generated from evidence.py: end -->"
DOC_PATH: Final = Path(__file__).resolve().parents[2] / "docs" / "receipt-format.md"
COMMAND: Final = "python -m receiptsite.evidence.docgen"

HEADER: Final = (
    "| field | type and limits | required | text | stored column | null or absent "
    "| page label |"
)
NONE: Final = "—"


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _code(text: str) -> str:
    return f"`{text}`"


def _bound(value: int) -> str:
    if value == MAX_SAFE_INTEGER:
        return "2^53−1"
    if value == -MAX_SAFE_INTEGER:
        return "−(2^53−1)"
    return str(value)


def describe(kind: Kind) -> str:
    """A kind, its limits included, in words."""
    if isinstance(kind, Text):
        if kind.max_len is None:
            out = "string of any length"
            if kind.cut:
                out += f" (cut to `TEXT_LIMIT` code points, {DEFAULT_LIMIT} by default)"
        elif kind.min_len:
            out = f"string of {kind.min_len} to {kind.max_len} characters"
        else:
            out = f"string of at most {kind.max_len} characters"
        if kind.chars is not None:
            out += ", " + kind.chars_message.removeprefix("must use ")
        return out
    if isinstance(kind, Integer):
        return f"integer from {_bound(kind.minimum)} to {_bound(kind.maximum)}"
    if isinstance(kind, Enum):
        return "one of " + ", ".join(_code(choice) for choice in kind.choices)
    if isinstance(kind, Timestamp):
        return "RFC 3339 date-time with an offset, kept exactly as sent"
    if isinstance(kind, ReceiptId):
        return "receipt id: a hyphenated UUID in any case, stored lowercase"
    if isinstance(kind, ListOf):
        repeats = ", each at most once" if kind.unique else ""
        each = describe(kind.item)
        return f"list of at most {kind.max_items} {kind.noun}{repeats}; each a {each}"
    if isinstance(kind, Metadata):
        return (
            f"flat object of at most {kind.max_keys} keys matching `^{METADATA_KEY.pattern}$`;"
            f" each value a "
            f"{describe(kind.value_text)}, an {describe(kind.value_integer)}, a boolean or null"
        )
    if isinstance(kind, Object):
        members = ", ".join(_code(member.name) for member in kind.fields)
        out = f"object of {members}"
        if kind.across_description:
            out += ". " + kind.across_description
        return out
    raise TypeError(f"no description for {type(kind).__name__}")


def text_rule(kind: Kind) -> str:
    """Whether a value is free text (redacted, perhaps cut) or an identifier (secrets refused)."""
    if isinstance(kind, Text):
        if kind.free and kind.cut:
            return "free text: secrets redacted, then cut if long"
        if kind.free:
            return "free text: secrets redacted"
        return "identifier: refused if it looks like a secret"
    if isinstance(kind, ListOf) and isinstance(kind.item, Text):
        return "each entry " + text_rule(kind.item)
    if isinstance(kind, Metadata):
        return "string values " + text_rule(kind.value_text)
    return NONE


def _parents_required(path: tuple[str, ...]) -> bool:
    obj: Object = evidence.DOCUMENT
    for name in path[:-1]:
        member = obj.member(name)
        if not member.required or member.refused_when is not None:
            return False
        assert isinstance(member.kind, Object)
        obj = member.kind
    return True


def _default(member: Field) -> str:
    assert member.default is not None
    return _code(json.dumps(member.default(), ensure_ascii=False))


def required_rule(path: tuple[str, ...], member: Field) -> str:
    within = "" if _parents_required(path) else f" when `{dotted(path[:-1])}` is sent"
    if member.refused_when is not None:
        sibling, refused = member.refused_when
        rule = f"refused when `{sibling}` is `{refused}`"
        return f"required{within}, except: {rule}" if member.required else rule
    if member.required:
        return "required" + within
    if member.default is not None:
        return f"optional; default {_default(member)}"
    return "optional"


def column_rule(member: Field) -> str:
    column = member.column
    if column is None:
        return NONE
    out = _code(column.name)
    if column.filter:
        out += ", a list filter"
    if not member.required or member.refused_when is not None:
        out += ", NULL when absent" if column.null else ", empty when absent"
    return out


def absent_rule(member: Field) -> str:
    """What null, or leaving the field out, means."""
    if member.refused_when is not None:
        sibling, refused = member.refused_when
        return (
            f"an error (`is required`), except when `{sibling}` is `{refused}`, where it must "
            "be absent or null and is left out"
        )
    if member.required:
        return "an error (`is required`)"
    if member.default is not None:
        return f"the default {_default(member)} is stored"
    if isinstance(member.kind, Metadata):
        return "left out; inside, a null value is kept"
    return "left out of the document"


def label_of(member: Field) -> str:
    if member.label is None:
        return NONE
    from django.utils import translation

    with translation.override("en"):
        return str(member.label)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def receipt_format_fields() -> str:
    """The Markdown table of every field the producer may send, one row each, nested fields
    as `subject.name`, in the declaration's order (the order validation reports errors in)."""
    lines = [HEADER, "|" + "---|" * HEADER.count(" |")]
    for path, member in evidence.walk(evidence.DOCUMENT):
        cells = [
            _code(dotted(path)),
            describe(member.kind),
            required_rule(path, member),
            text_rule(member.kind),
            column_rule(member),
            absent_rule(member),
            label_of(member),
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


# --- the block in docs/receipt-format.md ------------------------------------------------------


def generated_block(text: str) -> str:
    """What stands between the two markers of `text` (after the start marker's line)."""
    if text.count(START) != 1 or text.count(END) != 1:
        raise ValueError(f"the text needs exactly one {START} and one {END}")
    _, _, rest = text.partition(START + "\n")
    if END not in rest:
        raise ValueError(f"{START} must stand on a line of its own, before {END}")
    block, _, _ = rest.partition(END)
    return block


def with_block(text: str, block: str) -> str:
    """`text` with the block between the markers replaced by `block`."""
    generated_block(text)  # the markers are there, once each
    before, _, rest = text.partition(START + "\n")
    _, _, after = rest.partition(END)
    return f"{before}{START}\n{block}{END}{after}"


def _configure_django() -> None:
    """Labels are lazy translations: they need settings and a ready app registry."""
    import django
    from django.apps import apps
    from django.conf import settings

    if apps.ready:
        return
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        settings.configure(USE_I18N=True, LANGUAGE_CODE="en", INSTALLED_APPS=[])
    django.setup()


def main(path: Path = DOC_PATH) -> int:
    _configure_django()
    text = path.read_text(encoding="utf-8")
    updated = with_block(text, receipt_format_fields())
    if updated == text:
        print(f"{path}: up to date")
    else:
        path.write_text(updated, encoding="utf-8")
        print(f"{path}: field reference rewritten from evidence.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())

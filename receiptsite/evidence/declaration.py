"""receipt/v1, declared once: every field of the evidence document with its kind and limits,
whether it is free text (redacted, and cut if long), whether it is a stored column, and its
label on the reviewer's page.

Everything else reads from here: validation (document.validate), the JSON Schema published in
/api/openapi.json (json_schema), the fields redaction scans (redact.py), the stored columns
(models.Receipt, services), what verification's `record_matches` compares, and the page's
labels (presentation.py). To add a field, add it here (and, for a new column, a migration).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from django.utils.translation import gettext_lazy as _
from receiptsite_client import boundary

from receiptsite.evidence.kinds import (
    MAX_SAFE_INTEGER,
    Column,
    Enum,
    Field,
    Integer,
    ListOf,
    Metadata,
    Object,
    ReceiptId,
    Text,
    Timestamp,
)

SCHEMA: Final = "receipt/v1"
PHASES: Final = ("start", "end", "completion", "confirmation", "handoff")
SUBJECT_TYPES: Final = ("tool", "task", "chain", "agent_run", "model", "external")
OUTCOMES: Final = ("succeeded", "failed", "timed_out", "uncertain")
# What the site adds: a producer sending one of these is told so.
SITE_FIELDS: Final = frozenset({"schema", "id", "tenant", "recorded_at", "publisher", "redactions"})
MAX_CHILDREN: Final = 100

# The default evidence boundary, one statement per phase, appended to `not_observed`. Declared
# in the client distribution, which the producers' hand-off block needs too: one source.
BOUNDARY: Final = boundary.BOUNDARY


def _identifier(max_len: int, min_len: int = 0) -> Text:
    return Text(min_len=min_len, max_len=max_len)


IDEMPOTENCY_KEY: Final = Text(
    min_len=1,
    max_len=200,
    chars="[\\x21-\\x7e]",
    chars_message="must use only visible ASCII characters (U+0021 to U+007E, no spaces)",
)
STATEMENTS: Final = ListOf(Text(max_len=500, free=True), 20, "strings")


def _links_across(links: dict[str, Any], at: str) -> list[tuple[str, str]]:
    problems = []
    if "parent_receipt_id" in links and "parent_idempotency_key" in links:
        problems.append(
            (at, "names the parent twice: send parent_receipt_id or parent_idempotency_key, "
             "not both")
        )
    children = len(links.get("child_receipt_ids", ())) + len(
        links.get("child_idempotency_keys", ())
    )
    if children > MAX_CHILDREN:
        problems.append((at, f"must name at most {MAX_CHILDREN} child receipts in all"))
    return problems


LINKS: Final = Object(
    fields=(
        Field("parent_receipt_id", ReceiptId()),
        Field(
            "child_receipt_ids",
            ListOf(ReceiptId(), MAX_CHILDREN, "receipt ids", unique=True),
        ),
        Field("parent_idempotency_key", IDEMPOTENCY_KEY),
        Field(
            "child_idempotency_keys",
            ListOf(IDEMPOTENCY_KEY, MAX_CHILDREN, "idempotency keys", unique=True),
        ),
    ),
    across=_links_across,
    # The parent named twice is expressible (null being absent); "at most 100 in all" is not.
    across_schema={
        "not": {
            "required": ["parent_receipt_id", "parent_idempotency_key"],
            "properties": {
                "parent_receipt_id": {"not": {"type": "null"}},
                "parent_idempotency_key": {"not": {"type": "null"}},
            },
        }
    },
    across_description=(
        "Not both parent_receipt_id and parent_idempotency_key; at most "
        f"{MAX_CHILDREN} children named in all; every receipt named must exist and belong to "
        "the same tenant. The site resolves idempotency keys to receipt ids before storing."
    ),
)

ATTEMPT: Final = Object(
    fields=(
        Field("number", Integer(1), default=lambda: 1),
        Field("prior_attempt_id", _identifier(200), label=_("Prior attempt")),
        Field("retry_reason", Text(max_len=500, free=True), label=_("Why it was retried")),
    )
)

SUBJECT: Final = Object(
    fields=(
        Field("type", Enum(SUBJECT_TYPES), required=True),
        Field(
            "name",
            _identifier(200, min_len=1),
            required=True,
            column=Column("subject_name", filter=True),
        ),
        Field("version", _identifier(100)),
    )
)

FRAMEWORK: Final = Object(
    fields=(
        Field("name", _identifier(50), column=Column("framework_name")),
        Field("version", _identifier(200)),
        Field("run_id", _identifier(200)),
        Field("parent_run_id", _identifier(200)),
        Field("tool_call_id", _identifier(200)),
    )
)

# The producer's part of receipt/v1, in the contract's table order (errors follow it).
DOCUMENT: Final = Object(
    fields=(
        Field(
            "workflow_id",
            _identifier(200, min_len=1),
            required=True,
            column=Column("workflow_id", filter=True),
            label=_("Workflow"),
            section="workflow",
        ),
        Field("step_id", _identifier(200), label=_("Step"), section="workflow"),
        Field("attempt", ATTEMPT, default=lambda: {"number": 1}),
        Field(
            "phase",
            Enum(PHASES),
            required=True,
            column=Column("phase", max_length=20, filter=True),
        ),
        Field("subject", SUBJECT, required=True),
        Field("framework", FRAMEWORK),
        Field(
            "session_id",
            _identifier(200),
            column=Column("session_id", filter=True),
            label=_("Session"),
            section="technical",
        ),
        Field("actor", _identifier(200), label=_("Actor"), section="technical"),
        Field(
            "trace_id",
            _identifier(200),
            column=Column("trace_id"),
            label=_("Trace"),
            section="technical",
        ),
        Field("request_id", _identifier(200), label=_("Request"), section="technical"),
        Field(
            "outcome",
            Enum(OUTCOMES),
            required=True,
            refused_when=("phase", "start"),
            column=Column("outcome", max_length=20, null=True, filter=True),  # null: a start
        ),
        Field("started_at", Timestamp(), label=_("Started (as reported)"), section="timing"),
        Field("ended_at", Timestamp(), label=_("Ended (as reported)"), section="timing"),
        Field(
            "duration_ms",
            Integer(0),
            label=_("Duration (as reported)"),
            section="timing",
            unit="ms",
        ),
        # input_summary and result have no length limit at validation: they are cut instead.
        Field(
            "input_summary",
            Text(free=True, cut=True),
            label=_("What it was given (summary)"),
            section="text",
        ),
        Field("result", Text(free=True, cut=True), label=_("What came back"), section="text"),
        Field("observed", STATEMENTS),
        Field("not_observed", STATEMENTS, default=list),
        Field(
            "operation_ref",
            _identifier(200),
            label=_("Operation reference"),
            section="technical",
        ),
        Field("links", LINKS),
        Field(
            "idempotency_key",
            IDEMPOTENCY_KEY,
            column=Column("idempotency_key", null=True),
            label=_("Idempotency key"),
            section="technical",
        ),
        Field(
            "metadata",
            Metadata(
                max_keys=20,
                value_text=Text(max_len=500, free=True),
                value_integer=Integer(-MAX_SAFE_INTEGER),
            ),
        ),
    ),
    site_fields=SITE_FIELDS,
)


# --- what derives from the declaration ---------------------------------------------------------


def walk(obj: Object, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Field]]:
    """Every field of `obj`, depth first, in the declaration's order, with its path."""
    for member in obj.fields:
        here = (*path, member.name)
        yield here, member
        if isinstance(member.kind, Object):
            yield from walk(member.kind, here)


def _required_all_the_way(path: tuple[str, ...]) -> bool:
    obj: Object = DOCUMENT
    for name in path:
        member = obj.member(name)
        if not member.required or member.refused_when is not None:
            return False
        if isinstance(member.kind, Object):
            obj = member.kind
    return True


class StoredColumn:
    """A column of the receipts table that repeats a field of the document."""

    def __init__(self, path: tuple[str, ...], member: Field) -> None:
        assert member.column is not None
        self.path = path
        self.pointer = "/" + "/".join(path)
        self.name = member.column.name
        kind = member.kind
        limit = member.column.max_length or (kind.max_len if isinstance(kind, Text) else None)
        assert limit is not None, f"{self.name}: a column needs a length"
        self.max_length: int = limit
        self.null = member.column.null
        self.filter = member.column.filter
        self.kind = kind
        self.required = _required_all_the_way(path)
        self.empty: str | None = None if self.null else ""

    def value_in(self, document: Any) -> Any:
        """The column's value as the document says it: the field, or the column's empty
        value when the field is absent."""
        value = document
        for name in self.path:
            if not isinstance(value, dict) or name not in value:
                return self.empty
            value = value[name]
        return value


COLUMNS: Final = tuple(
    StoredColumn(path, member) for path, member in walk(DOCUMENT) if member.column is not None
)


# The exact-match filters of the tenant's list, in the contract's order.
LIST_FILTERS: Final = tuple(column for column in COLUMNS if column.filter)


def columns_of(document: dict[str, Any]) -> dict[str, Any]:
    """The stored columns for a (producer's part of a) document, by column name."""
    return {column.name: column.value_in(document) for column in COLUMNS}


def page_rows(document: dict[str, Any], section: str) -> list[dict[str, Any]]:
    """The labelled fields of one section of the page, in the declaration's order."""
    rows = []
    for path, member in walk(DOCUMENT):
        if member.section != section or len(path) != 1 or document.get(path[0]) is None:
            continue
        rows.append(
            {
                "name": member.name,
                "label": member.label,
                "value": document[path[0]],
                "unit": member.unit,
                "code": isinstance(member.kind, Text) and not member.kind.free,
            }
        )
    return rows


UNEXPRESSED_RULES: Final = (
    "Rules this schema cannot express, which the site enforces all the same: the body must be "
    "UTF-8 JSON without a byte order mark, duplicate object keys, NaN or Infinity (400); a "
    "string must not hold a lone surrogate (422); an integer is a JSON number with no "
    "fraction and no exponent (1.0 and 1e3 are refused), and within ±(2^53−1); a date-time "
    "must also name a real day and time (no 30 February); an identifier (any string that is "
    "not free text) that looks like a secret (an API key, a token, a password) is refused, "
    "since it cannot be redacted; links may name at most 100 children in all (ids and keys "
    "together), and must name receipts of the same tenant that exist, each child only once, "
    "whether by id or by key and in whatever case its id is written; an idempotency key "
    "already used by this tenant for a different request is refused (422 "
    "idempotency-key-reused), and the same request again replays the first answer. null means "
    "absent, at any depth, except as a metadata value."
)


def json_schema() -> dict[str, Any]:
    """The producer's document as JSON Schema (2020-12, as OpenAPI 3.1 uses it)."""
    schema = DOCUMENT.schema()
    schema["description"] = (
        "An evidence document of receipt/v1, as a producer sends it. " + UNEXPRESSED_RULES
    )
    return schema

"""OpenTelemetry spans as receipts: which spans of an OTLP trace export become receipts, the
receipt/v1 document (the producer's part) each one makes, and what a stored receipt made this
way says of itself, for its page.

One span of OpenTelemetry's GenAI conventions whose `gen_ai.operation.name` is `execute_tool`
records one tool call; it becomes one `end` receipt of the tool. Every other span is skipped.
The documents made here go through ingest like any other producer's (validation, redaction,
idempotency): nothing here stores, signs or touches the database. The mapping is documented,
field by field, in docs/api.md ("POST /v1/traces").

A span is read as opentelemetry-proto parses it (`ExportTraceServiceRequest`); the route
(receiptsite/api/otlp.py) parses the body.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypedDict

from django.utils.translation import gettext_lazy, gettext_noop
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from receiptsite.evidence.declaration import FRAMEWORK
from receiptsite.evidence.kinds import Text

# The GenAI conventions' names (their registry, semantic-conventions' gen-ai attributes).
OPERATION_NAME: Final = "gen_ai.operation.name"
EXECUTE_TOOL: Final = "execute_tool"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
SESSION_ID: Final = "session.id"
ERROR_TYPE: Final = "error.type"
SERVICE_NAME: Final = "service.name"
# What the metadata keeps of the scope when its name is longer than `framework.name` may be.
SCOPE_NAME_KEY: Final = "otel.scope.name"

KEY_PREFIX: Final = "otel/"
_KEY: Final = re.compile(r"otel/(?P<trace>[0-9a-f]{32})/(?P<span>[0-9a-f]{16})")
_FRAMEWORK_NAME = FRAMEWORK.member("name").kind
assert isinstance(_FRAMEWORK_NAME, Text) and _FRAMEWORK_NAME.max_len is not None
FRAMEWORK_NAME_MAX: Final = _FRAMEWORK_NAME.max_len

# What every receipt made from a span says of itself, in the producer's part: stored as
# written, in English, like any producer's statements. They are marked for translation
# (gettext_noop leaves them as they are), so that a page in another language can show a
# translation beside the stored text, as it does for the site's boundary statements:
# STATEMENT_TRANSLATIONS, below.
OBSERVED_SPAN: Final = (
    "The producer's OpenTelemetry instrumentation reported this tool call as span {span} of "
    "trace {trace}, and the producer exported it to this site over OTLP."
)
OBSERVED_TIMES: Final = gettext_noop(
    "The tool, the times and the outcome are the span's, as the instrumentation recorded "
    "them (the outcome from the span's status)."
)
OBSERVED_INPUT: Final = gettext_noop(
    "What the tool was given is the span's gen_ai.tool.call.arguments."
)
OBSERVED_RESULT: Final = gettext_noop("What came back is the span's gen_ai.tool.call.result.")
NOT_OBSERVED_TELEMETRY: Final = gettext_noop(
    "This was made from telemetry, not recorded by a receipt client when the tool ran: the "
    "site did not see the call, and telemetry may be sampled or dropped, so a call the "
    "producer did not export has no receipt."
)
NOT_OBSERVED_INPUT: Final = gettext_noop(
    "The instrumentation did not record what the tool was given."
)
NOT_OBSERVED_RESULT: Final = gettext_noop("The instrumentation did not record what came back.")
# The stored statement -> its translation in the page's language (the span's own statement,
# which names its ids, is left as stored).
STATEMENT_TRANSLATIONS: Final = {
    statement: gettext_lazy(statement)
    for statement in (OBSERVED_TIMES, OBSERVED_INPUT, OBSERVED_RESULT, NOT_OBSERVED_TELEMETRY,
                      NOT_OBSERVED_INPUT, NOT_OBSERVED_RESULT)
}

# error.type values that name a timeout: the conventions' own `timeout`, and exception
# classes such as TimeoutError, asyncio.TimeoutError or httpx.ReadTimeout.
_TIMEOUT: Final = re.compile(r"(?:.*[.:])?(?:timeout|\w*Timeout(?:Error|Exception)?)")


class SpanRefused(Exception):
    """A tool span that cannot be a receipt: the reason, in plain English."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SpanRef:
    trace_id: str  # lowercase hex, as OTLP's JSON writes it
    span_id: str

    def __str__(self) -> str:
        return f"span {self.span_id or '(none)'} of trace {self.trace_id or '(none)'}"


@dataclass
class Mapped:
    """An export read span by span: the receipts its tool spans make (each with its span), the
    tool spans refused before ingest, and how many spans it held and how many were skipped
    (not tool executions)."""

    receipts: list[tuple[SpanRef, dict[str, Any]]] = field(default_factory=list)
    refused: list[tuple[SpanRef, str]] = field(default_factory=list)
    spans: int = 0
    skipped: int = 0


def receipts_of(export: ExportTraceServiceRequest) -> Mapped:
    """Every span of the export, in order: a tool span's receipt document, or its refusal;
    any other span counted as skipped."""
    mapped = Mapped()
    for resource_spans in export.resource_spans:
        resource = resource_spans.resource
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                mapped.spans += 1
                attributes = _attributes(span.attributes)
                if _string(attributes.get(OPERATION_NAME)) != EXECUTE_TOOL:
                    mapped.skipped += 1
                    continue
                ref = SpanRef(span.trace_id.hex(), span.span_id.hex())
                try:
                    document = receipt_of(span, scope_spans.scope, resource, attributes)
                except SpanRefused as refused:
                    mapped.refused.append((ref, refused.reason))
                else:
                    mapped.receipts.append((ref, document))
    return mapped


def receipt_of(
    span: Span,
    scope: InstrumentationScope,
    resource: Resource,
    attributes: dict[str, AnyValue] | None = None,
) -> dict[str, Any]:
    """The receipt/v1 document (the producer's part, before validation) of one tool span.

    Raises SpanRefused for a span OTLP itself would call broken: ids of the wrong length or
    all zero, no start or end time, an end before the start, or no tool named at all.
    Whatever else does not fit receipt/v1 (a tool name over 200 characters, say) is left to
    validation, which names the field."""
    attributes = _attributes(span.attributes) if attributes is None else attributes
    trace_id, span_id = _id(span.trace_id, 16, "trace id"), _id(span.span_id, 8, "span id")
    parent = _id(span.parent_span_id, 8, "parent span id") if span.parent_span_id else None
    started, ended = span.start_time_unix_nano, span.end_time_unix_nano
    if not started or not ended:
        raise SpanRefused("the span has no start or no end time")
    if ended < started:
        raise SpanRefused("the span ends before it starts")
    tool = _tool_name(span, attributes)
    resource_attributes = _attributes(resource.attributes)

    framework: dict[str, Any] = {"run_id": span_id}
    metadata: dict[str, Any] = {}
    if scope.name and len(scope.name) <= FRAMEWORK_NAME_MAX:
        framework["name"] = scope.name
    elif scope.name:
        metadata[SCOPE_NAME_KEY] = scope.name
    if scope.version:
        framework["version"] = scope.version
    if parent is not None:
        framework["parent_run_id"] = parent
    if (call_id := _string(attributes.get(TOOL_CALL_ID))) is not None:
        framework["tool_call_id"] = call_id

    document: dict[str, Any] = {
        "workflow_id": trace_id,
        "phase": "end",
        "subject": {"type": "tool", "name": tool},
        "framework": framework,
        "trace_id": trace_id,
        "outcome": outcome(span.status, _string(attributes.get(ERROR_TYPE))),
        "started_at": timestamp(started),
        "ended_at": timestamp(ended),
        "duration_ms": (ended - started) // 1_000_000,
        "idempotency_key": idempotency_key(trace_id, span_id),
    }
    session = _first_string(CONVERSATION_ID, SESSION_ID, attributes, resource_attributes)
    if session is not None:
        document["session_id"] = session
    observed = [OBSERVED_SPAN.format(span=span_id, trace=trace_id), OBSERVED_TIMES]
    not_observed = [NOT_OBSERVED_TELEMETRY]
    if TOOL_CALL_ARGUMENTS in attributes:
        document["input_summary"] = text_of(attributes[TOOL_CALL_ARGUMENTS])
        observed.append(OBSERVED_INPUT)
    else:
        not_observed.append(NOT_OBSERVED_INPUT)
    if TOOL_CALL_RESULT in attributes:
        document["result"] = text_of(attributes[TOOL_CALL_RESULT])
        observed.append(OBSERVED_RESULT)
    else:
        not_observed.append(NOT_OBSERVED_RESULT)
    document["observed"], document["not_observed"] = observed, not_observed
    for name, source in ((TOOL_TYPE, attributes), (ERROR_TYPE, attributes),
                         (SERVICE_NAME, resource_attributes)):
        if (value := _string(source.get(name))) is not None:
            metadata[name] = value
    if metadata:
        document["metadata"] = metadata
    return document


def idempotency_key(trace_id: str, span_id: str) -> str:
    """One span, one receipt: a re-sent export replays what the first one stored."""
    return f"{KEY_PREFIX}{trace_id}/{span_id}"


def outcome(status: Status, error_type: str | None) -> str:
    """The receipt's outcome from the span's status, as OpenTelemetry's "Recording errors"
    reads it: ERROR is a failure (`timed_out` when error.type names a timeout); OK is a
    success; UNSET, which instrumentations leave on success, is one too unless error.type
    records an error; a code the conventions do not define is `uncertain`."""
    code = status.code
    if code == Status.STATUS_CODE_ERROR or (code == Status.STATUS_CODE_UNSET and error_type):
        return "timed_out" if error_type and _TIMEOUT.fullmatch(error_type) else "failed"
    if code in (Status.STATUS_CODE_OK, Status.STATUS_CODE_UNSET):
        return "succeeded"
    return "uncertain"


def timestamp(unix_nano: int) -> str:
    """A span's time as the site writes timestamps: UTC, microseconds (the nanoseconds cut,
    not rounded), `Z`. OTLP's times are unsigned 64-bit nanoseconds, so every one is a
    date-time (the largest is in 2554)."""
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=unix_nano // 1000)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def text_of(value: AnyValue) -> str:
    """An attribute's value as text: a string as it is, anything else (a map or list, as the
    conventions prefer arguments and results recorded) as compact JSON."""
    plain = _plain(value)
    if isinstance(plain, str):
        return plain
    return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))


def _plain(value: AnyValue, depth: int = 0) -> Any:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        number = value.double_value
        return number if math.isfinite(number) else str(number)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if depth > 50:  # protobuf's own decoding stops at 100 levels; the text stops sooner
        return "…"
    if kind == "array_value":
        return [_plain(item, depth + 1) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return None  # an empty value, or one of the dictionary references profiles use


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, AnyValue]:
    return {pair.key: pair.value for pair in pairs}


def _string(value: AnyValue | None) -> str | None:
    if value is None or value.WhichOneof("value") != "string_value" or not value.string_value:
        return None
    return str(value.string_value)


def _first_string(
    first: str, second: str, *sources: dict[str, AnyValue]
) -> str | None:
    """The first of two attributes, on the span then on its resource."""
    for name in (first, second):
        for source in sources:
            if (value := _string(source.get(name))) is not None:
                return value
    return None


def _id(raw: bytes, size: int, name: str) -> str:
    if len(raw) != size or not any(raw):
        raise SpanRefused(f"the {name} is not {size} bytes, or is all zeros")
    return raw.hex()


def _tool_name(span: Span, attributes: dict[str, AnyValue]) -> str:
    """gen_ai.tool.name; else the span's name, which the conventions make
    `execute_tool {gen_ai.tool.name}`."""
    if (name := _string(attributes.get(TOOL_NAME))) is not None:
        return name
    rest = span.name.removeprefix(EXECUTE_TOOL).strip()
    if rest and span.name.startswith(EXECUTE_TOOL + " "):
        return rest
    raise SpanRefused(f"the span names no tool (no {TOOL_NAME}, and its name is not "
                      f"'{EXECUTE_TOOL} <tool>')")


# --- what a stored receipt says of itself, for its page ---------------------------------------


class Telemetry(TypedDict):
    """What the page says of a receipt made from a span (templates/receipts/_telemetry.html)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    instrumentation: str  # the instrumentation scope's name and version, or ""
    recorded_input: bool
    recorded_result: bool


def telemetry_origin(document: dict[str, Any]) -> Telemetry | None:
    """Whether the evidence document says it was made from an OpenTelemetry span, and which.

    It rests on the signed document alone: an idempotency key `otel/<trace id>/<span id>`
    with the same `trace_id` beside it, which POST /v1/traces always writes. A producer can
    write those fields through the JSON API too; the page's sentence is then still what the
    record says of itself, the producer's word, as the rest of the record is."""
    key = document.get("idempotency_key")
    match = _KEY.fullmatch(key) if isinstance(key, str) else None
    if match is None or document.get("trace_id") != match["trace"]:
        return None
    framework = document.get("framework") or {}
    metadata = document.get("metadata") or {}
    name = framework.get("name") or metadata.get(SCOPE_NAME_KEY) or ""
    version = framework.get("version") or ""
    parent = framework.get("parent_run_id")
    return Telemetry(
        trace_id=match["trace"],
        span_id=match["span"],
        parent_span_id=parent if isinstance(parent, str) else None,
        instrumentation=f"{name} {version}".strip() if isinstance(name, str) else "",
        recorded_input="input_summary" in document,
        recorded_result="result" in document,
    )

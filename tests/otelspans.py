"""Spans made by the real OpenTelemetry SDK, for the OTLP ingest tests: a tracer whose spans
are kept in memory (with ids and times the test chooses), the tool-execution span of
OpenTelemetry's GenAI conventions, and the export the SDK's own OTLP encoder makes of them
(what its OTLP/HTTP exporter sends)."""

from __future__ import annotations

import base64
import gzip
import itertools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.environment_variables import OTEL_SDK_DISABLED
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

SCOPE = "tests.otelspans"
SCOPE_VERSION = "1.0"
START = 1_796_049_000_123_456_789  # 2026-11-30T14:30:00.123456789Z, in ns since the epoch
SECOND = 1_000_000_000


class CountingIds(IdGenerator):
    """Trace ids and span ids counted up from `seed`, so that a test can name them."""

    def __init__(self, seed: int = 1) -> None:
        self.traces = itertools.count(seed << 64)
        self.spans = itertools.count(seed << 32)

    def generate_trace_id(self) -> int:
        return next(self.traces) or next(self.traces)

    def generate_span_id(self) -> int:
        return next(self.spans) or next(self.spans)


def tracer_provider(**options: Any) -> TracerProvider:
    """A TracerProvider that records spans. The client's tests turn the OpenTelemetry SDK off
    for the whole session (OTEL_SDK_DISABLED, so that CrewAI, imported at collection, sends no
    telemetry: clients/python/tests/conftest.py), and a provider reads that variable when it
    is made: made here without it, the variable left as it was for everything else."""
    saved = os.environ.pop(OTEL_SDK_DISABLED, None)
    try:
        return TracerProvider(**options)
    finally:
        if saved is not None:
            os.environ[OTEL_SDK_DISABLED] = saved


class Recorder:
    """A TracerProvider of the test's own whose finished spans stay in memory."""

    def __init__(self, seed: int = 1, resource: dict[str, Any] | None = None) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = tracer_provider(
            id_generator=CountingIds(seed),
            resource=Resource.create(resource or {"service.name": "trip-planner"}),
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer: Tracer = self.provider.get_tracer(SCOPE, SCOPE_VERSION)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.memory.get_finished_spans()

    def export(self) -> ExportTraceServiceRequest:
        return export_of(self.spans())


def export_of(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The export OpenTelemetry's OTLP exporters send for these spans."""
    return encode_spans(spans)


def tool_call(
    tracer: Tracer,
    tool: str,
    *,
    arguments: str | None = None,
    result: str | None = None,
    call_id: str | None = None,
    error: str | None = None,
    status: StatusCode | None = None,
    start: int = START,
    seconds: float = 1.5,
    **attributes: Any,
) -> None:
    """One tool execution as the GenAI conventions trace it: `execute_tool <tool>`, INTERNAL,
    gen_ai.operation.name and gen_ai.tool.name, the call id, arguments and result where
    given, and on an error its error.type and the ERROR status."""
    values: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                              **{k.replace("__", "."): v for k, v in attributes.items()}}
    for name, value in (("gen_ai.tool.call.id", call_id),
                        ("gen_ai.tool.call.arguments", arguments),
                        ("gen_ai.tool.call.result", result), ("error.type", error)):
        if value is not None:
            values[name] = value
    span = tracer.start_span(f"execute_tool {tool}", kind=SpanKind.INTERNAL,
                             attributes=values, start_time=start)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, f"the tool raised {error}"))
    elif status is not None:
        span.set_status(Status(status))
    span.end(end_time=start + int(seconds * SECOND))


def chat(tracer: Tracer, model: str = "fake-model", start: int = START) -> None:
    """A model call of the GenAI conventions: not a tool execution."""
    span = tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, start_time=start, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": model})
    span.end(end_time=start + SECOND)


@contextmanager
def agent_run(tracer: Tracer, name: str = "trip_agent", start: int = START) -> Iterator[None]:
    """An `invoke_agent` span around what the block traces."""
    with tracer.start_as_current_span(
        f"invoke_agent {name}", start_time=start,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name},
        end_on_exit=True,
    ):
        yield


def protobuf(export: ExportTraceServiceRequest, compress: bool = False) -> bytes:
    data = export.SerializeToString()
    return gzip.compress(data) if compress else data


def otlp_json(export: ExportTraceServiceRequest) -> dict[str, Any]:
    """The export in OTLP's JSON encoding: protobuf's JSON mapping (lowerCamelCase, 64-bit
    integers as strings), with enums as integers and the trace and span ids in hex, the two
    ways OTLP's JSON differs from it."""
    data = json_format.MessageToDict(export, use_integers_for_enums=True)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in span:
                        span[name] = _hex(span[name])
                for link in span.get("links", []):
                    for name in ("traceId", "spanId"):
                        if name in link:
                            link[name] = _hex(link[name])
    return data


def _hex(b64: str) -> str:
    return base64.b64decode(b64).hex()

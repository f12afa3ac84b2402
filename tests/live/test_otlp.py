"""POST /v1/traces against a live site (gunicorn), fed by the real OpenTelemetry SDK: a
LangChain agent run traced by a GenAI instrumentation (opentelemetry-instrumentation-langchain)
and sent by the SDK's own OTLP/HTTP exporter, in protobuf (plain and gzipped) and, since the
Python SDK has no JSON exporter, as the same export in OTLP's JSON encoding. No hosted model
can be reached here: the agent's model is LangChain's own local fake chat model, as in the
adapter tests. And the README's OpenTelemetry example, run as it stands."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.livesite import REPO, VENV_BIN, LiveSite
from tests.otelspans import otlp_json, tracer_provider

pytestmark = [pytest.mark.live, pytest.mark.any_database]

PROTOBUF = "application/x-protobuf"
SKIPPED = ("{skipped} of {spans} span(s) were skipped: they are not tool executions "
           "(gen_ai.operation.name is not execute_tool), so they make no receipt; they are not "
           "counted as rejected.")


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as live:
        yield live


class Traced:
    """A TracerProvider of the test's own, LangChain instrumented into it, its finished spans
    kept in memory until a test exports them."""

    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = tracer_provider(
            resource=Resource.create({"service.name": "trip-planner"})
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("tests.live.test_otlp")

    def take(self) -> list[ReadableSpan]:
        spans = list(self.memory.get_finished_spans())
        self.memory.clear()
        return spans


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    traced = Traced()
    instrumentor = LangchainInstrumentor()
    instrumentor.instrument(tracer_provider=traced.provider)
    try:
        yield traced
    finally:
        instrumentor.uninstrument()


class Exporter:
    """The SDK's OTLP/HTTP exporter pointed at the site, with every answer it got kept (the
    exporter itself only says SUCCESS or FAILURE)."""

    def __init__(self, site: LiveSite, key: str | None = None, gzip: bool = False,
                 timeout: float = 60) -> None:
        self.answers: list[requests.Response] = []
        session = requests.Session()
        session.hooks["response"].append(lambda answer, *args, **kwargs: self.answers.append(
            answer))
        self.exporter = OTLPSpanExporter(
            endpoint=f"{site.url}/v1/traces",
            headers={"Authorization": f"Bearer {key or site.api_key}"},
            compression=Compression.Gzip if gzip else Compression.NoCompression,
            timeout=timeout, session=session,
        )

    def export(self, spans: list[ReadableSpan]) -> SpanExportResult:
        return self.exporter.export(spans)

    def answer(self) -> ExportTraceServiceResponse:
        (last,) = self.answers[-1:]
        assert last.status_code == 200, last.content
        assert last.headers["Content-Type"] == PROTOBUF
        return ExportTraceServiceResponse.FromString(last.content)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


@tool
def book_table(city: str) -> str:
    """Book a table for dinner."""
    raise ValueError(f"no table free in {city}")


TOOLS = {"get_weather": get_weather, "book_table": book_table}


def agent_run(traced: Traced, question: str = "Weather, and a table?") -> tuple[str, list[Any]]:
    """A LangChain agent loop on a local fake chat model (one turn asking for both tools, then
    the answer), inside a `trip` span of the test's own; its trace id and its spans."""
    model = GenericFakeChatModel(messages=iter([
        AIMessage(content="", tool_calls=[
            {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"},
            {"name": "book_table", "args": {"city": "Paris"}, "id": "call_2"}]),
        AIMessage(content="Sunny in Paris; no table free."),
    ]))

    def agent(text: str) -> str:
        messages: list[Any] = [HumanMessage(text)]
        while (reply := model.invoke(messages)).tool_calls:
            messages.append(reply)
            for call in reply.tool_calls:
                try:
                    messages.append(TOOLS[call["name"]].invoke(call))
                except ValueError as error:
                    messages.append(ToolMessage(str(error), tool_call_id=call["id"]))
        return str(reply.content)

    with traced.tracer.start_as_current_span("trip") as run:
        assert RunnableLambda(agent, name="trip_agent").invoke(question) == (
            "Sunny in Paris; no table free.")
    return format(run.get_span_context().trace_id, "032x"), traced.take()


def get(site: LiveSite, path: str) -> Any:
    answer = site.get(path, headers={"Authorization": f"Bearer {site.api_key}"})
    assert answer.status == 200, answer
    return answer.json()


def receipts(site: LiveSite, workflow_id: str | None = None) -> list[dict[str, Any]]:
    """The tenant's receipts (of one workflow), every page."""
    found: list[dict[str, Any]] = []
    query = f"workflow_id={workflow_id}&" if workflow_id else ""
    cursor = ""
    while True:
        page = get(site, f"/api/receipts?{query}limit=200{cursor}")
        found += page["receipts"]
        if page["next_cursor"] is None:
            return found
        cursor = f"&cursor={page['next_cursor']}"


def document(site: LiveSite, receipt_id: str) -> dict[str, Any]:
    return dict(get(site, f"/api/receipts/{receipt_id}")["document"])


def verifies(site: LiveSite, receipt_id: str) -> bool:
    answer = site.get(f"/api/receipt/{receipt_id}/verify")
    return bool(answer.status == 200 and answer.json()["status"] == "valid")


@pytest.mark.parametrize("gzip", [False, True], ids=["protobuf", "protobuf+gzip"])
def test_an_agent_runs_spans_exported_by_the_sdk_arrive_as_receipts_that_verify(
    site: LiveSite, traced: Traced, gzip: bool
) -> None:
    trace_id, spans = agent_run(traced)
    exporter = Exporter(site, gzip=gzip)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    answer = exporter.answer()
    tool_spans = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert len(tool_spans) == 2
    assert answer.partial_success.rejected_spans == 0
    assert answer.partial_success.error_message == SKIPPED.format(
        skipped=len(spans) - 2, spans=len(spans))
    if gzip:
        assert exporter.answers[-1].request.headers["Content-Encoding"] == "gzip"
    found = {r["subject"]["name"]: r for r in receipts(site, trace_id)}
    assert {name: r["outcome"] for name, r in found.items()} == {
        "get_weather": "succeeded", "book_table": "failed"}
    for receipt in found.values():
        assert receipt["phase"] == "end" and verifies(site, receipt["id"])
    weather = document(site, found["get_weather"]["id"])
    span = next(s for s in tool_spans if s.name == "execute_tool get_weather")
    assert weather["idempotency_key"] == f"otel/{trace_id}/{span.context.span_id:016x}"
    assert weather["framework"]["name"] == "opentelemetry.instrumentation.langchain"
    assert weather["trace_id"] == weather["workflow_id"] == trace_id
    assert '"city": "Paris"' in weather["input_summary"] and "Sunny in Paris" in weather["result"]
    failed = document(site, found["book_table"]["id"])
    assert failed["metadata"]["error.type"] == "ValueError"


def test_a_resent_export_stores_nothing_twice(site: LiveSite, traced: Traced) -> None:
    trace_id, spans = agent_run(traced)
    exporter = Exporter(site)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    first = receipts(site, trace_id)
    assert exporter.export(spans) == SpanExportResult.SUCCESS  # an exporter's retry
    assert exporter.answer().partial_success.rejected_spans == 0
    assert receipts(site, trace_id) == first and len(first) == 2


def test_the_same_export_in_otlps_json_makes_the_same_receipts(
    site: LiveSite, traced: Traced
) -> None:
    trace_id, spans = agent_run(traced)
    body = json.dumps(otlp_json(encode_spans(spans))).encode()
    answer = site.post("/v1/traces", body, headers={"Content-Type": "application/json"})
    assert answer.status == 200 and answer.content_type == "application/json", answer
    assert answer.json() == {"partialSuccess": {"errorMessage": SKIPPED.format(
        skipped=len(spans) - 2, spans=len(spans))}}
    from_json = receipts(site, trace_id)
    assert len(from_json) == 2 and all(verifies(site, r["id"]) for r in from_json)
    # The same spans in protobuf are the same receipts: replayed, none stored again.
    assert Exporter(site).export(spans) == SpanExportResult.SUCCESS
    assert receipts(site, trace_id) == from_json


def test_a_span_without_the_genai_attributes_is_skipped_and_counted(
    site: LiveSite, traced: Traced
) -> None:
    with traced.tracer.start_as_current_span("GET /orders/4711") as span:
        span.set_attribute("http.request.method", "GET")
    spans = traced.take()
    before = len(receipts(site))
    exporter = Exporter(site)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    answer = exporter.answer()
    assert answer.partial_success.rejected_spans == 0
    assert answer.partial_success.error_message == SKIPPED.format(skipped=1, spans=1)
    assert len(receipts(site)) == before


def many_spans(traced: Traced, tools: int, others: int, arguments: str = "{}") -> list[Any]:
    """One trace of `tools` tool spans and `others` model calls, as the GenAI conventions
    name them, made by the SDK's tracer; its spans, in the order they ended."""
    tracer = traced.tracer
    with tracer.start_as_current_span("invoke_agent bulk", attributes={
            "gen_ai.operation.name": "invoke_agent"}):
        for _ in range(others):
            with tracer.start_as_current_span("chat fake-model", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        for i in range(tools):
            with tracer.start_as_current_span(f"execute_tool tool_{i}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool_{i}",
                    "gen_ai.tool.call.arguments": arguments}):
                pass
    return traced.take()


def test_a_1000_span_export_within_the_body_limit_is_stored_whole(
    site: LiveSite, traced: Traced
) -> None:
    spans = many_spans(traced, tools=500, others=499)
    assert len(spans) == 1000
    assert len(encode_spans(spans).SerializeToString()) < 5 * 1024 * 1024
    exporter = Exporter(site)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert exporter.answer().partial_success.error_message == SKIPPED.format(
        skipped=500, spans=1000)
    trace_id = f"{spans[0].context.trace_id:032x}"
    stored = receipts(site, trace_id)
    assert len(stored) == 500
    assert verifies(site, stored[0]["id"]) and verifies(site, stored[-1]["id"])


@pytest.mark.parametrize(
    ("tools", "arguments", "gzip", "detail"),
    [
        # More tool spans than one export (a batch) stores.
        (1000, "{}", False, "The export holds 1000 tool spans; one export stores at most 500"),
        # Over 5 MiB as sent.
        (1000, "x" * 6000, False, "The body is over the limit of 5242880 bytes."),
        # Small once gzipped, over 5 MiB once inflated: decompression stops at the limit.
        (1000, "x" * 6000, True, "The body is over the limit of 5242880 bytes."),
    ],
    ids=["too-many-tool-spans", "too-large", "too-large-once-inflated"],
)
def test_a_1000_span_export_over_a_limit_is_refused_cleanly(
    site: LiveSite, traced: Traced, tools: int, arguments: str, gzip: bool, detail: str
) -> None:
    spans = many_spans(traced, tools=tools, others=0, arguments=arguments)[:1000]
    before = len(receipts(site))
    exporter = Exporter(site, gzip=gzip)
    assert exporter.export(spans) == SpanExportResult.FAILURE
    (answer,) = exporter.answers  # a 413 is not retried
    assert answer.status_code == 413
    if gzip:
        sent = answer.request.body
        assert isinstance(sent, bytes) and len(sent) < 5 * 1024 * 1024
    status = status_pb2.Status.FromString(answer.content)
    assert status.message.startswith(detail)
    assert len(receipts(site)) == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"\xff\xff\xff\xff", PROTOBUF), (b'{"resourceSpans": [', "application/json")],
)
def test_a_malformed_body_is_400_and_stores_nothing(
    site: LiveSite, body: bytes, content_type: str
) -> None:
    before = len(receipts(site))
    answer = site.post("/v1/traces", body, headers={"Content-Type": content_type})
    assert answer.status == 400 and answer.content_type == content_type, answer
    status = status_pb2.Status()
    if content_type == PROTOBUF:
        status.ParseFromString(answer.body)
    else:
        json_format.Parse(answer.body, status)
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info) and info.reason == "MALFORMED_EXPORT"
    assert len(receipts(site)) == before


def test_a_wrong_key_is_401_and_not_retried(site: LiveSite, traced: Traced) -> None:
    _, spans = agent_run(traced)
    before = len(receipts(site))
    exporter = Exporter(site, key="rk_000000000000_not-a-key")
    assert exporter.export(spans) == SpanExportResult.FAILURE
    (answer,) = exporter.answers
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="receipts"'
    assert answer.headers["Content-Type"] == PROTOBUF
    assert status_pb2.Status.FromString(answer.content).message
    assert len(receipts(site)) == before


# --- the README's example, as it stands ------------------------------------------------------


README_SECTION = "## Publishing OpenTelemetry traces: `POST /v1/traces`"


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(README_SECTION)
    section = text[start:text.index("\n## ", start + len(README_SECTION))]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return block


def test_the_readme_example_runs_and_its_tool_call_becomes_a_receipt_that_verifies(
    site: LiveSite, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    env = {**os.environ, "RECEIPTSITE_URL": site.url, "RECEIPTSITE_API_KEY": site.api_key,
           "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    # A reader's shell, not this session's: the client's tests turn the SDK off for CrewAI.
    env.pop("OTEL_SDK_DISABLED", None)
    for name in list(env):
        if name.startswith(("OTEL_", "TRACELOOP_")) or name == "OPENAI_API_KEY":
            del env[name]
    done = subprocess.run([str(VENV_BIN / "python"), str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    answer, line = done.stdout.splitlines()
    assert answer == "It is sunny in Paris."
    match = re.fullmatch(rf"get_weather succeeded ({re.escape(site.url)}/run/([0-9a-f-]{{36}}))",
                         line)
    assert match, done.stdout
    receipt_id = match[2]
    assert verifies(site, receipt_id)
    stored = document(site, receipt_id)
    assert stored["framework"]["name"] == "opentelemetry.instrumentation.langchain"
    assert stored["metadata"]["service.name"] == "trip-planner"
    assert "Paris" in stored["input_summary"] and "Sunny in Paris" in stored["result"]
    assert site.get(f"/run/{receipt_id}").status == 200  # its page

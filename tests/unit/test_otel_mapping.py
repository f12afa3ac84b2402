"""The mapping of OpenTelemetry tool spans to receipt/v1 (receiptsite/evidence/otel.py), on
spans the real SDK makes; reading an OTLP body (receiptsite/api/otlp.py: its encodings, its
bounded decompression); and the page's sentence about such a receipt."""

from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.utils import translation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from opentelemetry.trace import Link, StatusCode

from receiptsite.api import otlp
from receiptsite.evidence import otel
from receiptsite.evidence.document import DocumentInvalid, validate
from receiptsite.problems import Problem
from tests.otelspans import START, Recorder, agent_run, chat, otlp_json, tool_call

pytestmark = pytest.mark.unit


def one_receipt(**options: Any) -> dict[str, Any]:
    recorder = Recorder(resource=options.pop("resource", None))
    tool_call(recorder.tracer, options.pop("tool", "get_weather"), **options)
    mapped = otel.receipts_of(recorder.export())
    assert not mapped.refused, mapped.refused
    ((_, document),) = mapped.receipts
    return document


def export_with(**span_changes: Any) -> ExportTraceServiceRequest:
    recorder = Recorder()
    tool_call(recorder.tracer, "get_weather")
    export = recorder.export()
    span = export.resource_spans[0].scope_spans[0].spans[0]
    for name, value in span_changes.items():
        setattr(span, name, value)
    return export


# --- which spans, and what each makes ------------------------------------------------------


def test_only_execute_tool_spans_make_receipts_and_the_rest_are_counted() -> None:
    recorder = Recorder()
    with agent_run(recorder.tracer):
        chat(recorder.tracer)
        tool_call(recorder.tracer, "get_weather")
    mapped = otel.receipts_of(recorder.export())
    assert (mapped.spans, mapped.skipped, mapped.refused) == (3, 2, [])
    ((ref, document),) = mapped.receipts
    assert document["subject"] == {"type": "tool", "name": "get_weather"}
    assert document["idempotency_key"] == f"otel/{ref.trace_id}/{ref.span_id}"


def test_every_document_made_is_valid_receipt_v1() -> None:
    document = one_receipt(arguments='{"a": 1}', result="ok", call_id="call_9",
                           error="ValueError", gen_ai__conversation__id="conv-1")
    draft = validate(document)
    assert draft.producer["session_id"] == "conv-1"
    assert draft.producer["framework"]["tool_call_id"] == "call_9"


@pytest.mark.parametrize(
    ("code", "error_type", "expected"),
    [
        (Status.STATUS_CODE_OK, None, "succeeded"),
        (Status.STATUS_CODE_UNSET, None, "succeeded"),
        (Status.STATUS_CODE_UNSET, "KeyError", "failed"),
        (Status.STATUS_CODE_ERROR, None, "failed"),
        (Status.STATUS_CODE_ERROR, "ValueError", "failed"),
        (Status.STATUS_CODE_ERROR, "timeout", "timed_out"),
        (Status.STATUS_CODE_ERROR, "TimeoutError", "timed_out"),
        (Status.STATUS_CODE_ERROR, "asyncio.TimeoutError", "timed_out"),
        (Status.STATUS_CODE_ERROR, "httpx.ReadTimeout", "timed_out"),
        (Status.STATUS_CODE_ERROR, "TimeoutsExhausted", "failed"),
        (Status.STATUS_CODE_OK, "ValueError", "succeeded"),  # OK is the instrumentation's word
        (7, None, "uncertain"),  # a code OTLP does not define (proto3 enums are open)
    ],
)
def test_the_outcome_is_read_from_the_status(code: int, error_type: str | None,
                                             expected: str) -> None:
    assert otel.outcome(Status(code=code), error_type) == expected  # type: ignore[arg-type]


def test_times_are_utc_microseconds_cut_not_rounded() -> None:
    assert otel.timestamp(START) == "2026-11-30T14:30:00.123456Z"
    assert otel.timestamp(999) == "1970-01-01T00:00:00.000000Z"
    assert otel.timestamp(2**64 - 1) == "2554-07-21T23:34:33.709551Z"  # OTLP's largest
    document = one_receipt(seconds=0.0019999)
    assert document["duration_ms"] == 1


def test_structured_arguments_and_results_are_kept_as_compact_json() -> None:
    value = AnyValue()
    pairs = value.kvlist_value.values
    for key, set_value in (("city", "Paris"), ("days", 3), ("hot", True), ("ratio", 0.5)):
        pair = pairs.add(key=key)
        field = {str: "string_value", int: "int_value", bool: "bool_value",
                 float: "double_value"}[type(set_value)]
        setattr(pair.value, field, set_value)
    items = pairs.add(key="items").value.array_value.values
    items.add(string_value="a")
    items.add(bytes_value=b"\x00\x01")
    items.add(double_value=float("nan"))
    assert otel.text_of(value) == (
        '{"city":"Paris","days":3,"hot":true,"ratio":0.5,"items":["a","AAE=","nan"]}')
    assert otel.text_of(AnyValue(string_value="as it is")) == "as it is"
    assert otel.text_of(AnyValue(int_value=5)) == "5"


def test_the_tool_may_be_named_by_the_span_name_alone() -> None:
    export = export_with(name="execute_tool lookup")
    del export.resource_spans[0].scope_spans[0].spans[0].attributes[1]  # gen_ai.tool.name
    ((_, document),) = otel.receipts_of(export).receipts
    assert document["subject"]["name"] == "lookup"
    export.resource_spans[0].scope_spans[0].spans[0].name = "lookup"
    mapped = otel.receipts_of(export)
    assert [reason for _, reason in mapped.refused] == [
        "the span names no tool (no gen_ai.tool.name, and its name is not "
        "'execute_tool <tool>')"
    ]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"trace_id": b"\x01" * 15}, "the trace id is not 16 bytes, or is all zeros"),
        ({"trace_id": b"\x00" * 16}, "the trace id is not 16 bytes, or is all zeros"),
        ({"span_id": b""}, "the span id is not 8 bytes, or is all zeros"),
        ({"parent_span_id": b"\x01"}, "the parent span id is not 8 bytes, or is all zeros"),
        ({"start_time_unix_nano": 0}, "the span has no start or no end time"),
        ({"end_time_unix_nano": 0}, "the span has no start or no end time"),
        ({"end_time_unix_nano": START - 1}, "the span ends before it starts"),
    ],
)
def test_a_broken_span_is_refused_with_a_plain_reason(changes: dict[str, Any],
                                                      reason: str) -> None:
    mapped = otel.receipts_of(export_with(**changes))
    assert [r for _, r in mapped.refused] == [reason] and not mapped.receipts


def test_the_session_is_the_conversation_or_the_session_on_the_span_or_its_resource() -> None:
    assert "session_id" not in one_receipt()
    assert one_receipt(session__id="s-1")["session_id"] == "s-1"
    assert one_receipt(resource={"session.id": "s-2"})["session_id"] == "s-2"
    assert one_receipt(session__id="s-1", gen_ai__conversation__id="c-1")["session_id"] == "c-1"


def test_a_scope_name_too_long_for_framework_name_is_kept_in_the_metadata() -> None:
    export = export_with()
    scope = export.resource_spans[0].scope_spans[0].scope
    scope.name = "io.example." + "x" * 60
    ((_, document),) = otel.receipts_of(export).receipts
    assert "name" not in document["framework"]
    assert document["metadata"]["otel.scope.name"] == scope.name
    validate(document)
    assert otel.telemetry_origin(document) is not None


def test_the_same_span_makes_the_same_document_every_time() -> None:
    first, second = Recorder(), Recorder()
    for recorder in (first, second):
        tool_call(recorder.tracer, "t", arguments="a", result="b", status=StatusCode.OK)
    one = otel.receipts_of(first.export()).receipts
    two = otel.receipts_of(second.export()).receipts
    assert json.dumps(one[0][1], sort_keys=True) == json.dumps(two[0][1], sort_keys=True)


# --- what a stored receipt says of itself ------------------------------------------------------


def test_telemetry_origin_rests_on_the_key_and_the_trace_id_together() -> None:
    document = one_receipt(arguments="x")
    found = otel.telemetry_origin(document)
    assert found is not None
    assert (found["recorded_input"], found["recorded_result"]) == (True, False)
    assert found["instrumentation"] == "tests.otelspans 1.0"
    assert otel.telemetry_origin({**document, "trace_id": "0" * 31 + "1"}) is None
    assert otel.telemetry_origin({**document, "idempotency_key": "wf/1/end"}) is None
    assert otel.telemetry_origin({"workflow_id": "wf"}) is None


@pytest.mark.parametrize(
    ("options", "sentence"),
    [
        ({"arguments": "a", "result": "b"},
         "What the tool was given and what came back are as the instrumentation recorded them."),
        ({"arguments": "a"}, "it did not record what came back."),
        ({"result": "b"}, "it did not record what the tool was given."),
        ({}, "The instrumentation recorded neither what the tool was given nor what came back."),
    ],
)
def test_the_page_says_the_receipt_was_reported_by_the_producers_telemetry(
    options: dict[str, Any], sentence: str
) -> None:
    telemetry = otel.telemetry_origin(one_receipt(**options))
    with translation.override("en"):
        html = render_to_string("receipts/_telemetry.html", {"telemetry": telemetry})
    text = " ".join(html.split())
    assert "Reported by the producer's telemetry" in text
    assert "instrumentation, <code>tests.otelspans 1.0</code>, recorded" in text
    assert "It does not show that the tool ran as reported" in text
    assert sentence in text
    assert "not verified" not in text
    unverified = render_to_string("receipts/_telemetry.html",
                                  {"telemetry": telemetry, "unverified": True})
    assert "(as the record now says: not verified)" in unverified


def test_the_partial_shows_nothing_for_any_other_receipt() -> None:
    assert render_to_string("receipts/_telemetry.html", {"telemetry": None}).strip() == ""


# --- reading the body ---------------------------------------------------------------------


def test_inflate_reads_gzip_deflate_and_several_gzip_members() -> None:
    data = b"spans " * 1000
    window = otlp._CODINGS
    assert otlp.inflate(gzip.compress(data), window["gzip"], len(data)) == data
    assert otlp.inflate(zlib.compress(data), window["deflate"], len(data)) == data
    two = gzip.compress(data[:10]) + gzip.compress(data[10:])
    assert otlp.inflate(two, window["gzip"], len(data)) == data


def test_inflate_stops_one_byte_past_the_limit() -> None:
    bomb = gzip.compress(b"\x00" * 10_000_000)
    with pytest.raises(Problem) as refused:
        otlp.inflate(bomb, otlp._CODINGS["gzip"], 1000)
    assert refused.value.status == 413
    with pytest.raises(Problem) as broken:
        otlp.inflate(gzip.compress(b"abc")[:-4], otlp._CODINGS["gzip"], 1000)
    assert broken.value.status == 400


def test_the_json_encoding_reads_what_the_protobuf_one_does() -> None:
    recorder = Recorder()
    with agent_run(recorder.tracer):
        tool_call(recorder.tracer, "get_weather", arguments="x")
    linked = recorder.spans()[0].context
    recorder.tracer.start_span("follow-up", links=[Link(linked)]).end()  # ids in a link too
    export = recorder.export()
    assert export.resource_spans[0].scope_spans[0].spans[-1].links[0].span_id
    body = json.dumps(otlp_json(export)).encode()
    assert otlp._parsed(body, otlp.JSON) == export
    assert otlp._parsed(export.SerializeToString(), otlp.PROTOBUF) == export


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300))
def test_no_body_makes_anything_but_an_export_or_a_400(body: bytes) -> None:
    for encoding in (otlp.PROTOBUF, otlp.JSON):
        try:
            export = otlp._parsed(body, encoding)
        except Problem as refused:
            assert refused.status == 400
            continue
        _every_document_is_valid_or_refused(export)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=3),
    max_leaves=10,
)
SPAN_FIELDS = st.fixed_dictionaries({}, optional={
    "traceId": st.sampled_from(["", "ab", "0" * 32, "5B8EFFF798038103D269B633813FC60C"])
    | JSON_VALUES,
    "spanId": st.sampled_from(["", "00f067aa0ba902b7"]) | JSON_VALUES,
    "name": JSON_VALUES,
    "startTimeUnixNano": st.sampled_from(["1", "18446744073709551615", "-1", "x"]) | JSON_VALUES,
    "endTimeUnixNano": st.sampled_from(["2", 3]) | JSON_VALUES,
    "status": st.fixed_dictionaries({}, optional={"code": JSON_VALUES, "message": JSON_VALUES}),
    "attributes": st.lists(st.fixed_dictionaries({"key": st.sampled_from(
        ["gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.arguments"])}, optional={
        "value": st.fixed_dictionaries({}, optional={
            "stringValue": st.sampled_from(["execute_tool", "t"]) | JSON_VALUES,
            "kvlistValue": JSON_VALUES, "intValue": JSON_VALUES})}), max_size=3),
})


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(SPAN_FIELDS, max_size=3))
def test_no_json_export_makes_anything_but_receipts_refusals_or_a_400(
    spans: list[dict[str, Any]]
) -> None:
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    try:
        export = otlp._parsed(body, otlp.JSON)
    except Problem as refused:
        assert refused.status == 400
        return
    _every_document_is_valid_or_refused(export)


def _every_document_is_valid_or_refused(export: ExportTraceServiceRequest) -> None:
    mapped = otel.receipts_of(export)
    assert mapped.spans == mapped.skipped + len(mapped.refused) + len(mapped.receipts)
    for _, document in mapped.receipts:
        with contextlib.suppress(DocumentInvalid):  # a 422 of its own: refused, counted
            validate(document)


def test_every_fixed_statement_a_span_makes_can_be_translated_on_the_page() -> None:
    for options in ({}, {"arguments": "a", "result": "b"}):
        document = one_receipt(**options)
        fixed = [*document["observed"][1:], *document["not_observed"]]
        assert all(line in otel.STATEMENT_TRANSLATIONS for line in fixed), fixed
        assert document["observed"][0] not in otel.STATEMENT_TRANSLATIONS  # it names its ids
    with translation.override("en"):
        assert str(otel.STATEMENT_TRANSLATIONS[otel.NOT_OBSERVED_INPUT]) == (
            otel.NOT_OBSERVED_INPUT)

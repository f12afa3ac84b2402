"""POST /v1/traces: OTLP/HTTP trace exports, made by the real OpenTelemetry SDK and its own
OTLP encoder (tests/otelspans.py), each tool-execution span stored as a receipt; errors as
OTLP's google.rpc.Status in the request's encoding."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.trace import StatusCode

from receiptsite.audit.models import AuditEntry
from receiptsite.config import rate_limits
from receiptsite.evidence import otel
from receiptsite.ledger.log import LogRollback
from receiptsite.receipts.models import Receipt
from tests.conftest import SITE, Producer, count_receipts
from tests.db.test_query_counts import TENANT, pinned, queries_of
from tests.otelspans import (
    SCOPE,
    SCOPE_VERSION,
    START,
    Recorder,
    agent_run,
    chat,
    otlp_json,
    protobuf,
    tool_call,
)

pytestmark = pytest.mark.db

TRACES = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACE = "00000000000000010000000000000000"  # Recorder(seed=1)'s first trace id
SECOND = "00000000000000010000000000000001"  # and its second


def post(client: Client, body: bytes, key: str | None, content_type: str = PROTOBUF,
         coding: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    if coding is not None:
        headers["Content-Encoding"] = coding
    return client.post(TRACES, data=body, content_type=content_type, headers=headers)


def answer(response: Any) -> ExportTraceServiceResponse:
    """The 200 answer, decoded in the encoding it says it has."""
    assert response.status_code == 200, response.content
    message = ExportTraceServiceResponse()
    if response["Content-Type"] == PROTOBUF:
        message.ParseFromString(response.content)
    else:
        assert response["Content-Type"] == JSON
        json_format.Parse(response.content, message)
    return message


def status_of(response: Any, status: int, reason: str) -> status_pb2.Status:
    """An OTLP error answer: this HTTP status, a google.rpc.Status body in the request's
    encoding, whose ErrorInfo names the problem."""
    assert response.status_code == status, response.content
    message = status_pb2.Status()
    if response["Content-Type"] == PROTOBUF:
        message.ParseFromString(response.content)
    else:
        assert response["Content-Type"] == JSON
        json_format.Parse(response.content, message)
    assert message.message
    info = error_details_pb2.ErrorInfo()
    assert message.details[0].Unpack(info)
    assert info.reason == reason.upper().replace("-", "_")
    assert info.domain == "receipts.example.org"
    assert info.metadata["type"] == f"{SITE}/problems/{reason}"
    assert info.metadata["title"]
    return message


def agent_export(seed: int = 1) -> ExportTraceServiceRequest:
    """A fake agent run as the GenAI conventions trace it: the agent, a model call, two tool
    calls (one failed), and another model call."""
    recorder = Recorder(seed)
    with agent_run(recorder.tracer):
        chat(recorder.tracer)
        tool_call(recorder.tracer, "get_weather", arguments='{"city": "Paris"}',
                  result="Sunny in Paris", call_id="call_1")
        tool_call(recorder.tracer, "book_table", arguments='{"city": "Paris"}',
                  call_id="call_2", error="ValueError", start=START + 2 * 10**9)
        chat(recorder.tracer)
    return recorder.export()


def tools_only(count: int, seed: int = 1, **options: Any) -> ExportTraceServiceRequest:
    recorder = Recorder(seed)
    for i in range(count):
        tool_call(recorder.tracer, f"tool_{i}", start=START + i, **options)
    return recorder.export()


def documents() -> dict[str, dict[str, Any]]:
    """The stored receipts' documents, by idempotency key."""
    return {
        str(receipt.idempotency_key): json.loads(bytes(receipt.canonical_bytes))
        for receipt in Receipt.objects.all()
    }


# --- a tool span becomes a receipt -----------------------------------------------------------


def test_each_tool_span_becomes_an_end_receipt_of_its_tool(
    client: Client, api_key: str
) -> None:
    response = post(client, protobuf(agent_export()), api_key)
    assert response["Content-Type"] == PROTOBUF
    message = answer(response)
    assert message.partial_success.rejected_spans == 0
    stored = documents()
    spans = sorted(stored)
    assert spans == [f"otel/{TRACE}/0000000100000002", f"otel/{TRACE}/0000000100000003"]
    weather = stored[spans[0]]
    site_fields = {"schema", "id", "tenant", "recorded_at", "publisher", "redactions"}
    assert {k: v for k, v in weather.items() if k not in site_fields} == {
        "workflow_id": TRACE,
        "attempt": {"number": 1},
        "phase": "end",
        "subject": {"type": "tool", "name": "get_weather"},
        "framework": {"name": SCOPE, "version": SCOPE_VERSION, "run_id": "0000000100000002",
                      "parent_run_id": "0000000100000000", "tool_call_id": "call_1"},
        "trace_id": TRACE,
        "outcome": "succeeded",
        "started_at": "2026-11-30T14:30:00.123456Z",
        "ended_at": "2026-11-30T14:30:01.623456Z",
        "duration_ms": 1500,
        "input_summary": '{"city": "Paris"}',
        "result": "Sunny in Paris",
        "observed": [
            otel.OBSERVED_SPAN.format(span="0000000100000002", trace=TRACE),
            otel.OBSERVED_TIMES, otel.OBSERVED_INPUT, otel.OBSERVED_RESULT,
        ],
        "not_observed": [
            otel.NOT_OBSERVED_TELEMETRY,
            "This records what the agent runtime reported to this site. It does not show that "
            "any effect outside that report happened (an email received, a payment settled, "
            "a write accepted).",
        ],
        "idempotency_key": f"otel/{TRACE}/0000000100000002",
        "metadata": {"service.name": "trip-planner"},
    }
    failed = stored[spans[1]]
    assert failed["outcome"] == "failed"
    assert failed["metadata"] == {"error.type": "ValueError", "service.name": "trip-planner"}
    assert "result" not in failed and otel.NOT_OBSERVED_RESULT in failed["not_observed"]


def test_a_receipt_made_from_a_span_verifies_and_says_where_it_came_from(
    client: Client, api_key: str
) -> None:
    answer(post(client, protobuf(tools_only(1)), api_key))
    receipt = Receipt.objects.get()
    verification = client.get(f"/api/receipt/{receipt.uuid}/verify").json()
    assert verification["status"] == "valid"
    assert otel.telemetry_origin(json.loads(bytes(receipt.canonical_bytes))) == {
        "trace_id": TRACE, "span_id": "0000000100000000", "parent_span_id": None,
        "instrumentation": f"{SCOPE} {SCOPE_VERSION}", "recorded_input": False,
        "recorded_result": False,
    }


def test_the_json_encoding_makes_the_same_receipts(client: Client, api_key: str) -> None:
    export = agent_export()
    response = post(client, json.dumps(otlp_json(export)).encode(), api_key, JSON)
    assert response["Content-Type"] == JSON
    # OTLP's JSON: lowerCamelCase, and rejectedSpans (an int64) left out when it is 0.
    assert json.loads(response.content) == {"partialSuccess": {
        "errorMessage": answer(response).partial_success.error_message}}
    from_json = documents()
    # The same spans in protobuf are the same receipts: replayed, nothing stored again.
    answer(post(client, protobuf(export), api_key))
    assert documents() == from_json and count_receipts() == 2


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_export_is_read(client: Client, api_key: str, coding: str) -> None:
    data = protobuf(agent_export())
    body = gzip.compress(data) if coding == "gzip" else zlib.compress(data)
    answer(post(client, body, api_key, coding=coding))
    assert count_receipts() == 2


def test_a_resent_export_stores_nothing_twice(client: Client, api_key: str) -> None:
    body = protobuf(agent_export())
    answer(post(client, body, api_key))
    first = documents()
    second = answer(post(client, body, api_key))
    assert second.partial_success.rejected_spans == 0
    assert documents() == first and count_receipts() == 2


def test_a_span_that_is_not_a_tool_execution_is_skipped_and_counted(
    client: Client, api_key: str
) -> None:
    message = answer(post(client, protobuf(agent_export()), api_key))
    assert message.HasField("partial_success")
    assert message.partial_success.rejected_spans == 0
    assert message.partial_success.error_message == (
        "3 of 5 span(s) were skipped: they are not tool executions (gen_ai.operation.name is "
        "not execute_tool), so they make no receipt; they are not counted as rejected."
    )
    assert count_receipts() == 2


def test_an_export_of_tool_spans_only_is_taken_whole(client: Client, api_key: str) -> None:
    message = answer(post(client, protobuf(tools_only(3)), api_key))
    assert not message.HasField("partial_success")
    assert count_receipts() == 3


def test_an_empty_export_is_a_success(client: Client, api_key: str) -> None:
    export = ExportTraceServiceRequest()
    export.resource_spans.add().scope_spans.add()  # a resource and a scope, with no span
    message = answer(post(client, protobuf(export), api_key))
    assert not message.HasField("partial_success")
    assert json.loads(post(client, b"{}", api_key, JSON).content) == {}
    assert count_receipts() == 0


# --- spans refused, each counted with its reason -------------------------------------------


def test_a_tool_span_that_is_not_a_valid_receipt_is_rejected_and_the_others_stored(
    client: Client, api_key: str
) -> None:
    recorder = Recorder()
    tool_call(recorder.tracer, "x" * 201)
    tool_call(recorder.tracer, "fine")
    message = answer(post(client, protobuf(recorder.export()), api_key))
    assert message.partial_success.rejected_spans == 1
    assert message.partial_success.error_message == (
        f"1 of 2 tool span(s) were refused and made no receipt: span 0000000100000000 of trace "
        f"{TRACE}: its receipt is not valid receipt/v1: /subject/name must be 1 to 200 "
        "characters long."
    )
    assert [d["subject"]["name"] for d in documents().values()] == ["fine"]


def test_a_broken_tool_span_is_rejected_with_its_reason(client: Client, api_key: str) -> None:
    export = tools_only(2)
    spans = export.resource_spans[0].scope_spans[0].spans
    spans[0].end_time_unix_nano = spans[0].start_time_unix_nano - 1
    spans[1].span_id = b"\x00" * 8
    message = answer(post(client, protobuf(export), api_key))
    assert message.partial_success.rejected_spans == 2
    assert message.partial_success.error_message == (
        f"2 of 2 tool span(s) were refused and made no receipt: span 0000000100000000 of trace "
        f"{TRACE}: the span ends before it starts; span 0000000000000000 of trace {SECOND}: "
        "the span id is not 8 bytes, or is all zeros."
    )
    assert count_receipts() == 0


def test_the_message_names_five_refused_spans_and_counts_the_rest(
    client: Client, api_key: str
) -> None:
    message = answer(post(client, protobuf(tools_only(7, arguments="\x00")), api_key))
    assert message.partial_success.rejected_spans == 7
    assert message.partial_success.error_message.count("contains U+0000 (a NUL character)") == 5
    assert message.partial_success.error_message.endswith("; and 2 more.")


def test_a_span_resent_with_other_content_is_rejected_and_the_first_receipt_kept(
    client: Client, api_key: str
) -> None:
    answer(post(client, protobuf(tools_only(1, result="first")), api_key))
    first = documents()
    message = answer(post(client, protobuf(tools_only(1, result="second")), api_key))
    assert message.partial_success.rejected_spans == 1
    assert "a different receipt was already stored for this span" in (
        message.partial_success.error_message)
    assert documents() == first


def test_a_withdrawn_receipts_span_is_not_published_again(
    client: Client, api_key: str, producer: Producer
) -> None:
    body = protobuf(tools_only(1))
    answer(post(client, body, api_key))
    receipt = Receipt.objects.get()
    withdrawn = producer.post({"reason": "personal_data"},
                              path=f"/api/receipts/{receipt.uuid}/withdrawal")
    assert withdrawn.status_code == 201, withdrawn.content
    message = answer(post(client, body, api_key))
    assert message.partial_success.rejected_spans == 1
    assert "withdrawn" in message.partial_success.error_message


def test_secrets_in_the_recorded_arguments_are_redacted(client: Client, api_key: str) -> None:
    secret = "sk-proj-4f9Qa81Lm2Zx7Rt0Yb3Kc6Wd"
    answer(post(client, protobuf(tools_only(1, arguments=f'{{"key": "{secret}"}}')), api_key))
    (document,) = documents().values()
    assert document["input_summary"] == '{"key": "[REDACTED]"}'
    assert document["redactions"] == [
        {"field": "/input_summary", "reason": "secret", "removed_chars": len(secret)}
    ]


def test_more_tool_spans_than_a_batch_holds_is_413_and_stores_nothing(
    client: Client, api_key: str, settings: Any
) -> None:
    settings.BATCH_MAX_ITEMS = 3
    response = post(client, protobuf(tools_only(4)), api_key)
    status = status_of(response, 413, "payload-too-large")
    assert "at most 3 receipts" in status.message
    assert count_receipts() == 0
    answer(post(client, protobuf(tools_only(3)), api_key))  # exactly the limit: stored
    assert count_receipts() == 3


# --- a malformed export is 400 and stores nothing -------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "coding"),
    [
        (b"\xff\xff\xff\xff", PROTOBUF, None),  # a varint that never ends
        (b"\x0a\x05ab", PROTOBUF, None),  # a field longer than the body
        (b'{"resourceSpans": [', JSON, None),
        (b'{"resourceSpans": {"a": 1}}', JSON, None),
        (b'{"resourceSpans": [], "resourceSpans": []}', JSON, None),  # a duplicate key
        (b"[]", JSON, None),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "not hex"}]}]}]}',
         JSON, None),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}',
         JSON, None),
        (b"not gzip at all", PROTOBUF, "gzip"),
        (gzip.compress(b"\x0a\x05ab", mtime=0)[:-10], PROTOBUF, "gzip"),  # cut short
        (gzip.compress(b"", mtime=0) + b"trailing", PROTOBUF, "gzip"),
    ],
)
def test_a_malformed_export_is_400_and_stores_nothing(
    client: Client, api_key: str, body: bytes, content_type: str, coding: str | None
) -> None:
    response = post(client, body, api_key, content_type, coding)
    status = status_of(response, 400, "malformed-export")
    assert response["Content-Type"] == content_type
    assert status.code == code_pb2.INVALID_ARGUMENT
    bad_request = error_details_pb2.BadRequest()
    assert status.details[1].Unpack(bad_request)
    assert bad_request.field_violations[0].description == status.message
    assert count_receipts() == 0


def test_a_bad_id_in_json_is_named(client: Client, api_key: str) -> None:
    data = otlp_json(tools_only(2))
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"] = "0123zz"
    response = post(client, json.dumps(data).encode(), api_key, JSON)
    status = status_of(response, 400, "malformed-export")
    assert status.message == ("/resourceSpans/0/scopeSpans/0/spans/1/spanId must be a "
                              "hex-encoded id, as OTLP's JSON writes ids.")
    assert count_receipts() == 0


def test_unknown_fields_of_a_json_export_are_ignored(client: Client, api_key: str) -> None:
    data = otlp_json(tools_only(1))
    data["fromANewerOtlp"] = {"x": 1}
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["newField"] = 7
    answer(post(client, json.dumps(data).encode(), api_key, JSON))
    assert count_receipts() == 1


# --- the key, the media type, the size, the rate ------------------------------------------------


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_a_wrong_key_is_401_in_the_requests_encoding(
    client: Client, db: None, content_type: str
) -> None:
    for key in (None, "rk_wrong"):
        response = post(client, protobuf(tools_only(1)), key, content_type)
        status = status_of(response, 401, "unauthorized")
        assert response["Content-Type"] == content_type
        assert response["WWW-Authenticate"] == 'Bearer realm="receipts"'
        assert status.code == code_pb2.UNAUTHENTICATED
    assert count_receipts() == 0


@pytest.mark.parametrize(
    ("content_type", "coding"),
    [("text/plain", None), ("application/protobuf", None), ("application/json; charset=latin-1",
                                                             None), (PROTOBUF, "br")],
)
def test_another_media_type_or_encoding_is_415(
    client: Client, api_key: str, content_type: str, coding: str | None
) -> None:
    body = protobuf(tools_only(1)) if content_type == PROTOBUF else b"{}"
    response = post(client, body, api_key, content_type, coding)
    status_of(response, 415, "unsupported-media-type")
    expected = PROTOBUF if content_type == PROTOBUF else JSON
    assert response["Content-Type"] == expected
    assert count_receipts() == 0


def test_a_body_over_the_batch_limit_is_413(
    client: Client, api_key: str, settings: Any
) -> None:
    body = protobuf(tools_only(20))
    settings.BATCH_MAX_BYTES = len(body) - 1
    status_of(post(client, body, api_key), 413, "payload-too-large")
    assert count_receipts() == 0


def test_a_gzip_bomb_is_413_after_the_limit_not_after_inflating_it(
    client: Client, api_key: str, settings: Any
) -> None:
    bomb = gzip.compress(b"\x00" * (64 * 1024 * 1024), compresslevel=9)  # 64 MiB in ~64 KiB
    settings.BATCH_MAX_BYTES = 1024 * 1024  # the body itself is well under the limit
    assert len(bomb) < settings.BATCH_MAX_BYTES
    response = post(client, bomb, api_key, coding="gzip")
    status_of(response, 413, "payload-too-large")
    # A body that inflates to the limit exactly is read.
    exact = protobuf(tools_only(2))
    settings.BATCH_MAX_BYTES = len(exact)
    answer(post(client, gzip.compress(exact), api_key, coding="gzip"))
    assert count_receipts() == 2


def test_the_rate_limit_takes_one_token_per_receipt(
    client: Client, api_key: str, settings: Any
) -> None:
    settings.RATE_LIMITS = rate_limits("ingest=5/0.001")
    answer(post(client, protobuf(tools_only(4)), api_key))  # 4 of the 5 tokens
    response = post(client, protobuf(tools_only(2, seed=2)), api_key)
    status = status_of(response, 429, "rate-limited")
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert int(response["Retry-After"]) >= 1
    assert count_receipts() == 4


def test_get_is_405_with_allow(client: Client, api_key: str) -> None:
    response = client.get(TRACES, headers={"Authorization": f"Bearer {api_key}"})
    status_of(response, 405, "method-not-allowed")
    assert response["Allow"] == "POST"


# --- one transaction, one audit entry, the queries of a batch ----------------------------------


def test_each_export_leaves_one_audit_entry_naming_its_receipts(
    client: Client, api_key: str
) -> None:
    answer(post(client, protobuf(agent_export()), api_key))
    status_of(post(client, b"\xff", api_key), 400, "malformed-export")
    refused, stored = AuditEntry.objects.order_by("-pk")
    assert (stored.route, stored.status, stored.problem_type) == ("POST /v1/traces", 200, None)
    assert sorted(stored.receipt_ids) == sorted(r.uuid for r in Receipt.objects.all())
    assert (refused.status, refused.problem_type, refused.receipt_ids) == (
        400, f"{SITE}/problems/malformed-export", [])


@pytest.mark.parametrize("size", [1, 100])
def test_an_export_runs_the_queries_of_a_batch_whatever_its_size(
    client: Client, api_key: str, producer: Producer, size: int
) -> None:
    producer.publish(idempotency_key="first")
    body = protobuf(tools_only(size))
    response, sql = queries_of(lambda: post(client, body, api_key))
    answer(response)
    assert count_receipts() == size + 1
    assert len(sql) == pinned(TENANT, "batch"), "\n".join(sql)


def test_an_unset_status_with_an_error_type_is_a_failure_and_ok_a_success(
    client: Client, api_key: str
) -> None:
    recorder = Recorder()
    tool_call(recorder.tracer, "ok", status=StatusCode.OK)
    tool_call(recorder.tracer, "unset_but_failed", error__type="KeyError")
    answer(post(client, protobuf(recorder.export()), api_key))
    outcomes = {d["subject"]["name"]: d["outcome"] for d in documents().values()}
    assert outcomes == {"ok": "succeeded", "unset_but_failed": "failed"}


# --- the reference's examples are what the site answers -----------------------------------


def reference_examples() -> list[Any]:
    """The JSON blocks of docs/api.md's `POST /v1/traces`, in order: an export, its answer,
    the receipt it makes, an error's Status."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    start = text.index("### `POST /v1/traces`")
    section = text[start:text.index("\n### ", start + 1)]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]


def test_the_references_examples_are_what_the_site_answers(
    client: Client, api_key: str
) -> None:
    export, answered, document, error = reference_examples()
    response = post(client, json.dumps(export).encode(), api_key, JSON)
    assert response.status_code == 200
    assert json.loads(response.content) == answered
    (stored,) = documents().values()
    site_fields = {"schema", "id", "tenant", "recorded_at", "publisher", "redactions"}
    assert {k: v for k, v in stored.items() if k not in site_fields} == document
    export["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "not hex"
    response = post(client, json.dumps(export).encode(), api_key, JSON)
    assert response.status_code == 400
    assert json.loads(response.content) == error


@pytest.mark.parametrize(
    ("fault", "reason", "retry_after"),
    [
        (lambda: LogRollback("the stored tree is smaller than the signed one"),
         "log-not-signed", None),
        (lambda: OperationalError("the database went away"), "database-unavailable", "5"),
    ],
    ids=["the-log-refused", "the-database-down"],
)
def test_a_site_that_must_not_store_now_answers_503_as_otlps_status(
    client: Client, api_key: str, monkeypatch: pytest.MonkeyPatch, fault: Any, reason: str,
    retry_after: str | None,
) -> None:
    def refuse(**kwargs: Any) -> None:
        raise fault()

    monkeypatch.setattr("receiptsite.api.otlp.receipts_ingest", refuse)
    response = post(client, protobuf(tools_only(1)), api_key)
    status = status_of(response, 503, reason)
    assert status.code == code_pb2.UNAVAILABLE
    assert response.get("Retry-After") == retry_after
    assert count_receipts() == 0

"""POST /v1/traces: OpenTelemetry trace exports over OTLP/HTTP, as OpenTelemetry's exporters
send them, each tool-execution span stored as a receipt.

The body is an `ExportTraceServiceRequest` in OTLP's binary protobuf encoding
(`application/x-protobuf`) or its JSON encoding (`application/json`), perhaps gzip- (or
deflate-) encoded, read with the OpenTelemetry project's own definitions (opentelemetry-proto)
and protobuf's own JSON mapping. Which spans become receipts, and how, is
receiptsite/evidence/otel.py; storing them is ingest's one path (receipts/services.py), as a
batch: one transaction for the whole export.

The route is a tenant route like the API's (`api_route`: the bearer key, the `ingest` rate
limit, one audit entry), checked in the same order (401, 415, 413, 400), but it speaks OTLP,
not the site's JSON: its clients are OTLP exporters and collectors. So it answers OTLP's
`ExportTraceServiceResponse` (with `partial_success` for the spans it refused), and every
error as OTLP prescribes, a `google.rpc.Status` in the request's encoding, never
problem+json; the Status carries the problem's type and title (an `ErrorInfo`), so the answer
says what a problem+json one would. docs/api.md says it all for producers.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from typing import Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from google.protobuf import json_format
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from receiptsite.api.ratelimit import throttle
from receiptsite.api.reading import read_body, too_big
from receiptsite.api.routes import TenantRequest, api_route
from receiptsite.api.strictjson import BadJSON, parse_json
from receiptsite.audit.recording import in_transaction, touched
from receiptsite.evidence import otel
from receiptsite.evidence.document import DocumentInvalid
from receiptsite.middleware import DatabaseUnavailableMiddleware, mark_api
from receiptsite.problems import Problem
from receiptsite.receipts.services import (
    IdempotencyKeyReused,
    IdempotencyKeyWithdrawn,
    Ingested,
    Refusal,
    receipts_ingest,
)

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
# Content-Encoding: what OTLP's exporters send (gzip; the Python SDK's exporter also offers
# deflate, which HTTP defines as the zlib format), as zlib's window bits read it.
_CODINGS: Final = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# How many refused spans the partial success's message names one by one.
NAMED_REFUSALS: Final = 5


@mark_api
@csrf_exempt
def traces(request: HttpRequest) -> HttpResponse:
    """The route: the export stored and answered, any refusal re-encoded as OTLP's Status
    (after the audit entry has recorded it with its problem type). A database that does not
    answer is the site's one 503 problem (its middleware's), re-encoded alike."""
    try:
        response = _export(request)
    except (OperationalError, InterfaceError) as error:
        unavailable = DatabaseUnavailableMiddleware(_export).process_exception(request, error)
        assert unavailable is not None
        response = unavailable
    if response.status_code >= 400 and response.get("Content-Type") == "application/problem+json":
        return _as_status(request, response)
    return response


# Producers' exports draw from the same bucket as their receipts: one token per receipt.
@api_route("POST", tenant=True, rate={"POST": "ingest"}, own_transactions=True)
def _export(request: TenantRequest) -> HttpResponse:
    encoding = _encoding(request)
    window = _coding(request)
    body = read_body(request, settings.BATCH_MAX_BYTES)
    if window is not None:
        body = inflate(body, window, settings.BATCH_MAX_BYTES)
    export = _parsed(body, encoding)
    mapped = otel.receipts_of(export)
    if len(mapped.receipts) > settings.BATCH_MAX_ITEMS:
        raise Problem(
            413,
            "payload-too-large",
            too_big(settings.BATCH_MAX_BYTES).title,
            f"The export holds {len(mapped.receipts)} tool spans; one export stores at most "
            f"{settings.BATCH_MAX_ITEMS} receipts, as a batch does. Nothing was stored: "
            f"export smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE={settings.BATCH_MAX_ITEMS}).",
        )
    # The request took one token; each further receipt takes one, as in a batch.
    throttle("ingest", request.api_key.prefix, cost=len(mapped.receipts) - 1)
    outcomes = (
        receipts_ingest(
            api_key=request.api_key,
            payloads=[document for _, document in mapped.receipts],
            before_commit=in_transaction(request, 200),
        )
        if mapped.receipts else []
    )
    touched(request, [o.receipt.uuid for o in outcomes if isinstance(o, Ingested)])
    refused = [*mapped.refused, *(
        (ref, _refusal(outcome))
        for (ref, _), outcome in zip(mapped.receipts, outcomes, strict=True)
        if not isinstance(outcome, Ingested)
    )]
    answer = ExportTraceServiceResponse()
    message = partial_success_message(mapped, refused)
    if message is not None:
        answer.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=len(refused), error_message=message)
        )
    return encoded(answer, encoding, 200)


# --- reading the export ------------------------------------------------------------------


def _encoding(request: HttpRequest) -> str:
    """The export's encoding from its Content-Type (OTLP's two); else 415."""
    charset = request.content_params.get("charset") if request.content_params else None
    if request.content_type == PROTOBUF or (
        request.content_type == JSON and (charset is None or charset.lower() in ("utf-8", "utf8"))
    ):
        return request.content_type
    raise Problem(
        415,
        "unsupported-media-type",
        "The export must be OTLP protobuf or JSON",
        f"Send an OTLP ExportTraceServiceRequest as `Content-Type: {PROTOBUF}` or "
        f"`Content-Type: {JSON}` (UTF-8).",
    )


def _coding(request: HttpRequest) -> int | None:
    """zlib's window bits for the body's Content-Encoding, None for none; else 415."""
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in _CODINGS:
        return _CODINGS[coding]
    raise Problem(
        415,
        "unsupported-media-type",
        "The export's content encoding is not supported",
        "Send the export as it is, or with `Content-Encoding: gzip` (or deflate).",
    )


def inflate(data: bytes, window: int, limit: int) -> bytes:
    """The decompressed body, never more than `limit` bytes of it: zlib is asked for at most
    one byte past what is left, so a small body that would inflate to gigabytes (a
    "gzip bomb") is refused (413) after `limit` bytes of work. A stream that is not gzip (or
    zlib), or is cut short, is a 400. Several gzip members, one after another, are one body,
    as gzip itself reads them."""
    out = bytearray()
    rest = data
    try:
        while True:
            stream = zlib.decompressobj(window)
            pending = rest
            while pending and not stream.eof:
                out += stream.decompress(pending, limit + 1 - len(out))
                if len(out) > limit:
                    raise too_big(limit)
                pending = stream.unconsumed_tail
            if not stream.eof:
                raise _malformed("The body is cut short: its compressed stream does not end.")
            rest = stream.unused_data
            if not rest:
                return bytes(out)
    except zlib.error as error:
        raise _malformed(f"The body is not a valid compressed stream ({error}).") from None


def _parsed(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    """The export, parsed by opentelemetry-proto's definitions; 400 when it is not one."""
    export = ExportTraceServiceRequest()
    if encoding == PROTOBUF:
        try:
            export.ParseFromString(body)
        except DecodeError as error:
            raise _malformed(f"The body is not an OTLP protobuf export ({error}).") from None
        return export
    try:
        payload = parse_json(body)
    except BadJSON as error:
        raise _malformed(error.message) from None
    if not isinstance(payload, dict):
        raise _malformed("An OTLP JSON export is a JSON object.")
    _ids_as_base64(payload)
    try:
        # OTLP/JSON receivers must ignore fields they do not know (newer OTLP versions).
        json_format.ParseDict(payload, export, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as error:
        raise _malformed(f"The body is not an OTLP JSON export: {error}") from None
    return export


# OTLP's JSON writes these bytes fields as hex, where protobuf's own JSON mapping writes
# base64: the one deviation its JSON encoding makes (besides integer enums, which protobuf's
# mapping reads too). Both spellings of a name, as json_format accepts both.
_SPAN_IDS: Final = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")
_LINK_IDS: Final = ("traceId", "trace_id", "spanId", "span_id")
_HEX: Final = re.compile(r"(?:[0-9A-Fa-f]{2})*")


def _ids_as_base64(export: dict[str, Any]) -> None:
    """Rewrite, in place, the hex ids of an OTLP JSON export as protobuf's JSON mapping
    writes bytes, so that json_format reads the export as OTLP means it; 400 for an id that
    is not hex. What is not shaped as an export is left for json_format to refuse."""
    for i, resource_spans in _items(export, "resourceSpans", "resource_spans"):
        for j, scope_spans in _items(resource_spans, "scopeSpans", "scope_spans"):
            for k, span in _items(scope_spans, "spans"):
                at = f"/resourceSpans/{i}/scopeSpans/{j}/spans/{k}"
                _rewrite(span, _SPAN_IDS, at)
                for n, link in _items(span, "links"):
                    _rewrite(link, _LINK_IDS, f"{at}/links/{n}")


def _items(obj: Any, *names: str) -> list[tuple[int, dict[str, Any]]]:
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else None
        if isinstance(value, list):
            return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]
    return []


def _rewrite(obj: dict[str, Any], names: tuple[str, ...], at: str) -> None:
    for name in names:
        value = obj.get(name)
        if not isinstance(value, str):
            continue
        if not _HEX.fullmatch(value):
            raise _malformed(f"{at}/{name} must be a hex-encoded id, as OTLP's JSON writes ids.",
                             field=f"{at}/{name}")
        obj[name] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _malformed(detail: str, field: str = "") -> Problem:
    """400: the body is not an export. `field` is the JSON Pointer of what is wrong, where one
    can be named."""
    return Problem(400, "malformed-export", "The body is not an OTLP trace export", detail,
                   errors=[{"field": field, "message": detail}])


# --- answering ---------------------------------------------------------------------------


def _refusal(outcome: Refusal) -> str:
    """Why ingest did not store a tool span's receipt, in a few plain words (never its
    values: validation's messages name fields, and never echo a secret)."""
    if isinstance(outcome, DocumentInvalid):
        fields = "; ".join(f"{e['field'] or '(the document)'} {e['message']}"
                           for e in outcome.errors)
        return f"its receipt is not valid receipt/v1: {fields}"
    if isinstance(outcome, IdempotencyKeyWithdrawn):
        return "its receipt was withdrawn, and is not published again"
    assert isinstance(outcome, IdempotencyKeyReused)
    return ("a different receipt was already stored for this span (its idempotency key "
            f"{otel.KEY_PREFIX}<trace id>/<span id> is taken)")


def partial_success_message(
    mapped: otel.Mapped, refused: list[tuple[otel.SpanRef, str]]
) -> str | None:
    """What `partial_success.error_message` says, or None when the export was taken whole
    (every span a tool span, each stored or replayed). Skipped spans (not tool executions)
    are not rejected: OTLP lets a server that accepts everything warn in this message, with
    `rejected_spans` 0."""
    parts = []
    tool_spans = mapped.spans - mapped.skipped
    if refused:
        named = "; ".join(f"{ref}: {reason}" for ref, reason in refused[:NAMED_REFUSALS])
        more = len(refused) - NAMED_REFUSALS
        parts.append(
            f"{len(refused)} of {tool_spans} tool span(s) were refused and made no receipt: "
            f"{named}" + (f"; and {more} more." if more > 0 else ".")
        )
    if mapped.skipped:
        parts.append(
            f"{mapped.skipped} of {mapped.spans} span(s) were skipped: they are not tool "
            f"executions ({otel.OPERATION_NAME} is not {otel.EXECUTE_TOOL}), so they make no "
            "receipt; they are not counted as rejected."
        )
    return " ".join(parts) or None


def encoded(message: Message, encoding: str, status: int) -> HttpResponse:
    """A protobuf message as OTLP answers: in the request's encoding (JSON for a request in
    neither of OTLP's)."""
    if encoding == PROTOBUF:
        return HttpResponse(message.SerializeToString(), status=status, content_type=PROTOBUF)
    text = json_format.MessageToJson(message, indent=None, ensure_ascii=False)
    return HttpResponse(text.encode("utf-8"), status=status, content_type=JSON)


# The problem's HTTP status as google.rpc.Code (OTLP leaves Status.code to the server; this is
# the mapping google/rpc/code.proto gives beside each code).
_CODES: Final = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.INVALID_ARGUMENT,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


def _as_status(request: HttpRequest, problem: HttpResponse) -> HttpResponse:
    """A problem+json answer as OTLP's error body: a google.rpc.Status whose message is the
    problem's detail, with an ErrorInfo (the problem's slug as its reason, its `type` and
    `title` in its metadata) and, for a 400, a BadRequest (naming the field where it can), as
    OTLP asks of bad data. The answer's status and headers (Retry-After, WWW-Authenticate,
    Allow) stay."""
    body = json.loads(problem.content)
    status = status_pb2.Status(
        code=_CODES.get(problem.status_code, code_pb2.INTERNAL), message=body["detail"]
    )
    info = error_details_pb2.ErrorInfo(
        reason=body["type"].rsplit("/", 1)[-1].upper().replace("-", "_"),
        domain=urlsplit(settings.SITE_URL).netloc,
        metadata={"type": body["type"], "title": body["title"]},
    )
    details: list[Message] = [info]
    if problem.status_code == 400:
        details.append(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=e["field"], description=e["message"])
            for e in body.get("errors", [{"field": "", "message": body["detail"]}])
        ]))
    for detail in details:
        packed = AnyMessage()
        packed.Pack(detail)
        status.details.append(packed)
    encoding = request.content_type if request.content_type in (PROTOBUF, JSON) else JSON
    response = encoded(status, encoding, problem.status_code)
    for name, value in problem.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            response[name] = value
    return response

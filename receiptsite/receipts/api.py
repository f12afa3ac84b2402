"""The JSON routes. Function views; a decorator authenticates the key, one helper makes every
error (receiptsite.problems), model methods make every answer."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core import signing as django_signing
from django.core.exceptions import RequestDataTooBig
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from receiptsite.integrity import keys as ed25519
from receiptsite.integrity import note
from receiptsite.integrity.encoding import b64
from receiptsite.problems import problem
from receiptsite.receipts import log, signing
from receiptsite.receipts.document import BadJSON, DocumentInvalid, parse_json, parse_rfc3339
from receiptsite.receipts.http import (
    api_key_required,
    capability,
    client_address,
    methods,
    parse_receipt_id,
    public_json,
    rate_limited,
    throttle,
)
from receiptsite.receipts.models import Receipt, SigningKey, format_timestamp
from receiptsite.receipts.openapi import OPENAPI
from receiptsite.receipts.services import IdempotencyKeyReused, Ingested, receipt_ingest
from receiptsite.receipts.verification import verify as verification

PHASES = ("start", "end", "completion", "confirmation", "handoff")
OUTCOMES = ("succeeded", "failed", "timed_out", "uncertain")


def _json(body: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, safe=False, json_dumps_params={"ensure_ascii": False})


def _by_key(request: HttpRequest) -> str:
    return str(request.api_key.prefix)  # type: ignore[attr-defined]


def _by_address(request: HttpRequest) -> str:
    return client_address(request)


# --- reading a body ----------------------------------------------------------------------


def _too_big(limit: int) -> JsonResponse:
    return problem(
        413,
        "payload-too-large",
        "The body is too large",
        f"The body is over the limit of {limit} bytes.",
    )


def _read_json(request: HttpRequest, limit: int) -> object | JsonResponse:
    """The parsed body, or the problem answer, checked in SPEC's order: 415, 413, 400."""
    charset = request.content_params.get("charset") if request.content_params else None
    if request.content_type != "application/json" or (
        charset is not None and charset.lower() not in ("utf-8", "utf8")
    ):
        return problem(
            415,
            "unsupported-media-type",
            "The body must be JSON",
            "Send the body as `Content-Type: application/json` (UTF-8).",
        )
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return _too_big(limit)
    try:
        body = request.body
    except RequestDataTooBig:
        return _too_big(limit)
    if len(body) > limit:
        return _too_big(limit)
    try:
        return parse_json(body)
    except BadJSON as error:
        return problem(400, "malformed-json", "The body is not valid JSON", error.message)


# --- answers for one receipt ---------------------------------------------------------------


def _invalid(error: DocumentInvalid) -> JsonResponse:
    fields = ", ".join(e["field"] or "(the document)" for e in error.errors)
    return problem(
        422,
        "validation-error",
        "The receipt is not valid",
        f"{len(error.errors)} field(s) are not valid: {fields}",
        errors=error.errors,
    )


def _reused(error: IdempotencyKeyReused) -> JsonResponse:
    return problem(
        422,
        "idempotency-key-reused",
        "The idempotency key names another receipt",
        "This idempotency key already names a receipt stored from a different request. "
        "That receipt is unchanged; use a new key for a new receipt.",
        id=error.receipt.uuid,
        url=error.receipt.url,
    )


def _ingest_one(request: HttpRequest, payload: object) -> Ingested | JsonResponse:
    """One receipt stored or replayed, or the problem answer a single POST would give."""
    try:
        return receipt_ingest(api_key=request.api_key, payload=payload)  # type: ignore[attr-defined]
    except DocumentInvalid as error:
        return _invalid(error)
    except IdempotencyKeyReused as error:
        return _reused(error)


# --- producers and tenant readers ------------------------------------------------------------


@csrf_exempt  # bearer keys, no cookies: a cross-site request cannot carry a key
@methods("GET", "POST")
@api_key_required
def receipts(request: HttpRequest) -> HttpResponse:
    # Producers' writes and tenant reads draw from different buckets of the same key.
    if request.method == "POST":
        return throttle(request, "ingest", _by_key(request)) or _create(request)
    return throttle(request, "read", _by_key(request)) or _list(request)


def _create(request: HttpRequest) -> HttpResponse:
    payload = _read_json(request, settings.RECEIPT_MAX_BYTES)
    if isinstance(payload, HttpResponse):
        return payload
    outcome = _ingest_one(request, payload)
    if isinstance(outcome, HttpResponse):
        return outcome
    answer = outcome.receipt.ingest_answer()
    response = _json(answer, status=201)
    response["Location"] = answer["url"]
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@csrf_exempt  # as above
@methods("POST")
@api_key_required
@rate_limited("ingest", _by_key)
def receipts_batch(request: HttpRequest) -> HttpResponse:
    payload = _read_json(request, settings.BATCH_MAX_BYTES)
    if isinstance(payload, HttpResponse):
        return payload
    items = payload.get("receipts") if isinstance(payload, dict) else None
    shape_ok = (
        isinstance(payload, dict)
        and set(payload) == {"receipts"}
        and isinstance(items, list)
        and 1 <= len(items) <= settings.BATCH_MAX_ITEMS
    )
    if not shape_ok or not isinstance(items, list):
        return problem(
            422,
            "validation-error",
            "The batch is not valid",
            f'A batch is {{"receipts": [...]}} with 1 to {settings.BATCH_MAX_ITEMS} receipts.',
            errors=[{"field": "/receipts", "message": "must be a list of 1 to "
                     f"{settings.BATCH_MAX_ITEMS} receipts, the only key of the body"}],
        )
    # The ingest limit counts receipts: the request took one token, each further item takes one.
    limited = throttle(request, "ingest", _by_key(request), cost=len(items) - 1)
    if limited:
        return limited
    results = []
    for item in items:
        size = len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode())
        if size > settings.RECEIPT_MAX_BYTES:
            results.append(json.loads(_too_big(settings.RECEIPT_MAX_BYTES).content))
            continue
        outcome = _ingest_one(request, item)
        if isinstance(outcome, HttpResponse):
            results.append(json.loads(outcome.content))
        else:
            answer = outcome.receipt.ingest_answer()
            results.append({**answer, "status": 201, "replayed": outcome.replayed})
    return _json({"results": results})


def _bad_parameter(name: str, message: str) -> JsonResponse:
    return problem(
        400,
        "bad-query-parameter",
        "A query parameter is not valid",
        f"`{name}` {message}.",
        errors=[{"field": name, "message": message}],
    )


def _whole_number(text: str) -> int | None:
    """A query parameter of ASCII digits as an int, else None. str.isdigit() alone also takes
    "²" and "٣" (int() then fails or reads a non-ASCII digit), and int() refuses over 4,300
    digits: either was a 500."""
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        return None
    return int(text)


CURSOR_SALT = "receiptsite.receipts.cursor"


def _list(request: HttpRequest) -> HttpResponse:
    params = request.GET
    query = Receipt.objects.filter(tenant_id=request.api_key.tenant_id)  # type: ignore[attr-defined]
    for name, column in (
        ("workflow_id", "workflow_id"),
        ("session_id", "session_id"),
        ("subject_name", "subject_name"),
    ):
        if params.get(name):
            query = query.filter(**{column: params[name]})
    for name, allowed in (("phase", PHASES), ("outcome", OUTCOMES)):
        if params.get(name):
            if params[name] not in allowed:
                return _bad_parameter(name, f"must be one of {', '.join(allowed)}")
            query = query.filter(**{name: params[name]})
    for name, lookup in (("since", "recorded_at__gte"), ("until", "recorded_at__lt")):
        if params.get(name):
            try:
                # An unencoded "+" in a query string arrives as a space: take it back.
                when = parse_rfc3339(params[name].replace(" ", "+"))
                query = query.filter(**{lookup: when})
            except ValueError:
                return _bad_parameter(name, "must be an RFC 3339 date-time with an offset")
    limit = _whole_number(params.get("limit") or "50")
    if limit is None or not 1 <= limit <= 200:
        return _bad_parameter("limit", "must be a whole number from 1 to 200")
    if params.get("cursor"):
        try:
            after = int(django_signing.loads(params["cursor"], salt=CURSOR_SALT))
        except (django_signing.BadSignature, ValueError, TypeError):
            return _bad_parameter("cursor", "is not a cursor this site handed out")
        query = query.filter(pk__lt=after)
    rows = list(query.select_related("log_entry").order_by("-pk")[: limit + 1])
    page = rows[:limit]
    next_cursor = (
        django_signing.dumps(page[-1].pk, salt=CURSOR_SALT) if len(rows) > limit else None
    )
    return _json({"receipts": [r.summary() for r in page], "next_cursor": next_cursor})


def _not_found() -> JsonResponse:
    return problem(404, "not-found", "Not found", "There is no receipt with this id.")


@capability
@methods("GET")
@api_key_required
@rate_limited("read", _by_key)
def receipt_detail(request: HttpRequest, receipt_id: str) -> HttpResponse:
    public_id = parse_receipt_id(receipt_id)
    receipt = (
        Receipt.objects.select_related("log_entry")
        .filter(public_id=public_id, tenant_id=request.api_key.tenant_id)  # type: ignore[attr-defined]
        .first()
        if public_id
        else None
    )
    if receipt is None:
        return _not_found()
    document = receipt.document()
    return _json({**receipt.summary(document), "document": document})


# --- public, for anyone ----------------------------------------------------------------------


@capability
@public_json
@methods("GET")
@rate_limited("read", _by_address)
def verify(request: HttpRequest, receipt_id: str) -> HttpResponse:
    public_id = parse_receipt_id(receipt_id)
    receipt = (
        Receipt.objects.for_verification().filter(public_id=public_id).first()
        if public_id
        else None
    )
    if receipt is None:
        return _not_found()
    return _json(verification(receipt))


@public_json
@methods("GET")
def keys(request: HttpRequest) -> HttpResponse:
    signing.active_key()  # records a rotated key before it is listed
    origin = log.head().origin
    listed = []
    verifier_keys = []
    active_vkey = None
    for key in SigningKey.objects.order_by("created_at", "pk"):
        public = bytes(key.public_key)
        listed.append(
            {
                **ed25519.jwk(public),
                "kid": key.kid,
                "alg": "EdDSA",
                "use": "sig",
                "status": key.status,
                "created_at": format_timestamp(key.created_at),
                "retired_at": format_timestamp(key.retired_at) if key.retired_at else None,
                "pem": ed25519.public_pem(public),
            }
        )
        vkey = note.verifier_key(origin, public)
        verifier_keys.append(vkey)
        if key.status == SigningKey.ACTIVE:
            active_vkey = vkey
    return _json(
        {
            "keys": listed,
            "log": {"origin": origin, "verifier_key": active_vkey, "verifier_keys": verifier_keys},
        }
    )


def _log_refused(error: log.LogRollback) -> JsonResponse:
    return problem(
        503,
        "log-not-signed",
        "The transparency log cannot be signed",
        f"The site refuses to sign its log: {error}.",
    )


@public_json
@methods("GET")
def checkpoint(request: HttpRequest) -> HttpResponse:
    try:
        signed = log.signed_head()
    except log.LogRollback as error:
        return _log_refused(error)
    response = HttpResponse(signed.note, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


@public_json
@methods("GET")
def consistency(request: HttpRequest) -> HttpResponse:
    try:
        signed = log.signed_head()
    except log.LogRollback as error:
        return _log_refused(error)
    values = {}
    for name in ("first", "second"):
        number = _whole_number(request.GET.get(name, ""))
        if number is None:
            return _bad_parameter(name, "must be a whole number")
        values[name] = number
    first, second = values["first"], values["second"]
    if not 1 <= first <= second <= signed.size:
        return _bad_parameter(
            "first" if first < 1 or first > second else "second",
            f"must satisfy 1 <= first <= second <= {signed.size} (the signed tree size)",
        )
    proof = log.consistency_proof(first, second)
    return _json({"first": first, "second": second, "proof": [b64(p) for p in proof]})


@public_json
@methods("GET")
def healthz(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        log.guard(log.head())
    except log.LogRollback as error:
        return _log_refused(error)
    return _json({"status": "ok"})


@public_json
@methods("GET")
def openapi(request: HttpRequest) -> HttpResponse:
    return _json(OPENAPI)

"""The JSON routes: function views, each declared by one `@api_route` (its methods, whether
it needs a tenant's key, its rate limit, its headers). Errors are raised as Problem and
answered in one place (receiptsite.api.routes); answers are made by model methods."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.conf import settings
from django.core import signing as django_signing
from django.core.exceptions import RequestDataTooBig
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict

from receiptsite.api.routes import TenantRequest, api_route, receipt_not_found, throttle
from receiptsite.api.strictjson import BadJSON, parse_json
from receiptsite.audit.recording import in_transaction
from receiptsite.evidence.declaration import LIST_FILTERS
from receiptsite.evidence.document import DocumentInvalid
from receiptsite.evidence.kinds import Enum
from receiptsite.evidence.openapi import OPENAPI
from receiptsite.integrity import keys as ed25519
from receiptsite.integrity import note
from receiptsite.integrity.encoding import b64
from receiptsite.ledger import keyring, log
from receiptsite.ledger.verification import verification_json
from receiptsite.lib.rfc3339 import parse_rfc3339
from receiptsite.problems import Problem
from receiptsite.receipts.models import Receipt, SigningKey, format_timestamp
from receiptsite.receipts.services import (
    BeforeCommit,
    IdempotencyKeyReused,
    Ingested,
    receipt_ingest,
    receipts_ingest,
)
from receiptsite.withdrawal import withdrawals as withdrawal


def _json(body: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, safe=False, json_dumps_params={"ensure_ascii": False})


# --- reading a body ----------------------------------------------------------------------


def _too_big(limit: int) -> Problem:
    return Problem(
        413,
        "payload-too-large",
        "The body is too large",
        f"The body is over the limit of {limit} bytes.",
    )


def read_json(request: HttpRequest, limit: int) -> object:
    """The parsed body, checked in the contract's order: 415, 413, 400 (each a Problem)."""
    charset = request.content_params.get("charset") if request.content_params else None
    if request.content_type != "application/json" or (
        charset is not None and charset.lower() not in ("utf-8", "utf8")
    ):
        raise Problem(
            415,
            "unsupported-media-type",
            "The body must be JSON",
            "Send the body as `Content-Type: application/json` (UTF-8).",
        )
    if not request.META.get("CONTENT_LENGTH") and request.META.get("wsgi.input_terminated"):
        # A body without Content-Length (`Transfer-Encoding: chunked`): Django reads
        # CONTENT_LENGTH bytes only, so it would see none. The server (gunicorn) ends the
        # stream where the body ends; read at most one byte past the limit, so that an
        # oversize body is refused without being read whole.
        body = _read_to_end(request.META["wsgi.input"], limit + 1)
    else:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise _too_big(limit)
        try:
            body = request.body
        except RequestDataTooBig:
            raise _too_big(limit) from None
    if len(body) > limit:
        raise _too_big(limit)
    try:
        return parse_json(body)
    except BadJSON as error:
        raise Problem(400, "malformed-json", "The body is not valid JSON", error.message) from None


def _read_to_end(stream: Any, most: int) -> bytes:
    """Up to `most` bytes of a WSGI input stream that the server terminates."""
    chunks: list[bytes] = []
    left = most
    while left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- storing receipts ----------------------------------------------------------------------


def _refusal(error: DocumentInvalid | IdempotencyKeyReused) -> Problem:
    """The Problem a single POST answers for an item it does not store."""
    if isinstance(error, DocumentInvalid):
        fields = ", ".join(e["field"] or "(the document)" for e in error.errors)
        return Problem(
            422,
            "validation-error",
            "The receipt is not valid",
            f"{len(error.errors)} field(s) are not valid: {fields}",
            errors=error.errors,
        )
    return Problem(
        422,
        "idempotency-key-reused",
        "The idempotency key names another receipt",
        "This idempotency key already names a receipt stored from a different request. "
        "That receipt is unchanged; use a new key for a new receipt.",
        id=error.receipt.uuid,
        url=error.receipt.url,
    )


def _ingest(
    request: TenantRequest, payload: object, before_commit: BeforeCommit | None = None
) -> Ingested:
    """One receipt stored or replayed; the Problem a single POST would answer otherwise."""
    try:
        return receipt_ingest(
            api_key=request.api_key, payload=payload, before_commit=before_commit
        )
    except (DocumentInvalid, IdempotencyKeyReused) as error:
        raise _refusal(error) from None


# Producers' writes and tenant reads draw from different buckets of the same key.
@api_route(
    "GET", "POST", tenant=True, rate={"POST": "ingest", "GET": "read"}, own_transactions=True
)
def receipts(request: TenantRequest) -> HttpResponse:
    return _create(request) if request.method == "POST" else _list(request)


def _create(request: TenantRequest) -> HttpResponse:
    outcome = _ingest(
        request, read_json(request, settings.RECEIPT_MAX_BYTES), in_transaction(request, 201)
    )
    answer = outcome.receipt.ingest_answer()
    response = _json(answer, status=201)
    response["Location"] = answer["url"]
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def _body_size(item: object) -> int:
    # surrogatepass: an item holding a lone surrogate still has a size; validation then names
    # the surrogate in its own problem.
    text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


@api_route("POST", tenant=True, rate={"POST": "ingest"}, own_transactions=True)
def receipts_batch(request: TenantRequest) -> HttpResponse:
    payload = read_json(request, settings.BATCH_MAX_BYTES)
    items = payload.get("receipts") if isinstance(payload, dict) else None
    if not (
        isinstance(payload, dict)
        and set(payload) == {"receipts"}
        and isinstance(items, list)
        and 1 <= len(items) <= settings.BATCH_MAX_ITEMS
    ):
        raise Problem(
            422,
            "validation-error",
            "The batch is not valid",
            f'A batch is {{"receipts": [...]}} with 1 to {settings.BATCH_MAX_ITEMS} receipts.',
            errors=[{"field": "/receipts", "message": "must be a list of 1 to "
                     f"{settings.BATCH_MAX_ITEMS} receipts, the only key of the body"}],
        )
    # The ingest limit counts receipts: the request took one token, each further item takes one.
    throttle("ingest", request.api_key.prefix, cost=len(items) - 1)
    results: list[dict[str, Any] | None] = [
        _too_big(settings.RECEIPT_MAX_BYTES).body()
        if _body_size(item) > settings.RECEIPT_MAX_BYTES else None
        for item in items
    ]
    wanted = [i for i, result in enumerate(results) if result is None]
    try:
        outcomes = (
            receipts_ingest(
                api_key=request.api_key,
                payloads=[items[i] for i in wanted],
                before_commit=in_transaction(request, 200),
            )
            if wanted else []
        )
    except Problem:  # the site must not sign now (503): each item answers as if alone
        for i in wanted:
            try:
                results[i] = _answer(_ingest(request, items[i]))
            except Problem as refused:
                results[i] = refused.body()
        return _json({"results": results})
    for i, outcome in zip(wanted, outcomes, strict=True):
        results[i] = _refusal(outcome).body() if isinstance(outcome, Exception) else _answer(
            outcome
        )
    return _json({"results": results})


def _answer(outcome: Ingested) -> dict[str, Any]:
    return {**outcome.receipt.ingest_answer(), "status": 201, "replayed": outcome.replayed}


# --- reading the tenant's receipts -------------------------------------------------------------


def _bad_parameter(name: str, message: str) -> Problem:
    return Problem(
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


def refuse_nul(params: QueryDict) -> None:
    """A tenant list's parameters never hold U+0000 (the databases cannot compare it)."""
    for name, values in params.lists():
        if any("\x00" in value for value in values):
            raise _bad_parameter(name, "must not contain U+0000")


def keyset_page(
    query: QuerySet[Any], params: QueryDict, *, at: str, salt: str
) -> tuple[list[Any], str | None]:
    """The rest of a tenant list, as every one reads it: `since` (inclusive) and `until`
    (exclusive) on the timestamp field `at`, `limit` 1..200 (default 50), and a `cursor`
    signed with `salt`; the page, newest first by primary key, and the next page's cursor."""
    windowed = False
    for name, lookup in (("since", f"{at}__gte"), ("until", f"{at}__lt")):
        text = params.get(name)
        if text:
            windowed = True
            try:
                # An unencoded "+" in a query string arrives as a space: take it back.
                when = parse_rfc3339(text.replace(" ", "+"))
            except ValueError:
                raise _bad_parameter(name, "must be an RFC 3339 date-time with an offset") from None
            query = query.filter(**{lookup: when})
    limit = _whole_number(params.get("limit") or "50")
    if limit is None or not 1 <= limit <= 200:
        raise _bad_parameter("limit", "must be a whole number from 1 to 200")
    cursor = params.get("cursor")
    if cursor:
        try:
            after = int(django_signing.loads(cursor, salt=salt))
        except (django_signing.BadSignature, ValueError, TypeError):
            raise _bad_parameter("cursor", "is not a cursor this site handed out") from None
        query = query.filter(pk__lt=after)
    if windowed:
        # The page's keys first, newest first by `pk + 0`: the same order, but one the primary
        # key's index cannot give, so that PostgreSQL finds the window's rows by the
        # `(tenant, at)` index and sorts only their keys, instead of walking the primary key
        # back from the newest row and filtering on `at` (a window far in the past read nearly
        # every row: 8 s at 10^6 receipts, bench/README.md). Then those rows, whole.
        keys = query.order_by((F("pk") + 0).desc()).values("pk")[: limit + 1]
        query = query.filter(pk__in=keys)
    rows = list(query.order_by("-pk")[: limit + 1])
    page = rows[:limit]
    next_cursor = django_signing.dumps(page[-1].pk, salt=salt) if len(rows) > limit else None
    return page, next_cursor


def _list(request: TenantRequest) -> HttpResponse:
    params = request.GET
    refuse_nul(params)
    query = Receipt.objects.filter(tenant_id=request.api_key.tenant_id)
    for column in LIST_FILTERS:
        wanted = params.get(column.name)
        if not wanted:
            continue  # an empty parameter counts as absent
        if isinstance(column.kind, Enum) and wanted not in column.kind.choices:
            raise _bad_parameter(column.name, f"must be one of {', '.join(column.kind.choices)}")
        query = query.filter(**{column.name: wanted})
    page, next_cursor = keyset_page(
        query.select_related("log_entry"), params, at="recorded_at", salt=CURSOR_SALT
    )
    return _json({"receipts": withdrawal.summaries(page), "next_cursor": next_cursor})


@api_route("GET", tenant=True, capability=True, rate={"GET": "read"})
def receipt_detail(request: TenantRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = Receipt.objects.verifiable(receipt_id, tenant_id=request.api_key.tenant_id)
    if receipt is None:
        raise receipt_not_found()
    if (found := withdrawal.withdrawn(receipt)) is not None:
        return _json(withdrawal.summary(receipt, found.withdrawal))  # no document: erased
    document = receipt.document()
    return _json({**receipt.summary(document), "document": document})


@api_route("POST", tenant=True, capability=True, rate={"POST": "ingest"})
def receipt_withdrawal(request: TenantRequest, receipt_id: uuid.UUID) -> HttpResponse:
    """Withdraw one of the tenant's receipts (withdrawal/withdrawals.py); a second withdrawal
    replays the first answer."""
    payload = read_json(request, withdrawal.MAX_BYTES)
    body = withdrawal.parse(payload)
    receipt = Receipt.objects.verifiable(receipt_id, tenant_id=request.api_key.tenant_id)
    if receipt is None:
        raise receipt_not_found()
    record, replayed = withdrawal.receipt_withdraw(
        receipt=receipt, reason=body["reason"], note=body.get("note", ""),
        api_key=request.api_key,
    )
    response = _json(withdrawal.answer(record), status=201)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


# --- public, for anyone ----------------------------------------------------------------------


@api_route("GET", public=True, capability=True, rate={"GET": "read"})
def receipt_verification(request: HttpRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = Receipt.objects.verifiable(receipt_id)
    if receipt is None:
        raise receipt_not_found()
    body, status = verification_answer(receipt)
    return _json(body, status=status)


def verification_answer(receipt: Receipt) -> tuple[dict[str, Any], int]:
    """What the verify route answers for a receipt (the offline bundle holds the same): the
    verification JSON, or a withdrawn receipt's 410 answer."""
    if (found := withdrawal.withdrawn(receipt)) is not None:
        return withdrawal.verification(receipt, found), 410
    return verification_json(receipt), 200


@api_route("GET", public=True)
def keys_document(request: HttpRequest) -> HttpResponse:
    return _json(keys_json())


def keys_json() -> dict[str, Any]:
    """The keys document (`/.well-known/receipt-keys.json`; the offline bundle holds it too)."""
    # The keys as recorded: a read records nothing, so a key rotated in is listed once a write
    # path (an ingest, `signcheckpoint`, `migrate`) has recorded it and signed with it.
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
                # Only a compromised key has it (SPEC, "Key compromise"): from when on
                # nothing it signed counts.
                **(
                    {"compromised_at": format_timestamp(key.compromised_at)}
                    if key.status == SigningKey.COMPROMISED and key.compromised_at
                    else {}
                ),
            }
        )
        vkey = note.verifier_key(origin, public)
        verifier_keys.append(vkey)
        if key.status == SigningKey.ACTIVE:
            active_vkey = vkey
    return {
        "keys": listed,
        "log": {"origin": origin, "verifier_key": active_vkey, "verifier_keys": verifier_keys},
    }


@api_route("GET", public=True)
def checkpoint(request: HttpRequest) -> HttpResponse:
    # The latest checkpoint stored by a write path; serving it signs and writes nothing.
    signed = log.published()
    response = HttpResponse(signed.note, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


@api_route("GET", public=True)
def consistency(request: HttpRequest) -> HttpResponse:
    signed = log.published()
    values = {}
    for name in ("first", "second"):
        number = _whole_number(request.GET.get(name, ""))
        if number is None:
            raise _bad_parameter(name, "must be a whole number")
        values[name] = number
    first, second = values["first"], values["second"]
    if not 1 <= first <= second <= signed.size:
        raise _bad_parameter(
            "first" if first < 1 or first > second else "second",
            f"must satisfy 1 <= first <= second <= {signed.size} (the signed tree size)",
        )
    proof = log.consistency_proof(first, second)
    return _json({"first": first, "second": second, "proof": [b64(p) for p in proof]})


@api_route("GET", public=True)
def healthz(request: HttpRequest) -> HttpResponse:
    # Ok only when the site could answer everything: the database answers (a query below), the
    # log is sound and has a signed checkpoint, and the site has a key it may sign with.
    # Otherwise the Problem raised (log-not-signed, cannot-sign) is the 503. The key first:
    # after `compromisekey`, until the restart, that is what the operator has to fix.
    keyring.check_usable()
    log.published()
    return _json({"status": "ok"})


@api_route("GET", public=True)
def openapi(request: HttpRequest) -> HttpResponse:
    return _json(OPENAPI)

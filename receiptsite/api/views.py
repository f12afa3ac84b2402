"""The JSON routes: function views, each declared by one `@api_route` (its methods, whether
it needs a tenant's key, its rate limit, its headers). Errors are raised as Problem and
answered in one place (receiptsite.api.routes); answers are made by model methods."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import get_conditional_response

from receiptsite.api.ratelimit import throttle
from receiptsite.api.reading import (
    bad_parameter,
    keyset_page,
    read_json,
    refuse_nul,
    too_big,
    whole_number,
)
from receiptsite.api.routes import TenantRequest, api_route, json_response
from receiptsite.audit.recording import in_transaction, touched
from receiptsite.capability import receipt_not_found
from receiptsite.evidence.declaration import LIST_FILTERS
from receiptsite.evidence.document import DocumentInvalid
from receiptsite.evidence.kinds import Enum
from receiptsite.evidence.openapi import OPENAPI
from receiptsite.integrity import tiles
from receiptsite.integrity.encoding import b64
from receiptsite.ledger import keyring, log, verification, witnesses
from receiptsite.ledger import tiles as log_tiles
from receiptsite.ledger.keys_document import ended_json, keys_document_json
from receiptsite.middleware import DATABASE_ERRORS, database_unavailable
from receiptsite.problems import Problem, withdrawn_key
from receiptsite.receipts.models import Receipt, format_timestamp
from receiptsite.receipts.services import (
    BeforeCommit,
    IdempotencyKeyReused,
    IdempotencyKeyWithdrawn,
    Ingested,
    Refusal,
    receipt_ingest,
    receipts_ingest,
)
from receiptsite.withdrawal import withdrawals as withdrawal

# --- storing receipts ----------------------------------------------------------------------


def _refusal(error: Refusal) -> Problem:
    """The Problem a single POST answers for an item it does not store."""
    if isinstance(error, IdempotencyKeyWithdrawn):
        return withdrawn_key(receipt_id=error.receipt.uuid, url=error.receipt.url)
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
    except (DocumentInvalid, IdempotencyKeyReused, IdempotencyKeyWithdrawn) as error:
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
    touched(request, [answer["id"]])
    response = json_response(answer, status=201)
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
        too_big(settings.RECEIPT_MAX_BYTES).body()
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
        touched(request, [r["id"] for r in results if r is not None and r["status"] == 201])
        return json_response({"results": results})
    touched(request, [o.receipt.uuid for o in outcomes if isinstance(o, Ingested)])
    for i, outcome in zip(wanted, outcomes, strict=True):
        results[i] = _refusal(outcome).body() if isinstance(outcome, Exception) else _answer(
            outcome
        )
    return json_response({"results": results})


def _answer(outcome: Ingested) -> dict[str, Any]:
    return {**outcome.receipt.ingest_answer(), "status": 201, "replayed": outcome.replayed}


# --- reading the tenant's receipts -------------------------------------------------------------


CURSOR_SALT = "receiptsite.receipts.cursor"


def _list(request: TenantRequest) -> HttpResponse:
    params = request.GET
    refuse_nul(params)
    query = Receipt.objects.filter(tenant_id=request.api_key.tenant_id)
    for column in LIST_FILTERS:
        wanted = params.get(column.name)
        if not wanted:
            continue  # an empty parameter counts as absent
        if isinstance(column.kind, Enum) and wanted not in column.kind.choices:
            raise bad_parameter(column.name, f"must be one of {', '.join(column.kind.choices)}")
        query = query.filter(**{column.name: wanted})
    page, next_cursor = keyset_page(
        query.select_related("log_entry"), params, at="recorded_at", salt=CURSOR_SALT
    )
    touched(request, [receipt.uuid for receipt in page])
    return json_response({"receipts": withdrawal.summaries(page), "next_cursor": next_cursor})


@api_route("GET", tenant=True, capability=True, rate={"GET": "read"})
def receipt_detail(request: TenantRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = Receipt.objects.verifiable(receipt_id, tenant_id=request.api_key.tenant_id)
    if receipt is None:
        raise receipt_not_found()
    if (found := withdrawal.withdrawn(receipt)) is not None:
        return json_response(withdrawal.summary(receipt, found.withdrawal))  # no document: erased
    summary, document = withdrawal.shown(receipt)
    return json_response({**summary, "document": document})


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
    response = json_response(withdrawal.answer(record), status=201)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


# --- public, for anyone ----------------------------------------------------------------------


def conditional(
    request: HttpRequest,
    response: HttpResponse,
    cache_control: str,
    *,
    per_request: Iterable[str] = (),
) -> HttpResponse:
    """A successful `response` with `cache_control` and an ETag of its bytes, or the 304 (no
    body, the same ETag, Cache-Control and Vary) of a GET or HEAD whose If-None-Match names
    it, `*` included and compared weakly, as Django's get_conditional_response does. The one
    way every route makes its ETag: the tiles, the checkpoints, the keys document, and the
    receipt routes (the verification JSON, the page, the hand-off text, the bundle).

    The ETag is of the answer as made for this request, after it was computed in full (a
    receipt's every check run again), so a 304 only ever says "what you hold is what the site
    answers now". `per_request`: strings of the bytes made for this request alone (the time of
    the check, a CSP nonce), left out of the hash; when any is there the ETag is weak (`W/`):
    two answers under it differ in those strings only. An answer that is not a success is
    returned as it is, without an ETag; an If-Match naming no current ETag (a weak one never
    matches it) is the 412 problem."""
    if not 200 <= response.status_code < 300:
        return response
    content = response.content
    volatile = [part.encode() for part in per_request if part and part.encode() in content]
    for part in volatile:
        content = content.replace(part, b"\0")  # no answer holds a raw NUL
    digest = hashlib.sha256(content).hexdigest()[:32]
    etag = f'W/"{digest}"' if volatile else f'"{digest}"'
    response["ETag"] = etag
    response["Cache-Control"] = cache_control
    answer = get_conditional_response(request, etag=etag, response=response) or response
    if answer.status_code == 412:
        answer = Problem(
            412,
            "precondition-failed",
            "Precondition failed",
            "If-Match names no current ETag of this answer (a weak ETag never matches "
            "If-Match); ask again without it.",
        ).response()
    return answer


@api_route("GET", public=True, capability=True, rate={"GET": "read"})
def receipt_verification(request: HttpRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = verification.verifiable(receipt_id)  # with the log's checkpoint: one statement
    if receipt is None:
        raise receipt_not_found()
    body, status = withdrawal.verification_answer(receipt)
    # Every check was just run again: the ETag vouches for this answer, never for an earlier
    # one. `verified_at` (now) is the one member left out of it; no-store, as the path says.
    return conditional(
        request, json_response(body, status=status), "no-store",
        per_request=[body.get("verified_at") or ""],
    )


@api_route("GET", public=True)
def keys_document(request: HttpRequest) -> HttpResponse:
    # Reused 5 seconds at most, as the tiles' checkpoint: a key rotated or reported compromised
    # reaches every cache (a browser's "Verify in this browser" too) within that, and a stale
    # copy is never used unrevalidated. A front proxy keeps it, and answers 304s itself.
    return conditional(
        request, json_response(keys_document_json()), "public, max-age=5, must-revalidate"
    )


@api_route("GET", public=True)
def checkpoint(request: HttpRequest) -> HttpResponse:
    # The latest checkpoint stored by a write path; serving it signs and writes nothing.
    signed = log.published()
    response = HttpResponse(signed.note, content_type="text/plain; charset=utf-8")
    return conditional(request, response, "no-cache")


@api_route("GET", public=True)
def witnessed_checkpoint(request: HttpRequest) -> HttpResponse:
    # The largest checkpoint that meets the quorum of WITNESS_POLICY_FILE, with its
    # cosignature lines; computed from the stored cosignatures, verified again here.
    witnessed = witnesses.latest()
    if witnessed is None:
        raise Problem(
            404,
            "not-witnessed",
            "No checkpoint is witnessed yet",
            "No checkpoint of this log meets its witness policy's quorum yet."
            if witnesses.policy() is not None
            else "This site has no witness policy: its checkpoints are signed by the site alone.",
        )
    response = HttpResponse(witnessed.note, content_type="text/plain; charset=utf-8")
    return conditional(request, response, "no-cache")


@api_route("GET", public=True)
def tiles_checkpoint(request: HttpRequest) -> HttpResponse:
    # c2sp.org/tlog-tiles' checkpoint: the one /api/log/checkpoint serves, cached seconds.
    signed = log.published()
    response = HttpResponse(signed.note, content_type="text/plain; charset=utf-8")
    return conditional(request, response, "public, max-age=5")


@api_route("GET", public=True)
def tile(request: HttpRequest, level: int, index: int, width: int = tiles.WIDTH) -> HttpResponse:
    # A hash tile of the latest signed tree (or of an earlier one): immutable, cached a year.
    data = log_tiles.tile(log.published().size, level, index, width)
    if data is None:
        raise Problem(
            404,
            "no-such-tile",
            "No such tile",
            "The log's latest checkpoint has no such tile (yet). This log serves hash tiles "
            "only: no entry bundles.",
        )
    response = HttpResponse(data, content_type="application/octet-stream")
    return conditional(request, response, "public, max-age=31536000, immutable")


@api_route("GET", public=True)
def consistency(request: HttpRequest) -> HttpResponse:
    signed = log.published()
    values = {}
    for name in ("first", "second"):
        number = whole_number(request.GET.get(name, ""))
        if number is None:
            raise bad_parameter(name, "must be a whole number")
        values[name] = number
    first, second = values["first"], values["second"]
    if not 1 <= first <= second <= signed.size:
        raise bad_parameter(
            "first" if first < 1 or first > second else "second",
            f"must satisfy 1 <= first <= second <= {signed.size} (the signed tree size)",
        )
    proof = log.consistency_proof(first, second)
    return json_response({"first": first, "second": second, "proof": [b64(p) for p in proof]})


@api_route("GET", public=True)
def healthz(request: HttpRequest) -> HttpResponse:
    # Readiness, for a load balancer or an orchestrator, whatever the Host (the private
    # address: middleware.HealthCheckHostMiddleware). 200 {"status": "ok"} when the site could
    # answer everything: the database answers, the configured key may sign (it is neither
    # compromised nor retired by a rotation elsewhere), and the log is sound and signed.
    # Otherwise 503 problem+json: the first thing wrong (the database, the key, the log) as
    # its type, title and detail, and `checks`, each thing's result and why. With a witness
    # policy, `witnesses` says how far the witnessed checkpoint is behind the log, in either
    # answer: it never makes the site unready (ingest never waits for a witness, and one
    # witness down must not take every host out of the load balancer); alert on it instead.
    # Liveness is any answer at all. A read: nothing is written.
    checks: list[dict[str, str]] = []
    failed: list[Problem] = []
    signed: log.SignedHead | None = None
    try:
        published, status = log.readiness(keyring.configured_kid())  # one query
        try:
            keyring.check_status(status)
            checks.append(_check("signing_key", "pass", "the configured key may sign"))
        except keyring.CannotSign as error:
            failed.append(error)
            checks.append(_check("signing_key", "fail", error.detail))
        if isinstance(published, log.LogNotSigned):
            failed.append(published)
            checks.append(_check("log", "fail", published.detail))
        else:
            signed = published
            checks.append(_check("log", "pass", f"signed at {signed.size} leaves, and sound"))
        extra = {"witnesses": _witness_lag(signed)} if witnesses.policy() is not None else {}
        if signed is not None and signed.origin != settings.LOG_ORIGIN:
            # A log that continues another (`continuelog`, after a restore that lost signed
            # trees) says so, in either answer: what the ended log signed, and what was lost.
            # (Looked up only when the origin is not the configured one: never, otherwise.)
            ended = [ended_json(*pair) for pair in log.verified_continuations()]
            if ended:
                extra["log"] = {"origin": signed.origin, "ended": ended}
    except DATABASE_ERRORS as error:
        down = database_unavailable(error)
        failed, checks, extra = [down], [_check("database", "fail", down.detail)], {}
    else:
        checks.insert(0, _check("database", "pass", "it answers"))
    if not failed:
        return json_response({"status": "ok", **extra})
    first = failed[0]
    raise Problem(
        first.status, first.slug, first.title, first.detail, headers=first.headers,
        **first.extra, checks=checks, **extra,
    )  # fmt: skip


def _check(name: str, result: str, detail: str) -> dict[str, str]:
    return {"name": name, "result": result, "detail": detail}


def _witness_lag(signed: log.SignedHead | None) -> dict[str, Any]:
    """How far the largest checkpoint the witness policy's quorum cosigned is behind the log:
    in leaves, and when the quorum was met (the last of the counted cosignatures)."""
    witnessed = witnesses.latest()
    size = signed.size if signed is not None else None
    return {
        "tree_size": size,
        "witnessed_size": witnessed.size if witnessed is not None else None,
        "leaves_behind": (
            size - (witnessed.size if witnessed is not None else 0) if size is not None else None
        ),
        "witnessed_at": (
            format_timestamp(max(c.time for c in witnessed.cosigners))
            if witnessed is not None and witnessed.cosigners
            else None
        ),
    }


@api_route("GET", public=True)
def openapi(request: HttpRequest) -> HttpResponse:
    return json_response(OPENAPI)

"""Writes that touch several tables. One flow for a receipt:

validate and normalise (document) -> resolve links -> redact and truncate (redact) ->
canonical bytes, hash, signature (integrity) -> one transaction that stores the receipt and
appends its log leaf.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from receiptsite.integrity.canonical import canonical_bytes, sha256_hex
from receiptsite.receipts import keyring, log
from receiptsite.receipts.document import (
    DocumentInvalid,
    Draft,
    LinkRefs,
    evidence_document,
    producer_with_links,
    validate,
)
from receiptsite.receipts.evidence import columns_of
from receiptsite.receipts.models import (
    ApiKey,
    LogEntry,
    Receipt,
    ReviewDecision,
    format_timestamp,
)
from receiptsite.receipts.redact import redact


class IdempotencyKeyReused(Exception):
    """The key names a receipt that was stored from a different request."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(receipt.uuid)
        self.receipt = receipt


@dataclass(frozen=True)
class Ingested:
    receipt: Receipt
    replayed: bool


def _resolve_links(api_key: ApiKey, refs: LinkRefs) -> tuple[str | None, list[str]]:
    """Map ids and idempotency keys to ids of this tenant's receipts, in one query.

    A receipt of another tenant is reported exactly like one that does not exist.
    """
    ids = [i for i in [refs.parent_receipt_id, *refs.child_receipt_ids] if i]
    keys = [k for k in [refs.parent_idempotency_key, *refs.child_idempotency_keys] if k]
    found = Receipt.objects.filter(tenant_id=api_key.tenant_id).filter(
        Q(public_id__in=ids) | Q(idempotency_key__in=keys)
    )
    by_id: set[str] = set()
    by_key: dict[str, str] = {}
    for public_id, key in found.values_list("public_id", "idempotency_key"):
        by_id.add(str(public_id))
        if key is not None:
            by_key[key] = str(public_id)

    errors: list[dict[str, str]] = []
    missing = "names no receipt of this tenant"
    parent: str | None = None
    if refs.parent_receipt_id:
        parent = refs.parent_receipt_id
        if parent not in by_id:
            errors.append({"field": "/links/parent_receipt_id", "message": missing})
    elif refs.parent_idempotency_key:
        parent = by_key.get(refs.parent_idempotency_key)
        if parent is None:
            errors.append({"field": "/links/parent_idempotency_key", "message": missing})

    children: list[str] = []
    for i, child in enumerate(refs.child_receipt_ids):
        if child not in by_id:
            errors.append({"field": f"/links/child_receipt_ids/{i}", "message": missing})
        children.append(child)
    for i, key in enumerate(refs.child_idempotency_keys):
        pointer = f"/links/child_idempotency_keys/{i}"
        resolved = by_key.get(key)
        if resolved is None:
            errors.append({"field": pointer, "message": missing})
        elif resolved in children:
            errors.append({"field": pointer, "message": "names a child that is already linked"})
        else:
            children.append(resolved)
    if errors:
        raise DocumentInvalid(errors)
    return parent, children


def prepare(api_key: ApiKey, payload: object) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Everything before the transaction: the producer's part, redacted, and the redactions.
    Raises DocumentInvalid."""
    draft: Draft = validate(payload)
    if draft.links is not None:
        parent, children = _resolve_links(api_key, draft.links)
        producer = producer_with_links(draft, parent, children)
    else:
        producer = draft.producer
    return redact(producer, limit=settings.TEXT_LIMIT)


def receipt_ingest(*, api_key: ApiKey, payload: object) -> Ingested:
    """Store one receipt, or replay the one its idempotency key already names.

    Raises DocumentInvalid (422) or IdempotencyKeyReused (422); log.LogRollback or
    keyring.CannotSign (503) when the site must not sign, before anything is stored.
    """
    producer, redactions = prepare(api_key, payload)
    request_hash = sha256_hex(canonical_bytes(producer))
    idempotency_key = producer.get("idempotency_key")
    tenant = api_key.tenant

    with transaction.atomic():
        # Appends are serialised; so, therefore, are the idempotency look-up and the insert:
        # concurrent requests with one key store exactly one receipt.
        log.lock_for_append()
        if idempotency_key is not None:
            existing = (
                Receipt.objects.select_related("log_entry")
                .filter(tenant=tenant, idempotency_key=idempotency_key)
                .first()
            )
            if existing is not None:
                if existing.request_hash != request_hash:
                    raise IdempotencyKeyReused(existing)
                return Ingested(receipt=existing, replayed=True)

        public_id = uuid.uuid4()
        recorded_at = timezone.now()
        document = evidence_document(
            producer,
            receipt_id=str(public_id),
            tenant_slug=tenant.slug,
            tenant_name=tenant.name,
            recorded_at=format_timestamp(recorded_at),
            key_prefix=api_key.prefix,
            redactions=redactions,
        )
        data = canonical_bytes(document)
        signature, signing_key = keyring.sign(data)
        receipt = Receipt.objects.create(
            public_id=public_id,
            tenant=tenant,
            api_key=api_key,
            recorded_at=recorded_at,
            **columns_of(producer),
            request_hash=request_hash,
            canonical_bytes=data,
            output_hash=sha256_hex(data),
            signature=signature,
            signing_key=signing_key,
        )
        logged = log.append(receipt, data)  # and its signed checkpoint, in this transaction
    log.remember(logged)  # committed: now it may be remembered outside the database
    # Fill the reverse one-to-one cache so answers need no further query.
    receipt.log_entry = LogEntry(index=logged.size - 1, receipt=receipt)
    return Ingested(receipt=receipt, replayed=False)


def decision_record(
    *,
    receipt: Receipt,
    reviewer: User,
    conclusion: str,
    exception_note: str = "",
    follow_up: str = "",
    supersedes: ReviewDecision | None = None,
) -> ReviewDecision:
    """Append a review decision, bound to the output hash the reviewer saw."""
    if supersedes is not None and supersedes.receipt_id != receipt.pk:
        raise ValueError("a decision can only supersede a decision on the same receipt")
    return ReviewDecision.objects.create(
        receipt=receipt,
        reviewer=reviewer,
        conclusion=conclusion,
        exception_note=exception_note,
        follow_up=follow_up,
        output_hash=receipt.output_hash,
        supersedes=supersedes,
    )

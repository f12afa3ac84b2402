"""Secrets out, long texts cut: what the site removes before a receipt is canonicalised.

Every change is reported in `redactions`, so a reviewer can see that, and where, the record
differs from what the producer sent.
"""

from __future__ import annotations

from typing import Any

from receiptsite_client.redaction import DEFAULT_LIMIT, redact_text, truncate

from receiptsite.evidence.declaration import DOCUMENT
from receiptsite.evidence.kinds import Kind, ListOf, Metadata, Object, TextPlace, json_copy


def _entry(pointer: str, reason: str, removed: int) -> dict[str, Any]:
    return {"field": pointer, "reason": reason, "removed_chars": removed}


def _rank(kind: Kind) -> int:
    # The order redactions are reported in, as the contract lists the scanned fields: texts of
    # the document itself, then its lists of statements, then texts inside its objects, then
    # metadata.
    if isinstance(kind, Metadata):
        return 3
    if isinstance(kind, Object):
        return 2
    return 1 if isinstance(kind, ListOf) else 0


def free_texts(producer: dict[str, Any]) -> list[TextPlace]:
    """Every free text of the document as (pointer, container, key, cut), in report order.
    Which fields hold free text is the declaration's word (evidence.DOCUMENT)."""
    found: list[tuple[int, TextPlace]] = []
    for member in DOCUMENT.fields:
        if member.name in producer:
            here = f"/{member.name}"
            rank = _rank(member.kind)
            found += [
                (rank, place)
                for place in member.kind.texts(producer[member.name], here, producer, member.name)
            ]
    return [place for _, place in sorted(found, key=lambda item: item[0])]


def redact(
    producer: dict[str, Any], *, limit: int = DEFAULT_LIMIT
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A copy of `producer` with secrets replaced and long texts cut, and the redactions list.

    Only free text is scanned: identifiers (idempotency_key, operation_ref, ids) are never
    touched; validation refuses one that looks like a secret.
    """
    result = json_copy(producer)
    redactions: list[dict[str, Any]] = []
    for pointer, container, key, cut_if_long in free_texts(result):
        text, secrets = redact_text(container[key])
        redactions += [_entry(pointer, "secret", removed) for removed in secrets]
        if cut_if_long:
            text, cut = truncate(text, limit)
            if cut:
                redactions.append(_entry(pointer, "truncated", cut))
        container[key] = text
    return result, redactions

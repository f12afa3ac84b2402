"""The evidence document built from what a producer sends: validated against the declaration
(evidence.py), normalised, then joined with the site's fields.

Nothing here touches the database or Django settings: limits arrive as parameters, so the
same rules serve a single POST, a batch item and a management command alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receiptsite.evidence.declaration import BOUNDARY, DOCUMENT, SCHEMA
from receiptsite.evidence.kinds import OBJECT_MESSAGE, Errors, json_copy


class DocumentInvalid(Exception):
    """The document breaks receipt/v1 (a 422); `errors` names every offending field."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__(f"{len(errors)} field(s) are not valid")
        self.errors = errors


@dataclass(frozen=True)
class LinkRefs:
    parent_receipt_id: str | None
    parent_idempotency_key: str | None
    child_receipt_ids: tuple[str, ...]
    child_idempotency_keys: tuple[str, ...]


@dataclass
class Draft:
    producer: dict[str, Any]  # normalised producer fields, WITHOUT "links"
    links: LinkRefs | None  # None when no `links` was sent


def _link_refs(links: dict[str, Any]) -> LinkRefs:
    return LinkRefs(
        parent_receipt_id=links.get("parent_receipt_id"),
        parent_idempotency_key=links.get("parent_idempotency_key"),
        child_receipt_ids=tuple(links.get("child_receipt_ids", ())),
        child_idempotency_keys=tuple(links.get("child_idempotency_keys", ())),
    )


def validate(payload: object) -> Draft:
    """Check a parsed body against receipt/v1 and normalise it; DocumentInvalid otherwise."""
    if not isinstance(payload, dict):
        raise DocumentInvalid([{"field": "", "message": OBJECT_MESSAGE}])
    errors = Errors()
    producer = DOCUMENT.check_fields(payload, "", errors)
    if errors.items:
        raise DocumentInvalid(errors.items)
    links = producer.pop("links", None)
    return Draft(producer=producer, links=None if links is None else _link_refs(links))




def producer_with_links(
    draft: Draft, parent_receipt_id: str | None, child_receipt_ids: list[str]
) -> dict[str, Any]:
    """The producer's part of the document, with links resolved to receipt ids only."""
    producer = json_copy(draft.producer)
    if draft.links is None:
        return producer
    links: dict[str, Any] = {}
    if parent_receipt_id is not None:
        links["parent_receipt_id"] = parent_receipt_id.lower()
    # An empty list names no child, so it is left out like any absent field.
    if child_receipt_ids:
        links["child_receipt_ids"] = [child.lower() for child in child_receipt_ids]
    producer["links"] = links
    return producer


def evidence_document(
    producer: dict[str, Any],
    *,
    receipt_id: str,
    tenant_slug: str,
    tenant_name: str,
    recorded_at: str,
    key_prefix: str,
    redactions: list[dict[str, Any]],
) -> dict[str, Any]:
    """The whole evidence document: the producer's fields plus the site's."""
    document = json_copy(producer)
    document["not_observed"] = [*producer.get("not_observed", ()), BOUNDARY[producer["phase"]]]
    document.update(
        {
            "schema": SCHEMA,
            "id": receipt_id,
            "tenant": {"slug": tenant_slug, "name": tenant_name},
            "recorded_at": recorded_at,
            "publisher": {"key_prefix": key_prefix},
            "redactions": json_copy(redactions),
        }
    )
    return document

"""review-decision/v1, frozen: the signed document of a review decision in the auditors'
record (review/chain.py signs and checks it; migration 0011 chained the decisions that existed
before the record with it). A change of the format is a decision_v2 and a new FORMAT, never an
edit of this module: records signed with it must keep checking out.

Only the standard library: a migration imports it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

FORMAT = "review-decision/v1"
# The predecessor hash of the first decision.
GENESIS = "0" * 64
# The decision's fields in its document, as (document key, ORM lookup); then the chain's.
DECISION_FIELDS = [
    ("decision_id", "id"),
    ("receipt_id", "receipt__public_id"),
    ("reviewer_id", "reviewer_id"),
    ("reviewed_at", "reviewed_at"),
    ("conclusion", "conclusion"),
    ("exception_note", "exception_note"),
    ("follow_up", "follow_up"),
    ("output_hash", "output_hash"),
    ("supersedes", "supersedes_id"),
]
CHAIN_FIELDS = ["previous_decision_id", "previous_hash", "chained_at", "chained_by"]


def json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if value is None or isinstance(value, (int, str)):
        return value
    return str(value)  # a UUID


def document(decision: dict[str, Any], chain: dict[str, Any]) -> dict[str, Any]:
    """The document of a decision: `decision` maps the ORM lookups of DECISION_FIELDS to
    values, `chain` the CHAIN_FIELDS."""
    doc: dict[str, Any] = {"format": FORMAT}
    doc.update({key: json_value(decision[lookup]) for key, lookup in DECISION_FIELDS})
    doc.update({key: json_value(chain[key]) for key in CHAIN_FIELDS})
    return doc

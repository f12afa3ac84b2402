"""withdrawal/v1, frozen: the signed statement of a withdrawal (withdrawal/statements.py signs
and checks it; migration 0015 stated the withdrawals that existed before statements with it).
A change of the format is a statement_v2 and a new FORMAT, never an edit of this module:
statements signed with it must keep checking out.

Only the standard library: a migration imports it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

FORMAT = "withdrawal/v1"
# The predecessor hash of the first statement (lib/chain.py's GENESIS, written out: frozen).
GENESIS = "0" * 64
# The withdrawal's fields in its statement, as (statement key, ORM lookup from the withdrawal).
# The note is not stated: it is free text and may itself hold what was withdrawn.
WITHDRAWAL_FIELDS = [
    ("receipt_id", "receipt_public_id"),
    ("withdrawn_at", "withdrawn_at"),
    ("withdrawn_by", "withdrawn_by"),
    ("reason", "reason"),
    ("output_hash", "receipt__output_hash"),
]
# Then the receipt's leaf hash in the log (base64, null when it had no place in the log), and
# the chain's fields.
CHAIN_FIELDS = ["position", "previous_hash", "stated_at", "stated_by"]


def json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if value is None or isinstance(value, (int, str)):
        return value
    return str(value)  # a UUID


def statement(
    withdrawal: dict[str, Any], leaf_hash: str | None, chain: dict[str, Any]
) -> dict[str, Any]:
    """The statement of a withdrawal: `withdrawal` maps the ORM lookups of WITHDRAWAL_FIELDS
    to values, `leaf_hash` is base64 or None, `chain` maps CHAIN_FIELDS to values."""
    doc: dict[str, Any] = {"format": FORMAT}
    doc.update({key: json_value(withdrawal[lookup]) for key, lookup in WITHDRAWAL_FIELDS})
    doc["leaf_hash"] = leaf_hash
    doc.update({key: json_value(chain[key]) for key in CHAIN_FIELDS})
    return doc

"""key-status/v1, frozen: the signed statement of one change of a signing key's status (it was
activated, retired or compromised), the links of the keys' history (ledger/key_history.py
writes and checks them; migration 0016 stated the keys that existed before the history with
it). A change of the format is a key_statement_v2 and a new FORMAT, never an edit of this
module: statements signed with it must keep checking out.

A statement names the key (`kid`, `x`), its new `status`, when the change was made (`at`), the
key's `retired_at` and `compromised_at` after it (each null where it does not apply), its place
in the history (`position`, from 0) and the hash of the statement before it (`previous_hash`,
GENESIS for the first), who made it (`made_by`: the site, or migration 0016 for the keys it
found), and the ids of the keys that sign it (`signed_by`: first the key that takes over, then
the outgoing key when that one is not compromised), so that no signature can be stripped
unseen. Its bytes are RFC 8785 JSON; its hash is their SHA-256 (lowercase hex).

Only the standard library: a migration imports it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

FORMAT = "key-status/v1"
# The predecessor hash of the first statement.
GENESIS = "0" * 64
STATUSES = ("active", "retired", "compromised")
MADE_BY = ("site", "migration")
# The members of a statement, in no particular order (RFC 8785 sorts them).
MEMBERS = (
    "format", "position", "kid", "x", "status", "at", "retired_at", "compromised_at",
    "previous_hash", "made_by", "signed_by",
)


def timestamp(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def document(
    *,
    position: int,
    kid: str,
    x: str,
    status: str,
    at: datetime,
    retired_at: datetime | None,
    compromised_at: datetime | None,
    previous_hash: str,
    made_by: str,
    signed_by: list[str],
) -> dict[str, Any]:
    """The statement (`x`: the key's public key, base64url as in its JWK)."""
    if status not in STATUSES or made_by not in MADE_BY:
        raise ValueError(f"no {FORMAT} statement of status {status!r} made by {made_by!r}")
    return {
        "format": FORMAT,
        "position": position,
        "kid": kid,
        "x": x,
        "status": status,
        "at": timestamp(at),
        "retired_at": timestamp(retired_at),
        "compromised_at": timestamp(compromised_at),
        "previous_hash": previous_hash,
        "made_by": made_by,
        "signed_by": list(signed_by),
    }

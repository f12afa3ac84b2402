"""What every signed, hash-chained record of the site has in common: a link's document is
signed as RFC 8785 bytes by the site's active key, and names the hash of the link before it
(GENESIS for the first), so that a link changed, removed or reordered breaks the chain.

review/chain.py (the auditors' record of decisions) and withdrawal/statements.py (the
withdrawals' statements) each keep their own table and document format; what they share is
here: sealing a document (seal), the place of the next link (next_place), and whether a stored
link is still as it was sealed (holds). Appends are serialised by the caller's lock, and each
table's unique position and unique predecessor make a fork impossible even without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes, sha256_hex
from receiptsite.ledger import keyring
from receiptsite.receipts.models import SigningKey

# The predecessor hash of a chain's first link.
GENESIS: Final = "0" * 64


@dataclass(frozen=True)
class Seal:
    """A document's canonical bytes, their SHA-256 (lowercase hex), and the site's signature."""

    canonical_bytes: bytes
    hash: str
    signature: bytes
    signing_key: SigningKey


def seal(document: dict[str, Any]) -> Seal:
    """Sign `document` with the site's active key, its status read now (keyring.signing_now:
    never a key compromised or retired meanwhile). Raises keyring.CannotSign without one."""
    data = canonical_bytes(document)
    key = keyring.signing_now()
    return Seal(data, sha256_hex(data), keys.sign(key.private, data), key.row)


def next_place(last_position: int | None, last_hash: str | None) -> tuple[int, str]:
    """The position and predecessor hash of the link after (last_position, last_hash); the
    first link's when the chain is empty (None)."""
    if last_position is None or last_hash is None:
        return 0, GENESIS
    return last_position + 1, last_hash


def holds(data: bytes, digest: str, signature: bytes, key: SigningKey | None) -> bool:
    """Whether a stored link's bytes still have their hash and the signature verifies under
    its key."""
    return (
        key is not None
        and sha256_hex(data) == digest
        and keys.verify_signature(bytes(key.public_key), data, signature)
    )

"""The keys' history: every change of a signing key's status written as a signed key-status/v1
statement (key_statement_v1.py), chained to the one before, in the transaction that makes the
change. `key_status_record` is the one way a key is activated, retired or marked compromised
(keyring.py and `compromisekey` call it); the database refuses a key row that disagrees with
its newest statement (migrations/0016_key_history). `history_json` is what the keys document
publishes; key_chain.py checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import transaction
from django.utils import timezone

from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes, sha256_hex
from receiptsite.integrity.encoding import b64, b64url
from receiptsite.ledger import key_chain
from receiptsite.ledger import key_statement_v1 as v1
from receiptsite.receipts.models import KeyStatement, SigningKey


@dataclass(frozen=True)
class Signer:
    """A key that signs a statement: its id and private half."""

    kid: str
    private: Ed25519PrivateKey


def key_status_record(
    *,
    kid: str,
    public: bytes,
    status: str,
    taking_over: Signer,
    outgoing: Sequence[Signer] = (),
    compromised_at: datetime | None = None,
) -> SigningKey:
    """Make `status` the status of the key `kid` (recorded first if it has no row): write the
    statement, signed by the key that takes over and by the outgoing keys (the active keys it
    replaces, none compromised), then the key's row, in one transaction. Returns the row."""
    with transaction.atomic():
        row = SigningKey.objects.filter(kid=kid).first()
        now = timezone.now()
        retired_at = None
        if status == SigningKey.RETIRED:
            retired_at = now
        elif status == SigningKey.COMPROMISED:
            retired_at = (row.retired_at if row is not None else None) or now
        else:
            compromised_at = None
        newest = KeyStatement.objects.order_by("-position").first()
        position = newest.position + 1 if newest is not None else 0
        signers = [taking_over, *(key for key in outgoing if key.kid != taking_over.kid)]
        doc = v1.document(
            position=position,
            kid=kid,
            x=b64url(public),
            status=status,
            at=now,
            retired_at=retired_at,
            compromised_at=compromised_at,
            previous_hash=newest.statement_hash if newest is not None else v1.GENESIS,
            made_by=KeyStatement.SITE,
            signed_by=[signer.kid for signer in signers],
        )
        data = canonical_bytes(doc)
        KeyStatement.objects.create(
            position=position,
            kid=kid,
            public_key=public,
            status=status,
            at=now,
            retired_at=retired_at,
            compromised_at=compromised_at,
            previous_hash=doc["previous_hash"],
            statement_hash=sha256_hex(data),
            canonical_bytes=data,
            signatures=[
                {"kid": signer.kid, "signature": b64(keys.sign(signer.private, data))}
                for signer in signers
            ],
        )
        if row is None:
            row = SigningKey.objects.create(
                kid=kid, public_key=public, status=status, retired_at=retired_at,
                compromised_at=compromised_at,
            )
        else:
            row.status, row.retired_at, row.compromised_at = status, retired_at, compromised_at
            row.save(update_fields=["status", "retired_at", "compromised_at"])
    return row


def history_json() -> list[dict[str, Any]]:
    """The statements in order, as the keys document publishes them: each one's canonical
    bytes (base64), hash and signatures."""
    return [
        {"statement": b64(bytes(data)), "hash": digest, "signatures": signatures}
        for data, digest, signatures in KeyStatement.objects.order_by("position").values_list(
            "canonical_bytes", "statement_hash", "signatures"
        )
    ]


def stated_row(key: SigningKey) -> dict[str, Any]:
    """A key row as key_chain.disagreements compares it with its newest statement."""
    return {
        "kid": key.kid,
        "x": b64url(bytes(key.public_key)),
        "status": key.status,
        "retired_at": v1.timestamp(key.retired_at),
        "compromised_at": v1.timestamp(key.compromised_at),
    }


def check() -> tuple[int, list[str]]:
    """The keys' history checked (key_chain.py), and every key row held to its newest
    statement: the number of statements, and the problems found (`checklog` reports them)."""
    history = history_json()
    chain = key_chain.check(history)
    rows = [stated_row(key) for key in SigningKey.objects.order_by("created_at", "pk")]
    problems = chain.problems or key_chain.disagreements(chain, rows)
    return len(history), problems

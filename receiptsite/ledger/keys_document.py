"""The keys document, `/.well-known/receipt-keys.json`: every signing key the site has
recorded, with its status, the log's verifier keys, and the keys' history, the signed
statements of every change of a key's status that the listed statuses must agree with
(key_history.py; docs/verification.md says how to check it). The offline bundle holds it too."""

from __future__ import annotations

from typing import Any

from receiptsite.integrity import keys as ed25519
from receiptsite.integrity import note
from receiptsite.integrity.continuation import Continuation
from receiptsite.integrity.encoding import b64
from receiptsite.ledger import key_history, log, witnesses
from receiptsite.receipts.models import LogContinuation, SigningKey, format_timestamp


def ended_json(row: LogContinuation, statement: Continuation) -> dict[str, Any]:
    """One ended log, as the keys document and /healthz show it."""
    return {
        "origin": statement.ended,
        "signed_size": statement.signed_size,
        "signed_root_hash": b64(statement.signed_root),
        "kept_size": statement.kept_size,
        "kept_root_hash": b64(statement.kept_root),
        "lost": statement.lost,
        "continued_as": statement.continues_as,
        "ended_at": format_timestamp(row.recorded_at),
        # The signed note (integrity/continuation.py), signed under the ended log's name: the
        # ended log's verifier key of the key that signed it checks it.
        "statement": row.statement,
        "verifier_key": note.verifier_key(statement.ended, bytes(row.signing_key.public_key)),
    }


def keys_document_json() -> dict[str, Any]:
    """The keys document (`/.well-known/receipt-keys.json`; the offline bundle holds it too)."""
    # The keys as recorded: a read records nothing, so a key rotated in is listed once a write
    # path (an ingest, `signcheckpoint`, `migrate`) has recorded it and signed with it.
    origin = log.head().origin
    rules = witnesses.policy()
    listed = []
    verifier_keys = []
    log_keys: list[str] = []  # the policy's `log` lines: every key that is not compromised
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
        if key.status != SigningKey.COMPROMISED:
            log_keys.append(vkey)
        if key.status == SigningKey.ACTIVE:
            active_vkey = vkey
    return {
        "keys": listed,
        "log": {
            "origin": origin,
            "verifier_key": active_vkey,
            "verifier_keys": verifier_keys,
            # The witnesses the site asks to cosign, as a tlog-policy file a verifier keeps
            # (no URLs); null without WITNESS_POLICY_FILE (ledger/witnesses.py).
            "witness_policy": rules.text(log_keys) if rules is not None else None,
            # Every log this one continues (`continuelog`, after a restore that lost signed
            # trees), oldest first: what it signed, what was kept, and the signed statement.
            "ended": [ended_json(*pair) for pair in log.verified_continuations()],
        },
        "history": key_history.history_json(),
    }

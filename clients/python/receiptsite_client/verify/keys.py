"""The keys receipts are checked against: Ed25519 signatures, RFC 7638 thumbprints (a key's
`kid`), a keys document's usable keys, and the policy that picks the trusted ones (a pinned key
and the keys its document's history hands over to from it, else the document's; a key marked
`compromised` never vouches for anything). A document with a `history` (keychain.py) is
believed only where the history vouches for it: a listed key that no valid chain of statements
vouches for as listed is left out (or, when the history says it is compromised, taken as
that)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from receiptsite_client.verify import keychain
from receiptsite_client.verify.encoding import b64url, b64url_decode
from receiptsite_client.verify.jcs import jcs
from receiptsite_client.verify.note import Note, note_key_id

PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64


def jwk_thumbprint(raw: bytes) -> str:
    """RFC 7638: SHA-256 of the required members, sorted, no whitespace; base64url."""
    members = {"crv": "Ed25519", "kty": "OKP", "x": b64url(raw)}
    return b64url(hashlib.sha256(jcs(members).encode("utf-8")).digest())


def ed25519_verify(raw: bytes, signature: bytes, data: bytes) -> bool:
    if len(raw) != PUBLIC_KEY_SIZE or len(signature) != SIGNATURE_SIZE:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class TrustedKey:
    raw: bytes
    kid: str
    status: str  # "active", "retired", "compromised", or "pinned"
    compromised_at: str | None = None  # as the keys document states it, for the words only

    def compromised_words(self) -> str:
        when = f" as of {self.compromised_at}" if self.compromised_at else ""
        return f"marked compromised{when}"


def listed_keys(keys: dict[str, Any] | None) -> tuple[list[TrustedKey], list[str]]:
    """The usable keys of a keys document, and what was wrong with the others."""
    found: list[TrustedKey] = []
    problems: list[str] = []
    entries = keys.get("keys") if isinstance(keys, dict) else None
    if not isinstance(entries, list):
        return found, ["the keys document has no list of keys"] if keys is not None else []
    chain = history_of(keys)
    if chain is not None:
        problems.extend(chain.problems)
    for number, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or entry.get("kty") != "OKP"
            or entry.get("crv") != "Ed25519"
        ):
            problems.append(f"key {number} is not an Ed25519 JWK")
            continue
        try:
            raw = b64url_decode(entry.get("x"))
        except ValueError:
            raw = b""
        if len(raw) != PUBLIC_KEY_SIZE:
            problems.append(f"key {number} has no 32-byte x")
            continue
        kid = jwk_thumbprint(raw)
        if entry.get("kid") != kid:
            # A kid that is not the key's thumbprint cannot name it: leave the key out.
            problems.append(f"key {number}'s kid is not its RFC 7638 thumbprint")
            continue
        status = entry.get("status")
        since = entry.get("compromised_at")
        if chain is not None:
            problem = keychain.vouched(chain, entry)
            stated = chain.keys.get(kid)
            if problem is not None:
                problems.append(f"key {number}: {problem}")
                if stated is None or stated["status"] != "compromised":
                    continue
                status, since = "compromised", stated["compromised_at"]  # stricter, never laxer
        found.append(
            TrustedKey(
                raw,
                kid,
                status if isinstance(status, str) else "unknown",
                since if isinstance(since, str) else None,
            )
        )
    return found, problems


def history_of(keys: dict[str, Any] | None) -> keychain.Chain | None:
    """The keys document's history, checked; None for a document without one (an older
    site's, or a saved one from before the history)."""
    history = keys.get("history") if isinstance(keys, dict) else None
    if history is None:
        return None
    return keychain.check(history if isinstance(history, list) else [None])


def trusted_keys(keys: dict[str, Any] | None, pinned_x: str | None) -> list[TrustedKey]:
    """The keys to check against: the pinned one alone if given, else the document's.

    A document's `compromised` mark is honoured even for a pinned key: it can only make a
    check stricter, never make a forgery pass.
    """
    listed, _problems = listed_keys(keys)
    if pinned_x is None:
        return listed
    raw = b64url_decode(pinned_x)
    if len(raw) != PUBLIC_KEY_SIZE:
        raise ValueError("an Ed25519 public key is 32 bytes")
    kid = jwk_thumbprint(raw)
    marked = next((k for k in listed if k.kid == kid and k.status == "compromised"), None)
    if marked is not None:
        return [marked]
    chain = history_of(keys)
    if chain is not None and not chain.problems and kid in chain.order:
        # Follow the history from the pinned key: it and every key stated after it, each
        # handed over to by the keys before (keychain.py), as the history vouches for them.
        after = set(chain.order[chain.order.index(kid) :])
        return [key for key in listed if key.kid in after]
    return [TrustedKey(raw, kid, "pinned")]


def keys_to_check_against(
    keys: dict[str, Any] | None, pinned_x: str | None
) -> list[TrustedKey] | None:
    """trusted_keys, or None when there is neither a keys document nor a pinned key (the
    signature checks then could not be made). ValueError for a pinned key that is unusable."""
    if keys is None and pinned_x is None:
        return None
    return trusted_keys(keys, pinned_x)


def note_signatures(
    note: Note, name: str, candidates: Iterable[TrustedKey]
) -> tuple[list[TrustedKey], list[TrustedKey]]:
    """Which of `candidates` signed `note` under the key name `name`: (the keys whose
    signature verifies, the keys a signature line claims and whose signature does not).
    Lines of other names or key ids are not theirs and are left alone (c2sp.org/signed-note)."""
    by_id: dict[bytes, list[TrustedKey]] = {}
    for key in candidates:
        by_id.setdefault(note_key_id(name, key.raw), []).append(key)
    message = note.text.encode("utf-8")
    verified: list[TrustedKey] = []
    failed: list[TrustedKey] = []
    for sig_name, key_id, signature in note.signatures:
        if sig_name != name:
            continue
        for key in by_id.get(key_id, []):
            (verified if ed25519_verify(key.raw, signature, message) else failed).append(key)
    return verified, failed

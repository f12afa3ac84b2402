"""receipt-verify and the keys' history (receiptsite_client/verify/keychain.py): a listed key
is believed only as far as a valid chain of signed statements vouches for it, and a pinned key
hands over to the keys its history activates after it. Documents are made here with the
client's own primitives; the site's own documents are checked in tests/live/test_key_history.py
and tests/live/test_key_compromise.py of the site."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from receiptsite_client.verify import keychain, listed_keys, trusted_keys
from receiptsite_client.verify.encoding import b64url
from receiptsite_client.verify.jcs import jcs
from receiptsite_client.verify.keys import jwk_thumbprint

pytestmark = pytest.mark.unit

AT = "2026-12-01T09:00:00.000000Z"


def public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def kid(key: Ed25519PrivateKey) -> str:
    return jwk_thumbprint(public(key))


class History:
    """A site's keys document in the making: its keys and its signed history."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.entries: dict[str, dict[str, Any]] = {}

    def state(self, key: Ed25519PrivateKey, status: str, signers: list[Ed25519PrivateKey],
              compromised_at: str | None = None) -> None:
        previous = self.items[-1]["hash"] if self.items else keychain.GENESIS
        retired_at = None if status == "active" else AT
        doc = {
            "format": keychain.FORMAT, "position": len(self.items), "kid": kid(key),
            "x": b64url(public(key)), "status": status, "at": AT, "retired_at": retired_at,
            "compromised_at": compromised_at, "previous_hash": previous, "made_by": "site",
            "signed_by": [kid(signer) for signer in signers],
        }
        data = jcs(doc).encode("utf-8")
        self.items.append({
            "statement": base64.b64encode(data).decode(),
            "hash": hashlib.sha256(data).hexdigest(),
            "signatures": [{"kid": kid(s), "signature": base64.b64encode(s.sign(data)).decode()}
                           for s in signers],
        })
        self.entries[kid(key)] = {
            "kty": "OKP", "crv": "Ed25519", "x": doc["x"], "kid": kid(key), "status": status,
            "retired_at": retired_at,
            **({"compromised_at": compromised_at} if compromised_at else {}),
        }

    def document(self) -> dict[str, Any]:
        return {"keys": list(self.entries.values()), "history": self.items}


def rotated() -> tuple[History, Ed25519PrivateKey, Ed25519PrivateKey]:
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    history = History()
    history.state(old, "active", [old])
    history.state(new, "active", [new, old])
    history.state(old, "retired", [new, old])
    return history, old, new


def test_a_rotation_signed_over_by_the_old_key_checks_out() -> None:
    history, old, new = rotated()
    found, problems = listed_keys(history.document())
    assert problems == []
    assert [(key.kid, key.status) for key in found] == [(kid(old), "retired"),
                                                        (kid(new), "active")]


def test_a_pinned_key_hands_over_to_the_key_its_history_activates_after_it() -> None:
    history, old, new = rotated()
    trusted = trusted_keys(history.document(), b64url(public(old)))
    assert {key.kid for key in trusted} == {kid(old), kid(new)}


def test_a_key_of_ones_own_that_the_active_key_did_not_sign_over_to_is_not_believed() -> None:
    old, own = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    history = History()
    history.state(old, "active", [old])
    history.state(own, "active", [own])  # self-signed: the site's key never handed over
    found, problems = listed_keys(history.document())
    assert any("without the signature of the outgoing key" in p for p in problems)
    assert kid(own) not in {key.kid for key in found}
    pinned = trusted_keys(history.document(), b64url(public(old)))
    assert [key.kid for key in pinned] == [kid(old)]


def test_a_compromised_key_listed_active_again_is_taken_as_compromised() -> None:
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    history = History()
    history.state(old, "active", [old])
    history.state(new, "active", [new])
    history.state(old, "compromised", [new], compromised_at=AT)
    document = history.document()
    document["keys"][0] = {**document["keys"][0], "status": "active", "retired_at": None}
    del document["keys"][0]["compromised_at"]
    found, problems = listed_keys(document)
    assert any("its newest statement in the keys' history says 'compromised'" in p
               for p in problems)
    assert [(key.kid, key.status, key.compromised_at) for key in found] == [
        (kid(old), "compromised", AT), (kid(new), "active", None)]


def test_a_retired_key_made_active_again_is_not_believed() -> None:
    # Well signed, by the key itself and the active key, as someone holding both (the site's
    # database role and the old key's private half) could: a rotation only goes forward.
    history, old, new = rotated()
    history.state(old, "active", [old, new])
    found, problems = listed_keys(history.document())
    assert any(f"it makes the retired key {kid(old)} active again" in p for p in problems)
    assert (kid(old), "active") not in [(key.kid, key.status) for key in found]
    pinned = trusted_keys(history.document(), b64url(public(new)))
    assert (kid(old), "active") not in [(key.kid, key.status) for key in pinned]


def test_a_listed_key_no_statement_vouches_for_is_left_out() -> None:
    history, old, new = rotated()
    document = history.document()
    stranger = Ed25519PrivateKey.generate()
    document["keys"].append({"kty": "OKP", "crv": "Ed25519", "x": b64url(public(stranger)),
                             "kid": kid(stranger), "status": "active", "retired_at": None})
    found, problems = listed_keys(document)
    assert kid(stranger) not in {key.kid for key in found}
    assert any("no statement of the keys' history vouches for it" in p for p in problems)

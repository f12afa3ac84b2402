"""Builders for the witness tests, written from the specifications with hashlib and
cryptography alone (not with the client's own code, which they test): Ed25519 keys as vkeys
and JWKs, checkpoints signed by a log and cosigned by witnesses (c2sp.org/tlog-cosignature),
RFC 9162 trees and their inclusion proofs, tlog policies, and a site's answer for one receipt
(its verification JSON, its keys document, its bundle) with a witnessed checkpoint."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ORIGIN = "receipts.example.org/receipts"
EM_DASH = "\u2014"
RECEIPT_ID = "6c1f0e52-8a7e-4c1b-9d47-2f3b1a5e7c90"
# 2026-12-03T07:30:00Z and the seconds after it: when the witnesses cosigned.
T0 = 1796283000


def raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def x_of(key: Ed25519PrivateKey) -> str:
    return b64url(raw(key))


def kid_of(key: Ed25519PrivateKey) -> str:
    """RFC 7638: SHA-256 of {"crv","kty","x"} with no whitespace, base64url."""
    members = json.dumps(
        {"crv": "Ed25519", "kty": "OKP", "x": x_of(key)}, separators=(",", ":"), sort_keys=True
    )
    return b64url(hashlib.sha256(members.encode()).digest())


def key_id(name: str, type_byte: bytes, material: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + type_byte + material).digest()[:4]


def vkey(name: str, key: Ed25519PrivateKey, type_byte: bytes) -> str:
    return f"{name}+{key_id(name, type_byte, raw(key)).hex()}+{b64(type_byte + raw(key))}"


def log_vkey(key: Ed25519PrivateKey, origin: str = ORIGIN) -> str:
    return vkey(origin, key, b"\x01")


def witness_vkey(name: str, key: Ed25519PrivateKey) -> str:
    return vkey(name, key, b"\x04")


def checkpoint_text(size: int, root: bytes, origin: str = ORIGIN) -> str:
    return f"{origin}\n{size}\n{b64(root)}\n"


def log_line(text: str, key: Ed25519PrivateKey, origin: str = ORIGIN) -> str:
    blob = key_id(origin, b"\x01", raw(key)) + key.sign(text.encode())
    return f"{EM_DASH} {origin} {b64(blob)}\n"


def cosignature_message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{text}".encode()


def cosignature_line(text: str, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    signature = key.sign(cosignature_message(text, timestamp))
    blob = key_id(name, b"\x04", raw(key)) + timestamp.to_bytes(8, "big") + signature
    return f"{EM_DASH} {name} {b64(blob)}\n"


def flip_in_line(line: str, at: int = -10) -> str:
    """The signature line with one bit of its signature bytes flipped."""
    head, _, encoded = line.rstrip("\n").rpartition(" ")
    blob = bytearray(base64.b64decode(encoded))
    blob[at] ^= 1
    return f"{head} {b64(bytes(blob))}\n"


def stamp(timestamp: int) -> str:
    """A cosignature time in the site's timestamp form."""
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


# --- RFC 9162 trees, written recursively as the RFC states them -------------------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node(mth(leaves[:k]), mth(leaves[k:]))


def path(index: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(m, D[n]), from the leaf's sibling up."""
    if len(leaves) <= 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*path(index, leaves[:k]), mth(leaves[k:])]
    return [*path(index - k, leaves[k:]), mth(leaves[:k])]


# --- one site, one receipt, three witnesses ----------------------------------------------


def new_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@dataclass
class Witness:
    policy_name: str
    key_name: str
    key: Ed25519PrivateKey = field(default_factory=new_key)

    @property
    def line(self) -> str:
        return f"witness {self.policy_name} {witness_vkey(self.key_name, self.key)}"


def jwk(key: Ed25519PrivateKey, status: str = "active", **more: Any) -> dict[str, Any]:
    return {"kty": "OKP", "crv": "Ed25519", "x": x_of(key), "kid": kid_of(key), "alg": "EdDSA",
            "use": "sig", "status": status, **more}  # fmt: skip


@dataclass
class Site:
    """A log of `size` leaves holding one receipt at `index`, its checkpoint signed by the
    site's key, and the largest checkpoint that includes it cosigned by witnesses (of
    `witnessed_size` leaves), by `cosigners` (indexes into `witnesses`) at T0, T0+1, …."""

    size: int = 6
    index: int = 2
    witnessed_size: int = 5
    cosigners: tuple[int, ...] = (0, 1)
    key: Ed25519PrivateKey = field(default_factory=new_key)
    witnesses: list[Witness] = field(
        default_factory=lambda: [Witness(f"w{n}", f"witness{n}.example/cosign") for n in (1, 2, 3)]
    )
    threshold: str = "2"

    def __post_init__(self) -> None:
        document = {"id": RECEIPT_ID, "phase": "end", "schema": "receipt/v1"}
        self.data = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
        self.leaves = [leaf_hash(f"leaf {n}".encode()) for n in range(self.size)]
        self.leaves[self.index] = leaf_hash(self.data)

    # the policy
    def policy(self, *, logs: list[str] | None = None, quorum: str | None = None) -> str:
        lines = [f"log {v}" for v in (logs if logs is not None else [log_vkey(self.key)])]
        lines += [w.line for w in self.witnesses]
        names = " ".join(w.policy_name for w in self.witnesses)
        lines += [f"group trio {self.threshold} {names}", f"quorum {quorum or 'trio'}"]
        return "\n".join(lines) + "\n"

    # checkpoints
    def checkpoint(self, size: int, signer: Ed25519PrivateKey | None = None) -> str:
        text = checkpoint_text(size, mth(self.leaves[:size]))
        return f"{text}\n{log_line(text, signer or self.key)}"

    def cosigned(
        self,
        size: int,
        cosigners: tuple[int, ...] | None = None,
        *,
        signer: Ed25519PrivateKey | None = None,
        at: int = T0,
    ) -> tuple[str, list[dict[str, str]]]:
        """A checkpoint of `size` leaves with the witnesses' cosignature lines, and the
        site's `cosigners` claim of it."""
        text = checkpoint_text(size, mth(self.leaves[:size]))
        note = f"{text}\n{log_line(text, signer or self.key)}"
        claim = []
        for offset, n in enumerate(self.cosigners if cosigners is None else cosigners):
            witness = self.witnesses[n]
            note += cosignature_line(text, witness.key_name, witness.key, at + offset)
            claim.append({"name": witness.key_name, "time": stamp(at + offset)})
        return note, claim

    # the site's answers
    def witnessed(self) -> dict[str, Any]:
        note, claim = self.cosigned(self.witnessed_size)
        proof = path(self.index, self.leaves[: self.witnessed_size])
        return {
            "checkpoint": note,
            "tree_size": self.witnessed_size,
            "inclusion_proof": [b64(h) for h in proof],
            "cosigners": claim,
        }

    def verification(self, *, witnessed: bool = True) -> dict[str, Any]:
        return {
            "receipt_id": RECEIPT_ID,
            "status": "valid",
            "canonical_bytes": b64(self.data),
            "output_hash": hashlib.sha256(self.data).hexdigest(),
            "signature": {"algorithm": "Ed25519", "key_id": kid_of(self.key),
                          "value": b64(self.key.sign(self.data)),
                          "keys_url": "https://receipts.example.org/.well-known/receipt-keys.json"},
            "log": {
                "origin": ORIGIN,
                "index": self.index,
                "tree_size": self.size,
                "root_hash": b64(mth(self.leaves)),
                "inclusion_proof": [b64(h) for h in path(self.index, self.leaves)],
                "checkpoint": self.checkpoint(self.size),
                "witnessed": self.witnessed() if witnessed else None,
            },
        }  # fmt: skip

    def keys(self) -> dict[str, Any]:
        return {"keys": [jwk(self.key)],
                "log": {"origin": ORIGIN, "verifier_key": log_vkey(self.key),
                        "verifier_keys": [log_vkey(self.key)],
                        "witness_policy": self.policy()}}  # fmt: skip

    def bundle(self, verification: dict[str, Any] | None = None) -> dict[str, Any]:
        verification = verification or self.verification()
        log = verification["log"]
        against = log["witnessed"] or log
        hashes = "".join(f"{h}\n" for h in against["inclusion_proof"])
        proof = f"c2sp.org/tlog-proof@v1\nindex {log['index']}\n{hashes}\n{against['checkpoint']}"
        return {"bundle": "receipt-bundle/v1", "verification": verification,
                "keys": self.keys(), "tlog_proof": proof}  # fmt: skip

"""Witness cosignatures (c2sp.org/tlog-cosignature, `cosignature/v1`, Ed25519).

A cosignature is a note signature line a witness adds to a checkpoint:

    — <witness name> base64(key id || u64 big-endian timestamp || Ed25519 signature)

over the message `cosignature/v1\\ntime <timestamp>\\n` followed by the checkpoint's note body
(its lines, each with its newline; no signature lines). The key id is that of signature type
0x04: SHA-256(name || 0x0A || 0x04 || public key)[:4]; the witness's verifier key string is
`<name>+<key id hex>+<base64(0x04 || public key)>`. It says that, as of the timestamp (POSIX
seconds), the witness had verified that this tree is consistent with every earlier one it saw
of the log: the third party's "this tree existed by then".

ML-DSA-44 cosignatures (type 0x06) are not supported: a policy naming such a key is refused
(integrity/policy.py), and their lines, like those of any unknown key, are ignored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from receiptsite.integrity import note
from receiptsite.integrity.encoding import b64, b64decode
from receiptsite.integrity.keys import SIGNATURE_SIZE, public_raw, sign, verify_signature

COSIGNATURE_TYPE = b"\x04"
HEADER = "cosignature/v1\n"
MAX_TIMESTAMP = 2**63 - 1
_BLOB_SIZE = 4 + 8 + SIGNATURE_SIZE


@dataclass(frozen=True)
class WitnessKey:
    """A witness's Ed25519 cosigning key, as its verifier key string names it."""

    name: str
    key_id: bytes
    public: bytes
    vkey: str


@dataclass(frozen=True)
class Cosignature:
    """One cosignature line, read (not yet verified)."""

    name: str
    key_id: bytes
    timestamp: int
    signature: bytes
    line: str  # the signature line, without its newline


def witness_key(vkey: str) -> WitnessKey:
    """The witness key a verifier key string names; ValueError if it is not an Ed25519
    cosignature key (type 0x04) or its key id does not match."""
    name, kid, raw = note.parse_verifier_key(vkey, COSIGNATURE_TYPE)
    return WitnessKey(name, kid, raw, vkey)


def witness_vkey(name: str, raw_public: bytes) -> str:
    return note.verifier_key(name, raw_public, COSIGNATURE_TYPE)


def message(body: str, timestamp: int) -> bytes:
    """The bytes a cosignature signs, for a checkpoint's note body (ending in a newline)."""
    _check_timestamp(timestamp)
    if not body.endswith("\n"):
        raise ValueError("a checkpoint body ends in a newline")
    return f"{HEADER}time {timestamp}\n{body}".encode()


def _check_timestamp(timestamp: int) -> None:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise ValueError("a cosignature's timestamp is a whole number of seconds")
    # Zero would be "no statement as to when", which tlog-witness forbids for a checkpoint.
    if not 0 < timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"a cosignature's timestamp is 1 to {MAX_TIMESTAMP}")


def cosign(body: str, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    """The signature line (no newline) of a cosignature of `body` at `timestamp`: what a
    witness answers. The site never cosigns; tests and test vectors do."""
    signature = sign(key, message(body, timestamp))
    kid = note.key_id(name, public_raw(key), COSIGNATURE_TYPE)
    return f"{note.SIGNATURE_PREFIX}{name} {b64(kid + struct.pack('>Q', timestamp) + signature)}"


def parse_line(line: str) -> Cosignature | None:
    """A signature line read as a cosignature, or None when it cannot be one (another kind of
    signature, or malformed). Whether it is by a known key, and verifies, is verify()'s."""
    if not isinstance(line, str) or not line.startswith(note.SIGNATURE_PREFIX):
        return None
    name, space, encoded = line.removeprefix(note.SIGNATURE_PREFIX).partition(" ")
    if not space or not name or "+" in name or any(ch.isspace() for ch in name):
        return None
    try:
        blob = b64decode(encoded)
    except ValueError:
        return None
    if len(blob) != _BLOB_SIZE:
        return None
    (timestamp,) = struct.unpack(">Q", blob[4:12])
    return Cosignature(name, blob[:4], timestamp, blob[12:], line)


def is_by(cosignature: Cosignature, key: WitnessKey) -> bool:
    """Whether the line names `key` (its name and key id): a line that does is the key's to
    judge, and one that fails to verify then makes the note malformed (signed-note)."""
    return cosignature.name == key.name and cosignature.key_id == key.key_id


def verify(cosignature: Cosignature, key: WitnessKey, body: str) -> bool:
    """Whether `cosignature` is `key`'s valid cosignature of the checkpoint `body`."""
    if not is_by(cosignature, key):
        return False
    try:
        signed = message(body, cosignature.timestamp)
    except ValueError:
        return False
    return verify_signature(key.public, signed, cosignature.signature)


def signature_lines(text: str) -> list[str]:
    """The signature lines of a signed note (after its last blank line), without newlines;
    [] when `text` has none."""
    split = text.rfind("\n\n")
    if split < 0 or not text.endswith("\n"):
        return []
    return text[split + 2 : -1].split("\n")

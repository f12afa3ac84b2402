"""Witness cosignatures (c2sp.org/tlog-cosignature, `cosignature/v1`, Ed25519 only).

A cosignature is a note signature line on a checkpoint, by a witness:

    — <witness key name> base64(key id || u64 big-endian timestamp || 64-byte Ed25519 signature)

where the key id is SHA-256(name || 0x0A || 0x04 || public key)[:4] and the signature is over

    cosignature/v1\\n
    time <POSIX seconds, decimal>\\n
    <the checkpoint's note body: origin, size, root and any extension lines>

It says: as of that time, this is the largest consistent tree the witness has seen for the log.
Only the Ed25519 type (0x04) is read; ML-DSA-44 cosignatures (0x06) sign another message and
are refused with words saying so, not silently ignored, so that a policy naming one is caught
where it is read. Like the rest of this package, written from the specification alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from receiptsite_client.verify.keys import PUBLIC_KEY_SIZE, SIGNATURE_SIZE, ed25519_verify
from receiptsite_client.verify.note import key_id_of, parse_signature_line, parse_vkey

COSIGNATURE_TYPE = b"\x04"
ML_DSA_44_TYPE = b"\x06"
COSIGNATURE_HEADER = "cosignature/v1"
MAX_TIMESTAMP = 2**63 - 1
TIMESTAMP_SIZE = 8
TIMESTAMPED_SIGNATURE_SIZE = TIMESTAMP_SIZE + SIGNATURE_SIZE


@dataclass(frozen=True)
class WitnessKey:
    """A witness's cosigning key: the (name, key id) its lines carry, and its public key."""

    name: str
    key_id: bytes
    raw: bytes

    def names(self, name: str, key_id: bytes) -> bool:
        """Whether a signature line of (name, key id) claims to be by this key: such a line
        must verify (c2sp.org/signed-note); any other is not this key's to judge."""
        return name == self.name and key_id == self.key_id


def cosignature_key_id(name: str, raw: bytes) -> bytes:
    """SHA-256(name || 0x0A || 0x04 || 32-byte Ed25519 public key)[:4]."""
    return key_id_of(name, COSIGNATURE_TYPE, raw)


def parse_witness_vkey(text: str) -> WitnessKey:
    """A witness vkey `<name>+<8 hex>+<base64(0x04 || public key)>`; ValueError for another
    type (ML-DSA-44 named as such), a key that is not 32 bytes, or a key id not the key's."""
    vkey = parse_vkey(text)
    if vkey.signature_type == ML_DSA_44_TYPE:
        raise ValueError(
            f"the witness key {vkey.name!r} is an ML-DSA-44 cosignature key (type 0x06), "
            "which this verifier does not support: only Ed25519 cosignatures (type 0x04) are"
        )
    if vkey.signature_type != COSIGNATURE_TYPE:
        raise ValueError(
            f"the witness key {vkey.name!r} is of signature type "
            f"0x{vkey.signature_type.hex()}, not 0x04 (an Ed25519 cosignature key)"
        )
    if len(vkey.material) != PUBLIC_KEY_SIZE:
        raise ValueError(f"the witness key {vkey.name!r} does not hold a 32-byte Ed25519 key")
    if vkey.key_id != cosignature_key_id(vkey.name, vkey.material):
        raise ValueError(f"the witness key {vkey.name!r} has a key id that is not its key's")
    return WitnessKey(vkey.name, vkey.key_id, vkey.material)


def valid_timestamp(timestamp: int) -> bool:
    """1 ≤ timestamp ≤ 2^63 − 1: the spec's upper bound, and 0 is no time at all (a witness
    that vouches for no moment vouches for nothing this verifier uses)."""
    return 0 < timestamp <= MAX_TIMESTAMP


def cosigned_message(body: str, timestamp: int) -> bytes:
    """The bytes a cosignature/v1 signs: the header line, the time line, the note body.
    ValueError for a timestamp out of range or a body that is not newline-terminated."""
    if not valid_timestamp(timestamp):
        raise ValueError(f"a cosignature's timestamp is 1 to 2^63-1, not {timestamp}")
    if not body.endswith("\n"):
        raise ValueError("a note body ends in a newline")
    return f"{COSIGNATURE_HEADER}\ntime {timestamp}\n{body}".encode()


def read_timestamp(signature: bytes) -> int | None:
    """The timestamp a cosignature says it was made at, unverified (to compare with what the
    site claims, or to report a line of an unknown witness); None if it holds none."""
    if len(signature) != TIMESTAMPED_SIGNATURE_SIZE:
        return None
    timestamp = int.from_bytes(signature[:TIMESTAMP_SIZE], "big")
    return timestamp if valid_timestamp(timestamp) else None


def cosignature_timestamp(
    key: WitnessKey, body: str, name: str, key_id: bytes, signature: bytes
) -> int | None:
    """Verify one parsed signature line (name, key id and what follows the key id, as
    note.parse_note gives them) as `key`'s cosignature of the checkpoint `body`: its
    timestamp (POSIX seconds) if it verifies, else None."""
    if not key.names(name, key_id):
        return None
    timestamp = read_timestamp(signature)
    if timestamp is None or not body.endswith("\n"):
        return None
    message = cosigned_message(body, timestamp)
    return timestamp if ed25519_verify(key.raw, signature[TIMESTAMP_SIZE:], message) else None


def verify_cosignature_line(line: str, key: WitnessKey, body: str) -> int | None:
    """A cosignature line of `key` on the checkpoint `body`: its timestamp if it verifies,
    else None (a malformed line, another key's, a bad signature, a timestamp out of range)."""
    try:
        name, key_id, signature = parse_signature_line(line.removesuffix("\n"))
    except ValueError:
        return None
    return cosignature_timestamp(key, body, name, key_id, signature)

"""C2SP signed notes (c2sp.org/signed-note) and log checkpoints (c2sp.org/tlog-checkpoint).

Only Ed25519 (signature type 0x01) is supported: it is the one type this site signs with.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from receiptsite.integrity.encoding import b64, b64decode
from receiptsite.integrity.keys import PUBLIC_KEY_SIZE, public_raw, sign, verify_signature

ED25519_TYPE = b"\x01"
SIGNATURE_PREFIX = "\u2014 "  # EM DASH, space
# The spec asks verifiers to cap signatures (and accept at least 16); the cap bounds the work
# a hostile note can cause.
MAX_SIGNATURES = 100
HASH_SIZE = 32

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every ASCII control except newline
_DECIMAL = re.compile(r"0|[1-9][0-9]*")  # [0-9], not \d: \d matches non-ASCII digits


def _check_name(name: str) -> None:
    if not name or "+" in name or any(ch.isspace() for ch in name) or _CONTROL.search(name):
        raise ValueError(f"{name!r} is not a note key name (non-empty, no spaces, no '+')")


def _check_text(text: str) -> None:
    if not text.endswith("\n") or _CONTROL.search(text):
        raise ValueError("note text must end in a newline and hold no control characters")


def key_id(name: str, raw_public: bytes, kind: bytes = ED25519_TYPE) -> bytes:
    """SHA-256(name || 0x0A || type || public key)[:4]: `kind` is the signature type, 0x01 for
    a note's Ed25519 signature, 0x04 for an Ed25519 cosignature (integrity/cosignature.py)."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + kind + raw_public).digest()[:4]


def verifier_key(name: str, raw_public: bytes, kind: bytes = ED25519_TYPE) -> str:
    _check_name(name)
    if len(raw_public) != PUBLIC_KEY_SIZE:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return f"{name}+{key_id(name, raw_public, kind).hex()}+{b64(kind + raw_public)}"


def parse_verifier_key(vkey: str, kind: bytes = ED25519_TYPE) -> tuple[str, bytes, bytes]:
    """(name, key id, raw public key) of a verifier key string of signature type `kind`;
    ValueError if malformed or of another type."""
    # The name holds no '+', but standard base64 can, so only the first two '+' separate.
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise ValueError("a verifier key is <name>+<key id hex>+<base64 key>")
    name, id_hex, key_b64 = parts
    _check_name(name)
    if not re.fullmatch(r"[0-9a-fA-F]{8}", id_hex):
        raise ValueError("the key id must be 8 hex digits")
    key = b64decode(key_b64)
    if len(key) != 1 + PUBLIC_KEY_SIZE or key[:1] != kind:
        raise ValueError(
            f"only Ed25519 verifier keys of type 0x{kind.hex()} (32 bytes) are supported here"
        )
    raw = key[1:]
    kid = bytes.fromhex(id_hex)
    # The id is derivable from name and key, so a mismatch means a corrupted or forged string.
    if kid != key_id(name, raw, kind):
        raise ValueError("the key id does not match the name and key")
    return name, kid, raw


def sign_note(body: str, name: str, key: Ed25519PrivateKey) -> str:
    _check_text(body)
    _check_name(name)
    signature = sign(key, body.encode("utf-8"))
    return f"{body}\n{SIGNATURE_PREFIX}{name} {b64(key_id(name, public_raw(key)) + signature)}\n"


def verify_note(note: str, verifier_keys: Iterable[str]) -> str | None:
    """The note's text if a known key signed it, else None.

    Follows the spec's verifier rules: signatures from unknown (name, id) pairs are ignored,
    a known key's failing signature rejects the whole note, and at least one known signature
    must verify. A malformed note gives None; a malformed verifier key is the caller's
    mistake and raises ValueError.
    """
    known: dict[tuple[str, bytes], bytes] = {}
    for vkey in verifier_keys:
        name, kid, raw = parse_verifier_key(vkey)
        known[(name, kid)] = raw
    if not isinstance(note, str):
        return None
    try:
        note.encode("utf-8")  # lone surrogates cannot be the UTF-8 the spec requires
        _check_text(note)
    except ValueError:
        return None
    # The text ends at the last blank line; signature lines are never empty.
    split = note.rfind("\n\n")
    if split < 0:
        return None
    body, lines = note[: split + 1], note[split + 2 :].split("\n")[:-1]
    if not lines or len(lines) > MAX_SIGNATURES:
        return None
    message = body.encode("utf-8")
    verified = False
    for line in lines:
        name, space, sig_b64 = line.removeprefix(SIGNATURE_PREFIX).partition(" ")
        if not line.startswith(SIGNATURE_PREFIX) or not space:
            return None
        try:
            _check_name(name)
            blob = b64decode(sig_b64)
        except ValueError:
            return None
        if len(blob) <= 4:
            return None
        public = known.get((name, blob[:4]))
        if public is None:
            continue
        if not verify_signature(public, message, blob[4:]):
            return None
        verified = True
    return body if verified else None


def checkpoint_body(origin: str, size: int, root: bytes) -> str:
    if not origin or "\n" in origin:
        raise ValueError("the origin must be one non-empty line")
    if size < 0 or len(root) != HASH_SIZE:
        raise ValueError("a checkpoint needs a size >= 0 and a 32-byte root")
    return f"{origin}\n{size}\n{b64(root)}\n"


def parse_checkpoint(body: str) -> tuple[str, int, bytes]:
    """(origin, size, root) of a checkpoint text; extension lines are allowed and ignored."""
    if not body.endswith("\n"):
        raise ValueError("a checkpoint ends in a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3 or not all(lines):
        raise ValueError("a checkpoint is at least three non-empty lines")
    origin, size_text, root_text = lines[:3]
    if not _DECIMAL.fullmatch(size_text):
        raise ValueError("the tree size must be decimal with no leading zeros")
    root = b64decode(root_text)
    if len(root) != HASH_SIZE:
        raise ValueError("the root hash must be 32 bytes")
    return origin, int(size_text), root

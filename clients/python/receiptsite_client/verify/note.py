"""C2SP signed notes (c2sp.org/signed-note) and the checkpoints they carry
(c2sp.org/tlog-checkpoint): reading a note into its text and signature lines, a checkpoint's
text into (origin, tree size, root hash), the key id a note signature names, and verifier keys
(vkeys, `<name>+<hex key id>+<base64(type || key)>`), the form a tlog-policy file names keys
in."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.merkle import HASH_SIZE

MAX_NOTE_SIGNATURES = 100  # c2sp.org/signed-note asks verifiers to cap them
NOTE_SIGNATURE_PREFIX = "\u2014 "  # EM DASH, space
ED25519_NOTE_TYPE = b"\x01"
ED25519_KEY_SIZE = 32

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every ASCII control but the newline
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_KEY_ID_HEX = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True)
class Note:
    text: str  # up to and including the newline before the LAST blank line
    signatures: list[tuple[str, bytes, bytes]]  # (key name, key id, signature)


def key_id_of(name: str, signature_type: bytes, material: bytes) -> bytes:
    """c2sp.org/signed-note: SHA-256(key name || 0x0A || signature type || public key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + signature_type + material).digest()[:4]


def note_key_id(name: str, raw: bytes) -> bytes:
    """c2sp.org/signed-note: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    return key_id_of(name, ED25519_NOTE_TYPE, raw)


def valid_key_name(name: str) -> bool:
    """c2sp.org/signed-note: a key name is non-empty, with no Unicode space and no plus."""
    return bool(name) and "+" not in name and not any(ch.isspace() for ch in name)


@dataclass(frozen=True)
class VerifierKey:
    """A vkey, read but not yet judged: what its type means is the caller's to say."""

    name: str
    key_id: bytes
    signature_type: bytes  # one byte
    material: bytes


def parse_vkey(text: str) -> VerifierKey:
    """`<key name>+<8 lowercase hex>+<base64(signature type || public key)>`.

    The name cannot hold a plus, so the first two pluses split it; the base64 may hold more.
    ValueError, naming the part, for anything else."""
    name, plus, rest = text.partition("+")
    hex_id, plus_again, encoded = rest.partition("+")
    if not (plus and plus_again):
        raise ValueError(f"{text[:60]!r} is not a vkey (<name>+<key id>+<key>)")
    if not valid_key_name(name):
        raise ValueError(f"the vkey's key name {name[:60]!r} is empty or holds a space")
    if not _KEY_ID_HEX.fullmatch(hex_id):
        raise ValueError(f"the vkey's key id {hex_id[:20]!r} is not 8 lowercase hex digits")
    try:
        blob = b64decode(encoded)
    except ValueError:
        raise ValueError(f"the vkey of {name!r} does not end in standard base64") from None
    if len(blob) < 2:
        raise ValueError(f"the vkey of {name!r} holds no public key")
    return VerifierKey(name, bytes.fromhex(hex_id), blob[:1], blob[1:])


def parse_ed25519_vkey(text: str) -> VerifierKey:
    """A log's vkey: an Ed25519 note key (type 0x01) whose key id is the one signed-note
    computes, so that signature lines can be matched to it."""
    vkey = parse_vkey(text)
    if vkey.signature_type != ED25519_NOTE_TYPE:
        raise ValueError(
            f"the vkey of {vkey.name!r} is of signature type 0x{vkey.signature_type.hex()}, "
            "not 0x01 (an Ed25519 note key, as a log signs checkpoints with)"
        )
    if len(vkey.material) != ED25519_KEY_SIZE:
        raise ValueError(f"the vkey of {vkey.name!r} does not hold a 32-byte Ed25519 key")
    if vkey.key_id != note_key_id(vkey.name, vkey.material):
        raise ValueError(f"the vkey of {vkey.name!r} has a key id that is not its key's")
    return vkey


def parse_note(note: object) -> Note:
    """A signed note read as the site reads it: the text ends at the last blank line, every
    line after it is a signature line. ValueError if it is not a well-formed note."""
    if not isinstance(note, str):
        raise ValueError("the checkpoint is not text")
    note.encode("utf-8")  # lone surrogates raise UnicodeEncodeError, a ValueError
    if not note.endswith("\n") or _CONTROL.search(note):
        raise ValueError("a note ends in a newline and holds no control characters")
    split = note.rfind("\n\n")
    if split < 0:
        raise ValueError("the note has no blank line before its signatures")
    text, lines = note[: split + 1], note[split + 2 :].split("\n")[:-1]
    if not lines or len(lines) > MAX_NOTE_SIGNATURES:
        raise ValueError(f"a note carries 1 to {MAX_NOTE_SIGNATURES} signature lines")
    return Note(text, [parse_signature_line(line) for line in lines])


def parse_signature_line(line: str) -> tuple[str, bytes, bytes]:
    """`— <key name> <base64(key id || signature)>` (its newline left off) as (key name,
    key id, signature). ValueError if it is not one."""
    if not line.startswith(NOTE_SIGNATURE_PREFIX):
        raise ValueError("a signature line starts with an em dash and a space")
    name, space, encoded = line[len(NOTE_SIGNATURE_PREFIX) :].partition(" ")
    if not space or not valid_key_name(name):
        raise ValueError("a signature line is '— <key name> <base64>'")
    blob = b64decode(encoded)
    if len(blob) <= 4:
        raise ValueError("a note signature is a 4-byte key id and a signature")
    return name, blob[:4], blob[4:]


def parse_checkpoint(text: str) -> tuple[str, int, bytes]:
    """(origin, tree size, root hash) of a checkpoint's text (c2sp.org/tlog-checkpoint)."""
    lines = text[:-1].split("\n") if text.endswith("\n") else []
    if len(lines) < 3 or not all(lines):
        raise ValueError("a checkpoint is at least three non-empty lines")
    origin, size, root_text = lines[:3]
    if not _DECIMAL.fullmatch(size):
        raise ValueError("the tree size is not a decimal number")
    root = b64decode(root_text)
    if len(root) != HASH_SIZE:
        raise ValueError("the root hash is not 32 bytes")
    return origin, int(size), root

"""C2SP signed notes (c2sp.org/signed-note) and the checkpoints they carry
(c2sp.org/tlog-checkpoint): reading a note into its text and signature lines, a checkpoint's
text into (origin, tree size, root hash), and the key id a note signature names."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.merkle import HASH_SIZE

MAX_NOTE_SIGNATURES = 100  # c2sp.org/signed-note asks verifiers to cap them
NOTE_SIGNATURE_PREFIX = "\u2014 "  # EM DASH, space
ED25519_NOTE_TYPE = b"\x01"

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every ASCII control but the newline
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Note:
    text: str  # up to and including the newline before the LAST blank line
    signatures: list[tuple[str, bytes, bytes]]  # (key name, key id, signature)


def note_key_id(name: str, raw: bytes) -> bytes:
    """c2sp.org/signed-note: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + ED25519_NOTE_TYPE + raw).digest()[:4]


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
    signatures = []
    for line in lines:
        if not line.startswith(NOTE_SIGNATURE_PREFIX):
            raise ValueError("a signature line starts with an em dash and a space")
        name, space, encoded = line[len(NOTE_SIGNATURE_PREFIX) :].partition(" ")
        if not space or not name or "+" in name or any(ch.isspace() for ch in name):
            raise ValueError("a signature line is '— <key name> <base64>'")
        blob = b64decode(encoded)
        if len(blob) <= 4:
            raise ValueError("a note signature is a 4-byte key id and a signature")
        signatures.append((name, blob[:4], blob[4:]))
    return Note(text, signatures)


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

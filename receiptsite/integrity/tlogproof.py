"""C2SP transparency log proofs (c2sp.org/tlog-proof): one entry's index, its RFC 6962 / 9162
inclusion proof and the log's signed checkpoint, as one text that standard tlog tooling reads.

    c2sp.org/tlog-proof@v1
    [extra <base64>]
    index <decimal>
    <base64 hash>            (zero or more: from the leaf's sibling up to the root's child)

    <the signed checkpoint, verbatim>

The checkpoint is a signed note (integrity/note.py); a verifier checks its signature and that
the proof leads from the entry's leaf hash to the checkpoint's root (integrity/merkle.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from receiptsite.integrity.encoding import b64, b64decode

HEADER = "c2sp.org/tlog-proof@v1"
HASH_SIZE = 32
# A tree of fewer than 2**64 leaves needs at most 64 hashes: more is no proof, and bounds the
# work a hostile text can cause.
MAX_HASHES = 64
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")  # ASCII digits, no leading zero


@dataclass(frozen=True)
class TlogProof:
    index: int
    hashes: list[bytes]
    checkpoint: str  # the signed note, verbatim
    extra: bytes | None = None  # unauthenticated: never trusted


def format_proof(
    index: int, hashes: Sequence[bytes], checkpoint: str, extra: bytes | None = None
) -> str:
    if index < 0 or any(len(h) != HASH_SIZE for h in hashes) or not checkpoint:
        raise ValueError("a proof is an index >= 0, 32-byte hashes and a checkpoint")
    lines = [HEADER]
    if extra is not None:
        lines.append(f"extra {b64(extra)}")
    lines.append(f"index {index}")
    lines.extend(b64(h) for h in hashes)
    return "\n".join(lines) + "\n\n" + checkpoint


def parse_proof(text: str) -> TlogProof:
    """The parts of a tlog proof; ValueError if `text` is not one (the checkpoint's own form
    and signatures are the note reader's to judge)."""
    head, blank, checkpoint = text.partition("\n\n")
    if not blank or not checkpoint:
        raise ValueError("a tlog proof ends with a blank line and the checkpoint")
    lines = head.split("\n")
    if lines[0] != HEADER:
        raise ValueError(f"a tlog proof starts with the line {HEADER!r}")
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        extra = b64decode(rest.pop(0).removeprefix("extra "))
    if not rest or not rest[0].startswith("index "):
        raise ValueError("the index line ('index <decimal>') is missing")
    number = rest.pop(0).removeprefix("index ")
    if not _DECIMAL.fullmatch(number):
        raise ValueError("the index is not a decimal number without leading zeros")
    if len(rest) > MAX_HASHES:
        raise ValueError(f"an inclusion proof has at most {MAX_HASHES} hashes")
    hashes = [b64decode(line) for line in rest]
    if any(len(h) != HASH_SIZE for h in hashes):
        raise ValueError("every proof hash is 32 bytes")
    return TlogProof(int(number), hashes, checkpoint, extra)

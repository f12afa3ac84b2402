"""A reader of C2SP transparency log proofs (c2sp.org/tlog-proof), the log proof an offline
bundle carries:

    c2sp.org/tlog-proof@v1
    [extra <base64>]
    index <decimal, no leading zeros>
    <base64 SHA-256 hash>      (zero or more, from the leaf's sibling up to the root's child)

    <the log's signed checkpoint, verbatim>

Like the rest of this package it shares no code with the site: the site writes these texts,
this module reads them on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.merkle import HASH_SIZE

HEADER = "c2sp.org/tlog-proof@v1"
MAX_HASHES = 64  # a tree of fewer than 2**64 leaves needs no more
_INDEX = re.compile(r"index (0|[1-9][0-9]{0,19})")


@dataclass(frozen=True)
class TlogProof:
    index: int
    hashes: list[bytes]
    checkpoint: str  # the signed note, verbatim: the note reader judges it
    extra: bytes | None  # unauthenticated, never trusted


def _b64(line: str) -> bytes:
    try:
        return b64decode(line)
    except ValueError:
        raise ValueError(f"{line[:60]!r} is not standard padded base64") from None


def parse_tlog_proof(text: object) -> TlogProof:
    """The parts of a tlog proof text; ValueError naming what is wrong otherwise."""
    if not isinstance(text, str):
        raise ValueError("the tlog proof is not text")
    head, blank, checkpoint = text.partition("\n\n")
    if not blank or not checkpoint:
        raise ValueError("a tlog proof ends with an empty line and then the checkpoint")
    lines = head.split("\n")
    if lines[0] != HEADER:
        raise ValueError(f"its first line is not {HEADER!r}")
    at = 1
    extra = None
    if at < len(lines) and lines[at].startswith("extra "):
        extra = _b64(lines[at][len("extra ") :])
        at += 1
    match = _INDEX.fullmatch(lines[at]) if at < len(lines) else None
    if match is None:
        raise ValueError("it has no line 'index <decimal>' (no leading zeros) after the header")
    hashes_text = lines[at + 1 :]
    if len(hashes_text) > MAX_HASHES:
        raise ValueError(f"its inclusion proof has more than {MAX_HASHES} hashes")
    hashes = [_b64(line) for line in hashes_text]
    if any(len(h) != HASH_SIZE for h in hashes):
        raise ValueError("a proof line is not a 32-byte hash")
    return TlogProof(int(match[1]), hashes, checkpoint, extra)

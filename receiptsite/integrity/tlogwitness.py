"""The log's side of the witness protocol (c2sp.org/tlog-witness): the add-checkpoint request
body, and the two answers that carry data (a 409's size, a 200's cosignature lines).

    POST <submission prefix>/add-checkpoint

    old <size the witness holds>
    <consistency proof from that size, one base64 hash a line: at most 63>

    <the signed checkpoint>
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from receiptsite.integrity import note
from receiptsite.integrity.encoding import b64

SIZE_TYPE = "text/x.tlog.size"
MAX_PROOF_LINES = 63
HASH_SIZE = 32
_DECIMAL = re.compile(rb"(0|[1-9][0-9]{0,19})\n")


def add_checkpoint_body(old: int, proof: Sequence[bytes], checkpoint: str) -> bytes:
    """The request body submitting `checkpoint` (a signed note) to a witness that holds the
    tree of `old` leaves, with the consistency proof from that tree."""
    if old < 0 or len(proof) > MAX_PROOF_LINES or any(len(h) != HASH_SIZE for h in proof):
        raise ValueError("a submission is a size >= 0 and at most 63 hashes of 32 bytes")
    if old == 0 and proof:
        raise ValueError("nothing proves the empty tree's consistency: no proof from size 0")
    lines = [f"old {old}", *(b64(h) for h in proof)]
    return ("\n".join(lines) + "\n\n" + checkpoint).encode("utf-8")


def parse_size(body: bytes) -> int:
    """The tree size a 409 answer's `text/x.tlog.size` body holds; ValueError otherwise."""
    match = _DECIMAL.fullmatch(body)
    if match is None:
        raise ValueError("a tlog size is a decimal number followed by a newline")
    return int(match.group(1))


def signature_lines(body: bytes) -> list[str]:
    """The note signature lines of a 200 answer (each `— …` and a newline), without their
    newlines; ValueError when the body is anything else."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the answer is not UTF-8") from None
    if not text.endswith("\n"):
        raise ValueError("the answer does not end in a newline")
    lines = text[:-1].split("\n")
    if not lines or any(not line.startswith(note.SIGNATURE_PREFIX) for line in lines):
        raise ValueError("the answer is not note signature lines")
    if len(lines) > note.MAX_SIGNATURES:
        raise ValueError(f"the answer has more than {note.MAX_SIGNATURES} signature lines")
    return lines

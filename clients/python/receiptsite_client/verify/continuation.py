"""A log that ended and continues under a new origin: the site's signed statement
(log-continuation/v1), published in its keys document's `log.ended` after `manage.py
continuelog`, and how a checkpoint kept from the ended log is followed into the new one.

The statement is a signed note, signed under the ended log's name, whose text is:

    receiptsite log-continuation/v1
    ended <the ended log's origin>
    signed <size> <base64 root>        the largest tree the ended log had signed
    kept <size> <base64 root>          the stored tree the new log continues from
    continues-as <the new log's origin>

The new log is the same tree under a new name: a kept checkpoint of no more than `kept` leaves
is a tree of the new log too (the caller still checks its root against the new log's leaves);
one of more is of leaves the site says it lost.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

HEADER = "receiptsite log-continuation/v1"
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Statement:
    ended: str
    signed_size: int
    signed_root: bytes
    kept_size: int
    kept_root: bytes
    continues_as: str

    def words(self) -> str:
        return (
            f"the log {self.ended} ended at {self.kept_size} leaves, having signed "
            f"{self.signed_size}, and continues as {self.continues_as}"
        )


def _root(text: str) -> bytes:
    try:
        root = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not base64") from None
    if len(root) != 32:
        raise ValueError("a root hash is 32 bytes")
    return root


def parse_statement(text: str) -> Statement:
    """The statement of a note's text; ValueError when it is not one."""
    lines = text.split("\n")
    if len(lines) != 6 or lines[0] != HEADER or lines[5] != "":
        raise ValueError(f"not a {HEADER} statement")
    words = [line.split(" ") for line in lines[1:5]]
    shapes = [("ended", 2), ("signed", 3), ("kept", 3), ("continues-as", 2)]
    for got, (label, count) in zip(words, shapes, strict=True):
        if got[0] != label or len(got) != count:
            raise ValueError(f"line {' '.join(got)!r} is not {label!r}")
    if not (_DECIMAL.fullmatch(words[1][1]) and _DECIMAL.fullmatch(words[2][1])):
        raise ValueError("a tree size is decimal with no leading zeros")
    return Statement(
        ended=words[0][1],
        signed_size=int(words[1][1]),
        signed_root=_root(words[1][2]),
        kept_size=int(words[2][1]),
        kept_root=_root(words[2][2]),
        continues_as=words[3][1],
    )


def chain_of(
    ended: object, verified_text: Callable[[str, str], str | None]
) -> tuple[dict[str, Statement], list[str]]:
    """The statements of a keys document's `log.ended` whose signature verifies, by the origin
    each ended, and a line for each entry that does not. `verified_text(note, name)` is the
    note's text when a trusted key signed it under `name`, else None."""
    chain: dict[str, Statement] = {}
    problems: list[str] = []
    entries: Iterable[object] = ended if isinstance(ended, list) else []
    for entry in entries:
        note = entry.get("statement") if isinstance(entry, dict) else None
        origin = entry.get("origin") if isinstance(entry, dict) else None
        if not isinstance(note, str) or not isinstance(origin, str):
            problems.append("an entry of log.ended has no statement and origin")
            continue
        text = verified_text(note, origin)
        try:
            statement = parse_statement(text) if text is not None else None
        except ValueError as error:
            problems.append(f"the statement that ends {origin!r} is not one ({error})")
            continue
        if statement is None or statement.ended != origin:
            problems.append(f"the statement that ends {origin!r} is not signed by a trusted key")
            continue
        chain[statement.ended] = statement
    return chain, problems


def follow(origin: str, size: int, chain: dict[str, Statement], to: str) -> tuple[bool, str]:
    """Whether a tree of `size` leaves of the log `origin` is a tree of the log `to` (each
    continuation kept it), and what was followed, or why not."""
    steps: list[str] = []
    while origin != to:
        statement = chain.get(origin)
        if statement is None or len(steps) > len(chain):
            return False, f"the keys document says of no log {origin!r} that {to!r} continues it"
        if size > statement.signed_size:
            return False, (
                f"it is of {size} leaves, more than the site says it signed: {statement.words()}"
            )
        if size > statement.kept_size:
            return False, (
                f"it is of {size} leaves, which the site says it lost: {statement.words()}"
            )
        steps.append(statement.words())
        origin = statement.continues_as
    return True, "; ".join(steps)

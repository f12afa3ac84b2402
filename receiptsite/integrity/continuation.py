"""log-continuation/v1: the signed statement that ends one log and continues it under a new
origin (`manage.py continuelog`, after a restore that lost trees the site had signed).

A C2SP signed note (c2sp.org/signed-note) signed by the site's active key under the ended
log's name (its origin), so that whoever trusts that log's verifier key can check it. Its text:

    receiptsite log-continuation/v1
    ended <the ended log's origin>
    signed <size> <base64 root>        the largest tree the ended log had signed, as remembered
    kept <size> <base64 root>          the stored tree the new log continues from
    continues-as <the new log's origin>

The new log is the same stored tree under the new name: its first checkpoint is the kept
tree, signed under the new origin, and every leaf below `kept` keeps its index. Leaves from
`kept` to `signed` were signed by the ended log and are lost; the new log's leaves at those
indexes are other receipts. (A kept tree as large as the signed one, or larger, is of a log
rewritten rather than cut short: its tree of `signed` leaves is not the one signed.) The first
line is not an origin of a log, so a checkpoint verifier never takes the statement for a
checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from receiptsite.integrity.encoding import b64, b64decode

HEADER = "receiptsite log-continuation/v1"
HASH_SIZE = 32
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Continuation:
    ended: str
    signed_size: int
    signed_root: bytes
    kept_size: int
    kept_root: bytes
    continues_as: str

    def __post_init__(self) -> None:
        for origin in (self.ended, self.continues_as):
            if not origin or any(ch.isspace() for ch in origin) or "+" in origin:
                raise ValueError(f"{origin!r} is not a log origin (non-empty, no spaces, no '+')")
        if self.ended == self.continues_as:
            raise ValueError("a log cannot continue under its own origin")
        if min(self.signed_size, self.kept_size) < 0:
            raise ValueError("tree sizes are not negative")
        if len(self.signed_root) != HASH_SIZE or len(self.kept_root) != HASH_SIZE:
            raise ValueError("a root hash is 32 bytes")

    @property
    def lost(self) -> int:
        """Leaves the ended log had signed that the kept tree does not hold: 0 when the kept
        tree is as large (its tree of `signed_size` leaves then differs from the one signed: a
        rewritten log, whose leaves from the first that differs on are lost, which the
        statement cannot say)."""
        return max(self.signed_size - self.kept_size, 0)

    def body(self) -> str:
        return (
            f"{HEADER}\n"
            f"ended {self.ended}\n"
            f"signed {self.signed_size} {b64(self.signed_root)}\n"
            f"kept {self.kept_size} {b64(self.kept_root)}\n"
            f"continues-as {self.continues_as}\n"
        )

    @classmethod
    def parse(cls, body: str) -> Continuation:
        """The statement of a note's text; ValueError when it is not one."""
        lines = body.split("\n")
        if len(lines) != 6 or lines[0] != HEADER or lines[5] != "":
            raise ValueError(f"not a {HEADER} statement")
        fields: dict[str, list[str]] = {}
        for line, label, parts in zip(
            lines[1:5], ("ended", "signed", "kept", "continues-as"), (1, 2, 2, 1), strict=True
        ):
            words = line.split(" ")
            if words[0] != label or len(words) != parts + 1:
                raise ValueError(f"line {line!r} is not '{label}' with {parts} value(s)")
            fields[label] = words[1:]
        sizes = [fields["signed"][0], fields["kept"][0]]
        if not all(_DECIMAL.fullmatch(size) for size in sizes):
            raise ValueError("a tree size is decimal with no leading zeros")
        return cls(
            ended=fields["ended"][0],
            signed_size=int(sizes[0]),
            signed_root=b64decode(fields["signed"][1]),
            kept_size=int(sizes[1]),
            kept_root=b64decode(fields["kept"][1]),
            continues_as=fields["continues-as"][0],
        )

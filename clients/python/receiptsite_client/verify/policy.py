"""Transparency log trust policies (c2sp.org/tlog-policy): which logs and witnesses are known,
and the quorum of witnesses whose cosignatures make a checkpoint count.

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all|any|<k> <name>...
    quorum <name>

Read exactly as the specification says, so that a policy means here what it means to every
other verifier: the file is octets (tab, newline, 0x20-0x7E and 0x80-0xFF only; non-ASCII is
opaque); items are separated by spaces and tabs only; blank lines and lines whose first
non-blank octet is `#` are ignored; a group or the quorum names only what preceding lines
define; witnesses and groups share one namespace, in which `none` is predefined (a quorum that
needs nobody) and cannot be a member; a name is a group member at most once in the whole file
(so that a witness counts towards the quorum in one way only); 1 ≤ k ≤ n; exactly one quorum
line; no two logs, and no two witnesses, wrap the same public key. Every error is a ValueError
that names its line.

Log vkeys are Ed25519 note keys (type 0x01) named by the log's origin: they are the keys a
checkpoint (and, for this site, a receipt) must be signed by. Witness vkeys are Ed25519
cosignature keys (type 0x04); ML-DSA-44 keys (0x06) are refused, since they cannot be checked
here. One leniency: the last line may lack its newline, as editors leave files.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from receiptsite_client.verify.cosignature import WitnessKey, parse_witness_vkey
from receiptsite_client.verify.encoding import b64url
from receiptsite_client.verify.keys import TrustedKey, trusted_keys
from receiptsite_client.verify.note import parse_ed25519_vkey

NONE = "none"  # the predefined name of the quorum that needs no cosignature
_FORBIDDEN = re.compile(rb"[^\t\n\x20-\x7e\x80-\xff]")
_SEPARATOR = re.compile(rb"[ \t]+")
_DIGITS = re.compile(rb"[0-9]+")


@dataclass(frozen=True)
class PolicyLog:
    origin: str  # the vkey's key name: the checkpoint origin the key signs for
    key_id: bytes
    raw: bytes  # the 32-byte Ed25519 public key
    url: str | None


@dataclass(frozen=True)
class PolicyWitness:
    name: str  # the policy's own name for it (not the key name its lines carry)
    key: WitnessKey
    url: str | None


@dataclass(frozen=True)
class Group:
    name: str
    threshold: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    logs: tuple[PolicyLog, ...]
    witnesses: Mapping[str, PolicyWitness]
    groups: Mapping[str, Group]
    quorum: str

    @property
    def log_keys(self) -> list[tuple[str, bytes]]:
        """(origin, raw Ed25519 public key) of every log: the keys to trust."""
        return [(log.origin, log.raw) for log in self.logs]

    def keys_of_log(self, origin: str) -> list[bytes]:
        return [log.raw for log in self.logs if log.origin == origin]

    def witnesses_named(self, key_name: str, key_id: bytes) -> list[PolicyWitness]:
        """The witnesses whose key a signature line of (key name, key id) claims to be."""
        return [w for w in self.witnesses.values() if w.key.names(key_name, key_id)]

    def met(self, cosigned: Iterable[str]) -> bool:
        """Whether the witnesses named (by their policy names), each of which validly
        cosigned, meet the quorum."""
        return _witnessed(self, self.quorum, frozenset(cosigned))

    def describe(self, name: str | None = None) -> str:
        """The rule a name stands for, in words: `X-and-Y (all of: X (2 of: a, b, c), …)`."""
        name = self.quorum if name is None else name
        group = self.groups.get(name)
        if name == NONE:
            return "none (no cosignature needed)"
        if group is None:
            return name
        count = str(group.threshold)
        if group.threshold == 1:
            count = "any"
        elif group.threshold == len(group.members):
            count = "all"
        members = ", ".join(self.describe(member) for member in group.members)
        return f"{name} ({count} of: {members})"


def _witnessed(policy: Policy, name: str, cosigned: frozenset[str]) -> bool:
    if name == NONE:
        return True
    group = policy.groups.get(name)
    if group is None:
        return name in cosigned
    met = sum(_witnessed(policy, member, cosigned) for member in group.members)
    return met >= group.threshold


def _text(token: bytes) -> str:
    """A name or URL: opaque octets, kept exactly (surrogateescape round-trips any byte)."""
    return token.decode("utf-8", "surrogateescape")


def _vkey_text(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the vkey is not UTF-8, as a key name must be") from None


class _Reader:
    """The policy as read so far: what each line may refer to is what came before it."""

    def __init__(self) -> None:
        self.logs: list[PolicyLog] = []
        self.witnesses: dict[str, PolicyWitness] = {}
        self.groups: dict[str, Group] = {}
        self.members: set[str] = set()
        self.quorum: str | None = None

    def defined(self, name: str) -> bool:
        return name == NONE or name in self.witnesses or name in self.groups

    def new_name(self, name: str, number: int) -> None:
        if self.defined(name):
            what = "predefined" if name == NONE else "already defined"
            raise ValueError(f"line {number}: the name {name!r} is {what}")

    def log(self, items: list[bytes], number: int) -> None:
        if len(items) not in (2, 3):
            raise ValueError(f"line {number}: a log line is 'log <vkey> [<url>]'")
        try:
            vkey = parse_ed25519_vkey(_vkey_text(items[1]))
        except ValueError as error:
            raise ValueError(f"line {number}: {error}") from None
        if any(log.raw == vkey.material for log in self.logs):
            raise ValueError(f"line {number}: this log's key is already a log's")
        url = _text(items[2]) if len(items) == 3 else None
        self.logs.append(PolicyLog(vkey.name, vkey.key_id, vkey.material, url))

    def witness(self, items: list[bytes], number: int) -> None:
        if len(items) not in (3, 4):
            raise ValueError(f"line {number}: a witness line is 'witness <name> <vkey> [<url>]'")
        name = _text(items[1])
        self.new_name(name, number)
        try:
            key = parse_witness_vkey(_vkey_text(items[2]))
        except ValueError as error:
            raise ValueError(f"line {number}: {error}") from None
        if any(w.key.raw == key.raw for w in self.witnesses.values()):
            raise ValueError(f"line {number}: the key of witness {name!r} is already a witness's")
        url = _text(items[3]) if len(items) == 4 else None
        self.witnesses[name] = PolicyWitness(name, key, url)

    def group(self, items: list[bytes], number: int) -> None:
        if len(items) < 4:
            raise ValueError(
                f"line {number}: a group line is 'group <name> all|any|<k> <member>...', "
                "with at least one member"
            )
        name = _text(items[1])
        self.new_name(name, number)
        members = [_text(item) for item in items[3:]]
        for member in members:
            if member == NONE:
                raise ValueError(f"line {number}: 'none' cannot be a group member")
            if not self.defined(member):
                raise ValueError(f"line {number}: {member!r} is not defined on a line before")
            if member in self.members:
                raise ValueError(
                    f"line {number}: {member!r} is already a group member (a name is listed "
                    "as a member at most once)"
                )
            self.members.add(member)
        self.groups[name] = Group(name, _threshold(items[2], len(members), number), tuple(members))

    def set_quorum(self, items: list[bytes], number: int) -> None:
        if len(items) != 2:
            raise ValueError(f"line {number}: a quorum line is 'quorum <name>'")
        if self.quorum is not None:
            raise ValueError(f"line {number}: a policy has exactly one quorum line")
        name = _text(items[1])
        if not self.defined(name):
            raise ValueError(f"line {number}: {name!r} is not defined on a line before")
        self.quorum = name


def _threshold(token: bytes, n: int, number: int) -> int:
    if token == b"all":
        return n
    if token == b"any":
        return 1
    if not _DIGITS.fullmatch(token):
        raise ValueError(f"line {number}: a group's threshold is all, any or a decimal number")
    k = int(token)
    if not 1 <= k <= n:
        raise ValueError(f"line {number}: a group's threshold k is 1 <= k <= {n}, not {k}")
    return k


_KEYWORDS = {
    b"log": _Reader.log,
    b"witness": _Reader.witness,
    b"group": _Reader.group,
    b"quorum": _Reader.set_quorum,
}


def parse_policy(data: bytes | str) -> Policy:
    """A tlog-policy file's policy; ValueError naming the line of the first thing wrong."""
    if isinstance(data, str):
        data = data.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, a ValueError
    bad = _FORBIDDEN.search(data)
    if bad is not None:
        number = data.count(b"\n", 0, bad.start()) + 1
        raise ValueError(
            f"line {number}: the octet 0x{data[bad.start()]:02x} is not allowed (only tab, "
            "newline, 0x20-0x7E and 0x80-0xFF are)"
        )
    reader = _Reader()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    for number, line in enumerate(lines, start=1):
        stripped = line.strip(b" \t")
        if not stripped or stripped.startswith(b"#"):
            continue
        items = _SEPARATOR.split(stripped)
        handle = _KEYWORDS.get(items[0])
        if handle is None:
            raise ValueError(
                f"line {number}: {_text(items[0])!r} is not a keyword (log, witness, group, quorum)"
            )
        handle(reader, items, number)
    if reader.quorum is None:
        raise ValueError("the policy has no quorum line (it needs exactly one)")
    return Policy(tuple(reader.logs), dict(reader.witnesses), dict(reader.groups), reader.quorum)


def trusted_log_keys(
    policy: Policy, keys: dict[str, Any] | None, origin: str | None
) -> list[TrustedKey]:
    """The keys a policy makes trusted for the log `origin` (every log's, when None): each
    log key taken as a pinned key is (keys.trusted_keys), so that a keys document's signed
    history hands over from it to the keys activated after it and its `compromised` marks
    hold. A key the document does not know stands as the policy's ("policy")."""
    found: dict[str, TrustedKey] = {}
    for log in policy.logs:
        if origin is not None and log.origin != origin:
            continue
        for key in trusted_keys(keys, b64url(log.raw)):
            found.setdefault(key.kid, key)
    return [
        dataclasses.replace(key, status="policy") if key.status == "pinned" else key
        for key in found.values()
    ]

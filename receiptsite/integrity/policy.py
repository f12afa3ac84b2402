"""Transparency log trust policies (c2sp.org/tlog-policy): which logs and witnesses are known,
and the quorum of witnesses whose cosignatures make a checkpoint one to rely on.

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all|any|<k> <member>...
    quorum <name>

Lines are separated by newlines, their items by spaces and tabs; blank lines and lines that
start with `#` are ignored. A group or the quorum may name only what earlier lines defined;
`none` is predefined (a quorum that needs no cosignature) and cannot be a member. Witness keys
are cosignature keys (integrity/cosignature.py, Ed25519 only); log keys are signed-note
Ed25519 keys whose name is the log's origin.

parse() reads a policy as the spec defines it; the site's own use of one (every witness needs
its URL, `quorum none` makes no sense for a log asking to be witnessed) is checked where the
setting is read (receiptsite/config.py).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from receiptsite.integrity import cosignature, note

NONE = "none"
# The spec asks for at least 32 of each; a bound keeps a hostile file's work bounded.
MAX_ENTRIES = 256
# tab, newline, printable ASCII, and every octet with the high bit set (opaque, e.g. UTF-8)
_ALLOWED = re.compile(rb"[\t\n\x20-\x7e\x80-\xff]*")
_THRESHOLD = re.compile(r"[0-9]+")  # decimal; 1 <= k <= n is checked apart


@dataclass(frozen=True)
class Log:
    origin: str
    public: bytes
    vkey: str
    url: str | None


@dataclass(frozen=True)
class Witness:
    name: str  # the policy's own name for it (meaningless outside the file)
    key: cosignature.WitnessKey
    url: str | None


@dataclass(frozen=True)
class Group:
    name: str
    threshold: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    logs: tuple[Log, ...]
    witnesses: dict[str, Witness]
    groups: dict[str, Group]
    quorum: str
    order: tuple[str, ...] = field(default=())  # witness and group names, as defined

    def satisfied(self, cosigned: Collection[str]) -> bool:
        """Whether witnesses of these (policy) names, each having validly cosigned one
        checkpoint, meet the quorum."""
        return self._witnessed(self.quorum, frozenset(cosigned))

    def _witnessed(self, name: str, cosigned: frozenset[str]) -> bool:
        if name == NONE:
            return True
        if name in self.witnesses:
            return name in cosigned
        group = self.groups[name]
        count = sum(1 for member in group.members if self._witnessed(member, cosigned))
        return count >= group.threshold

    def witness_for(self, line: cosignature.Cosignature) -> Witness | None:
        """The witness whose key the cosignature line names (its name and key id)."""
        for witness in self.witnesses.values():
            if cosignature.is_by(line, witness.key):
                return witness
        return None

    def text(self, logs: Iterable[str] = ()) -> str:
        """This policy as a tlog-policy file with no URLs or comments, listing `logs` (vkey
        strings) as its logs in place of its own: the form a verifier keeps."""
        lines = [f"log {vkey}" for vkey in logs]
        for name in self.order:
            if name in self.witnesses:
                lines.append(f"witness {name} {self.witnesses[name].key.vkey}")
            else:
                group = self.groups[name]
                k = (
                    "all"
                    if group.threshold == len(group.members)
                    else "any"
                    if group.threshold == 1
                    else str(group.threshold)
                )
                lines.append(f"group {name} {k} {' '.join(group.members)}")
        lines.append(f"quorum {self.quorum}")
        return "\n".join(lines) + "\n"


class PolicyError(ValueError):
    def __init__(self, number: int, problem: str) -> None:
        super().__init__(f"line {number}: {problem}" if number else problem)
        self.number = number


def parse(data: bytes) -> Policy:
    """The policy in `data` (a file's bytes); PolicyError naming the first bad line."""
    if not _ALLOWED.fullmatch(data):
        at = next(i for i, byte in enumerate(data) if not _ALLOWED.fullmatch(bytes([byte])))
        raise PolicyError(data.count(b"\n", 0, at) + 1, "holds a control character")
    text = data.decode("utf-8", "surrogateescape")
    logs: list[Log] = []
    witnesses: dict[str, Witness] = {}
    groups: dict[str, Group] = {}
    order: list[str] = []
    quorum: str | None = None
    seen_keys: set[tuple[str, bytes]] = set()
    members_seen: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        words = raw.replace("\t", " ").split()
        if not words or words[0].startswith("#"):
            continue
        keyword, args = words[0], words[1:]
        if len(logs) + len(witnesses) + len(groups) >= MAX_ENTRIES:
            raise PolicyError(number, f"a policy holds at most {MAX_ENTRIES} entries")
        if keyword == "log":
            if len(args) not in (1, 2):
                raise PolicyError(number, "a log line is 'log <vkey> [<url>]'")
            try:
                origin, _kid, public = note.parse_verifier_key(args[0])
            except ValueError as error:
                raise PolicyError(number, f"the log key is not usable: {error}") from None
            _no_duplicate(number, seen_keys, "log", public)
            logs.append(Log(origin, public, args[0], args[1] if len(args) == 2 else None))
        elif keyword == "witness":
            if len(args) not in (2, 3):
                raise PolicyError(number, "a witness line is 'witness <name> <vkey> [<url>]'")
            name = args[0]
            _new_name(number, name, witnesses, groups)
            try:
                key = cosignature.witness_key(args[1])
            except ValueError as error:
                raise PolicyError(
                    number, f"the key of witness {name!r} is not usable: {error}"
                ) from None
            _no_duplicate(number, seen_keys, "witness", key.public)
            witnesses[name] = Witness(name, key, args[2] if len(args) == 3 else None)
            order.append(name)
        elif keyword == "group":
            if len(args) < 3:
                raise PolicyError(number, "a group line is 'group <name> all|any|<k> <member>...'")
            name, k, members = args[0], args[1], args[2:]
            _new_name(number, name, witnesses, groups)
            for member in members:
                if member == NONE:
                    raise PolicyError(number, "'none' cannot be a group member")
                if member not in witnesses and member not in groups:
                    raise PolicyError(number, f"{member!r} is not defined on an earlier line")
            # "Each defined name can be listed as a group member at most once": in the whole
            # file, so that a witness contributes to the quorum in one way only.
            for member in members:
                if member in members_seen:
                    raise PolicyError(
                        number, f"{member!r} is a group member twice (a name may be one once)"
                    )
                members_seen.add(member)
            if k == "all":
                threshold = len(members)
            elif k == "any":
                threshold = 1
            elif _THRESHOLD.fullmatch(k) and 1 <= int(k) <= len(members):
                threshold = int(k)
            else:
                raise PolicyError(
                    number,
                    f"the threshold of group {name!r} must be all, any or a decimal k with "
                    f"1 <= k <= {len(members)}, not {k!r}",
                )
            groups[name] = Group(name, threshold, tuple(members))
            order.append(name)
        elif keyword == "quorum":
            if len(args) != 1:
                raise PolicyError(number, "a quorum line is 'quorum <name>'")
            if quorum is not None:
                raise PolicyError(number, "a policy has exactly one quorum line")
            if args[0] != NONE and args[0] not in witnesses and args[0] not in groups:
                raise PolicyError(number, f"{args[0]!r} is not defined on an earlier line")
            quorum = args[0]
        else:
            raise PolicyError(
                number, f"unknown keyword {keyword!r} (log, witness, group or quorum)"
            )
    if quorum is None:
        raise PolicyError(0, "the policy has no quorum line")
    return Policy(tuple(logs), witnesses, groups, quorum, tuple(order))


def _new_name(number: int, name: str, *defined: Mapping[str, object]) -> None:
    if name == NONE:
        raise PolicyError(number, "'none' is predefined and cannot be redefined")
    if any(name in names for names in defined):
        raise PolicyError(number, f"{name!r} is defined twice")


def _no_duplicate(number: int, seen: set[tuple[str, bytes]], kind: str, public: bytes) -> None:
    # "Duplicate" means the same public key under any name or key id.
    if (kind, public) in seen:
        raise PolicyError(number, f"this {kind} key is listed twice")
    seen.add((kind, public))

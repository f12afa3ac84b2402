"""`receipt-checklog URL [--key KEY] [--policy FILE] [--against CHECKPOINT_FILE] [--json]`:
a monitor that checks a whole log from its static tiles alone (c2sp.org/tlog-tiles).

URL is the tiles' prefix (`https://host/log`). The command fetches `<URL>/checkpoint` and checks
that a trusted key signed it under the log's name (its origin); then fetches every tile of that
tree, level 0 (the leaf hashes, full tiles and the final partial one) and every level above,
checks that each upper hash is the root of the full tile below it, and recomputes the root of
the checkpoint's size from the leaf hashes. With --against, a checkpoint kept from before must
verify too, be for the same log, be no larger, and its root must be the root of the first
<its size> leaves: the log only grew, it did not rewrite what the kept checkpoint saw.

KEY is a keys document file or a base64url Ed25519 key, as receipt-verify takes; --policy FILE
is a c2sp.org/tlog-policy file whose log keys are trusted instead (given both, only keys both
trust). A policy's witnesses' cosignature lines on either checkpoint must verify if present;
they are reported, not required: /log/checkpoint is the site's latest, which witnesses cosign
afterwards (receipt-verify --policy requires them).

Exit 0 sound, 1 not (the first problem named first), 2 could not check (unreachable, no key,
a file that cannot be read). A tile the checkpoint requires that the log does not serve is a
problem of the log (1), after the partial tile's full tile was tried, as the spec allows. Only
the standard library's urllib speaks HTTP, each request with a timeout.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from receiptsite_client.verify.checks import choose_trust
from receiptsite_client.verify.continuation import chain_of, follow
from receiptsite_client.verify.keys import TrustedKey, note_signatures
from receiptsite_client.verify.merkle import HASH_SIZE, tree_root
from receiptsite_client.verify.note import Note, parse_checkpoint, parse_note
from receiptsite_client.verify.policy import Policy
from receiptsite_client.verify.targets import (
    DEFAULT_TIMEOUT,
    CouldNotCheck,
    load_key,
    load_policy,
)
from receiptsite_client.verify.tiles import (
    FULL_TILE_BYTES,
    Tile,
    levels_of,
    read_tile,
    tile_problems,
    tiles_of,
)
from receiptsite_client.verify.witnesses import describe_counted, read_cosignatures

SOUND = "sound"
UNSOUND = "unsound"
COULD_NOT_CHECK = "could_not_check"
EXIT_CODES = {SOUND: 0, UNSOUND: 1, COULD_NOT_CHECK: 2}
MAX_CHECKPOINT_BYTES = 1 << 20


class Missing(CouldNotCheck):
    """The log answered 404 or 410: it does not serve that resource."""


Fetch = Callable[[str, float, int], bytes]


def fetch(url: str, timeout: float, limit: int) -> bytes:
    """GET `url`'s body, at most `limit` bytes (one more is read, to tell a longer body);
    Missing for a 404 or 410, CouldNotCheck for anything else that is not a 200."""
    request = urllib.request.Request(url, headers={"User-Agent": "receipt-checklog/1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body: bytes = answer.read(limit + 1)
    except urllib.error.HTTPError as error:
        with error:
            if error.code in (404, 410):
                raise Missing(f"{url} answered {error.code} {error.reason}") from None
            raise CouldNotCheck(f"{url} answered {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise CouldNotCheck(f"cannot reach {url} ({reason})") from None
    return body


@dataclass
class LogCheck:
    """What checking a log found: its status, the problems (first first), and what was seen."""

    status: str = SOUND
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    origin: str | None = None
    tree_size: int | None = None
    root: bytes | None = None
    tiles_fetched: int = 0
    kept_size: int | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def fail(self, problem: str) -> LogCheck:
        self.status = UNSOUND
        self.problems.append(problem)
        return self

    def could_not(self, reason: str) -> LogCheck:
        """Nothing could be decided, unless a problem was found already (it stands)."""
        if self.status == UNSOUND:
            self.problems.append(f"then the check could not go on: {reason}")
        else:
            self.status = COULD_NOT_CHECK
            self.problems.insert(0, reason)
        return self

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root_hash": _b64(self.root) if self.root is not None else None,
            "tiles_fetched": self.tiles_fetched,
            "kept_tree_size": self.kept_size,
            "problems": self.problems,
            "notes": self.notes,
        }

    def summary(self) -> str:
        if self.status == SOUND:
            root = _b64(self.root) if self.root is not None else "?"
            kept = (
                f"; it extends the kept checkpoint of {self.kept_size} leaves"
                if self.kept_size is not None
                else ""
            )
            return (
                f"Sound: log {self.origin}, {self.tree_size} leaves, root {root}, "
                f"{self.tiles_fetched} tiles fetched{kept}."
            )
        word = "UNSOUND" if self.status == UNSOUND else "COULD NOT CHECK"
        first, *more = self.problems or ["nothing was decided"]
        also = f" (and {len(more)} more problems)" if more else ""
        return f"{word}: {first}{also}."


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _signature_problem(note: Note, origin: str, trusted: Sequence[TrustedKey]) -> str | None:
    """Why `note` is not signed under the log's name by a trusted key that is not marked
    compromised (a failing line of a trusted key is refused, as signed-note says), or None."""
    verified, failed = note_signatures(note, origin, trusted)
    if failed:
        return f"its signature by key {failed[0].kid} does not verify"
    if any(key.status != "compromised" for key in verified):
        return None
    if verified:
        return (
            f"it is signed only by key {verified[0].kid}, {verified[0].compromised_words()}: a "
            "checkpoint carries no time, so it cannot be shown to predate the compromise"
        )
    return f"it carries no signature by a trusted key under the log's name {origin}"


def _read_checkpoint(text: object) -> tuple[Note, str, int, bytes]:
    note = parse_note(text)
    origin, size, root = parse_checkpoint(note.text)
    return note, origin, size, root


def _cosigned_words(note: Note, origin: str, policy: Policy | None, what: str) -> str | None:
    """With a policy: a problem if a policy witness's cosignature on it does not verify;
    else None (and the caller reports who cosigned)."""
    if policy is None:
        return None
    cosignatures = read_cosignatures(note, origin, policy)
    if cosignatures.failed:
        return f"the cosignature of {cosignatures.failed[0]} on {what} does not verify"
    return None


def _fetch_tile(prefix: str, tile: Tile, timeout: float, get: Fetch) -> tuple[bytes, int]:
    """A tile's bytes and how many fetches it took: a partial tile the log no longer serves
    is read from the start of its full tile (c2sp.org/tlog-tiles lets logs replace them)."""
    url = f"{prefix}/{tile.path}"
    try:
        return get(url, timeout, FULL_TILE_BYTES), 1
    except Missing:
        if not tile.partial:
            raise
    data = get(f"{prefix}/{tile.full.path}", timeout, FULL_TILE_BYTES)
    if len(data) != FULL_TILE_BYTES:
        return data, 2  # read_tile says what is wrong with it
    return data[: tile.width * HASH_SIZE], 2


def check_log(
    url: str,
    key: str | None = None,
    *,
    policy: str | None = None,
    against: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    get: Fetch = fetch,
) -> LogCheck:
    """Check the log whose tiles are under `url` (see the module's docstring)."""
    found = LogCheck()
    prefix = url.rstrip("/")
    if urllib.parse.urlsplit(prefix).scheme not in ("http", "https"):
        return found.could_not(f"{url} is not an http(s) URL")
    try:
        keys, pinned_x = load_key(key) if key is not None else (None, None)
        witness_policy = load_policy(policy) if policy is not None else None
        kept_text = _read_kept(against) if against is not None else None
        served = get(f"{prefix}/checkpoint", timeout, MAX_CHECKPOINT_BYTES)
    except CouldNotCheck as error:
        return found.could_not(str(error))
    if key is None and (witness_policy is None or not witness_policy.logs):
        return found.could_not(
            "no key to check the checkpoint's signature against: give --key (a keys document "
            "or a base64url Ed25519 key) or --policy (a tlog-policy file with log lines)"
        )
    if len(served) > MAX_CHECKPOINT_BYTES:
        return found.fail(f"{prefix}/checkpoint is larger than {MAX_CHECKPOINT_BYTES} bytes")
    try:
        note, origin, size, root = _read_checkpoint(served.decode("utf-8"))
    except ValueError as error:
        return found.fail(f"{prefix}/checkpoint is not a signed checkpoint ({error})")
    found.origin, found.tree_size = origin, size

    trust = choose_trust(
        {"log": {"origin": origin}},
        keys,
        pinned_x,
        policy=witness_policy,
        keys_pinned=keys is not None,
    )
    found.notes.extend(trust.notes)
    if not trust.keys:
        return found.could_not(
            f"no usable key to check the checkpoint of log {origin!r} against"
            + (f" ({' '.join(trust.notes)})" if trust.notes else "")
        )
    keys_log = keys.get("log") if isinstance(keys, dict) else None
    keys_origin = keys_log.get("origin") if isinstance(keys_log, dict) else None
    if isinstance(keys_origin, str) and keys_origin != origin:
        return found.fail(
            f"the checkpoint is for log {origin!r}, not the keys document's log {keys_origin!r}"
        )
    problem = _signature_problem(note, origin, trust.keys) or _cosigned_words(
        note, origin, witness_policy, "the checkpoint"
    )
    if problem is not None:
        # Its size is not to be believed, so no tile is fetched for it (c2sp.org/tlog-tiles).
        return found.fail(f"the checkpoint served does not verify: {problem}")
    _report_cosigners(found, note, origin, witness_policy, "the checkpoint")

    kept = None
    if kept_text is not None:
        ended = keys_log.get("ended") if isinstance(keys_log, dict) else None
        kept = _check_kept(found, kept_text, origin, size, trust.keys, witness_policy, ended)

    leaves = _fetch_leaves(found, prefix, size, timeout, get)
    if leaves is None:
        return found
    if tree_root(leaves) != root:
        found.fail(
            f"the root of the {size} leaf hashes the tiles hold is not the checkpoint's root"
        )
    else:
        found.root = root
    if kept is not None:
        kept_size, kept_root = kept
        if tree_root(leaves[:kept_size]) != kept_root:
            found.fail(
                f"the root of the first {kept_size} leaves is not the kept checkpoint's: the "
                "log no longer holds the tree the kept checkpoint saw"
            )
        else:
            found.kept_size = kept_size
    return found


def _read_kept(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CouldNotCheck(f"cannot read {path} ({error.strerror or error})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CouldNotCheck(f"{path} is not UTF-8 text, as a checkpoint is") from None


def _check_kept(
    found: LogCheck,
    text: str,
    origin: str,
    size: int,
    trusted: Sequence[TrustedKey],
    policy: Policy | None,
    ended: object = None,
) -> tuple[int, bytes] | None:
    """The kept checkpoint's (size, root) when it verifies and is no larger; else None and
    the problem recorded. A kept checkpoint of a log the site has since ended is followed
    into the log it continues as, by the statements of the keys document's `log.ended`
    (`ended`), each signed by a trusted key."""
    try:
        note, kept_origin, kept_size, kept_root = _read_checkpoint(text)
    except ValueError as error:
        found.fail(f"the kept checkpoint is not a signed checkpoint ({error})")
        return None
    if kept_origin != origin:
        if ended is None:
            found.fail(
                f"the kept checkpoint is for log {kept_origin!r}, not {origin!r} (with --key "
                "naming the site's keys document, its log.ended says whether one continues "
                "the other)"
            )
            return None
        chain, problems = chain_of(ended, lambda text, name: _verified_text(text, name, trusted))
        found.notes.extend(problems)
        same, said = follow(kept_origin, kept_size, chain, origin)
        if not same:
            found.fail(f"the kept checkpoint is of the log {kept_origin!r}, not {origin!r}: {said}")
            return None
        found.notes.append(f"The kept checkpoint is of the log {kept_origin}: {said}.")
    problem = _signature_problem(note, kept_origin, trusted) or _cosigned_words(
        note, kept_origin, policy, "the kept checkpoint"
    )
    if problem is not None:
        found.fail(f"the kept checkpoint does not verify: {problem}")
        return None
    if kept_size > size:
        found.fail(
            f"the kept checkpoint is of {kept_size} leaves, more than the {size} of the log's "
            "checkpoint now: the log has shrunk, or serves an older tree"
        )
        return None
    _report_cosigners(found, note, kept_origin, policy, "the kept checkpoint")
    return kept_size, kept_root


def _verified_text(text: str, name: str, trusted: Sequence[TrustedKey]) -> str | None:
    """The text of the signed note `text` when a trusted key signed it under `name`."""
    try:
        note = parse_note(text)
    except ValueError:
        return None
    return note.text if _signature_problem(note, name, trusted) is None else None


def _report_cosigners(
    found: LogCheck, note: Note, origin: str, policy: Policy | None, what: str
) -> None:
    if policy is None:
        return
    counted = read_cosignatures(note, origin, policy).counted()
    if counted:
        met = "meets" if policy.met(counted) else "does not meet"
        found.notes.append(
            f"{what[0].upper()}{what[1:]} is cosigned by {describe_counted(counted)}, which "
            f"{met} the policy's quorum {policy.describe()} (not required here)."
        )


def _fetch_leaves(
    found: LogCheck, prefix: str, size: int, timeout: float, get: Fetch
) -> list[bytes] | None:
    """Every tile of the tree, checked to be one tree: its leaf hashes, or None with the
    problems (or what could not be fetched) recorded."""
    hashes: dict[Tile, list[bytes]] = {}
    for tile in tiles_of(size):
        try:
            data, fetches = _fetch_tile(prefix, tile, timeout, get)
        except Missing:
            found.fail(
                f"the log does not serve {tile.path}, which its checkpoint of {size} leaves "
                "requires"
            )
            continue
        except CouldNotCheck as error:
            found.could_not(str(error))
            return None
        found.tiles_fetched += fetches
        try:
            hashes[tile] = read_tile(data, tile.width)
        except ValueError as error:
            found.fail(f"the tile {tile.path} is not one: {error}")
    if found.status != SOUND:
        return None
    levels = levels_of(size, hashes)
    for problem in tile_problems(levels):
        found.fail(problem)
    return levels[0] if levels else []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="receipt-checklog",
        description="Check a whole log from its static tiles (c2sp.org/tlog-tiles) alone: "
        "the checkpoint's signature, every tile, the root from the leaf hashes and, with "
        "--against, that the log only grew since a kept checkpoint. Exit 0 sound, 1 not, 2 "
        "could not check.",
    )
    parser.add_argument("url", metavar="URL", help="the tiles' prefix, e.g. https://host/log")
    parser.add_argument(
        "--key",
        metavar="KEY",
        help="a keys document file or a base64url Ed25519 public key to trust (a key that "
        "begins with '-' is given as --key=KEY)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="a c2sp.org/tlog-policy file whose log keys are trusted (with --key as well, "
        "only keys both trust); its witnesses' cosignatures, if present, must verify, and are "
        "reported, not required",
    )
    parser.add_argument(
        "--against",
        metavar="CHECKPOINT_FILE",
        help="a checkpoint kept from before: it must verify, be no larger, and be the root of "
        "the log's first leaves (the log only grew)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per HTTP request (default %(default)s)",
    )
    args = parser.parse_args(argv)
    found = check_log(
        args.url, args.key, policy=args.policy, against=args.against, timeout=args.timeout
    )
    if args.json:
        print(json.dumps(found.as_json(), ensure_ascii=False, indent=2))
    else:
        print(found.summary())
        for problem in found.problems[1:]:
            print(f"Also: {problem}.")
        for note in found.notes:
            print(f"Note: {note}")
    return found.exit_code


if __name__ == "__main__":
    sys.exit(main())

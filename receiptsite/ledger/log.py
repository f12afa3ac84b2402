"""The transparency log, stored: one append-only RFC 9162 Merkle tree over every receipt.

The tree lives in append-only tables (models.LogEntry, LogNode, Checkpoint), its published
checkpoints, the signed notes, in another (models.SignedCheckpoint). The pure tree arithmetic
is in receiptsite.integrity.merkle; this module reads and writes the rows.

Writes sign, reads never do:

- A receipt's leaf is appended in the transaction that stores it (lock_for_append, append),
  and the new tree head is signed and its note stored in that same transaction
  (sign_appended): one commit makes the receipt, its leaf and its checkpoint visible
  together, so a receipt answered 201 is always in a stored checkpoint, and a transaction
  that rolls back takes its note with it. A batch stores all its receipts in one such
  transaction and appends their leaves together (append_many): one lock, one signed note.
  Commands sign too (`migrate`, `signcheckpoint`), for the empty tree and after a key
  rotation.
- Reads (published()) serve the latest stored note, in one query, and write nothing. A tree
  stored without its note (by an older release, or a process that died between the two) is
  `pending` for verification until the next write signs it (lock_for_append catches up).

When a note was signed is the database's record: the INSERT names no time, and the database
stamps `signed_at` with its own clock whatever an INSERT says (receipts/migrations/0013), so
that no code running as the site's database role can date a checkpoint before a key leaked
(`compromisekey` takes that time as proof).

The largest tree the site has signed is also remembered in LOG_STATE_FILE, outside the
database, and with REDIS_URL in Redis as well, where every host of the site sees what the
others signed (ledger/logstate.py); both once the storing transaction has committed
(remember(): a state that ran ahead of a commit that then failed would make the site refuse
its own log for good). A process that dies between the commit and that write leaves the state
one tree behind, which the next write catches up. After a restore from an old backup the site
refuses to sign a tree that does not extend the remembered one, ingest answers 503 and stores
nothing, and reads answer 503 or fail the inclusion check (LogRollback).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from receiptsite.integrity import merkle, note
from receiptsite.integrity.continuation import Continuation
from receiptsite.integrity.encoding import b64, b64decode
from receiptsite.ledger import keyring, logstate
from receiptsite.lib.outer import once_committed
from receiptsite.lib.rows import insert_rows
from receiptsite.problems import Problem
from receiptsite.receipts.models import (
    Checkpoint,
    LogContinuation,
    LogEntry,
    LogNode,
    Receipt,
    SignedCheckpoint,
    SigningKey,
)

logger = logging.getLogger(__name__)

# Any fixed number: the PostgreSQL advisory lock that serialises appends and signatures.
APPEND_LOCK = 0x7265636569707473


class LogNotSigned(Problem):
    """No current checkpoint can be served or signed."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, "log-not-signed", "The transparency log cannot be signed", detail)


class LogRollback(LogNotSigned):
    """The stored tree does not extend the largest tree this site has signed."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"The site refuses to sign its log: {reason}.")
        self.reason = reason


@dataclass(frozen=True)
class Head:
    origin: str
    size: int
    root: bytes


@dataclass(frozen=True)
class SignedHead(Head):
    note: str


@dataclass(frozen=True)
class _Latest:
    """The latest stored signed checkpoint, as the write path needs it."""

    key_id: int
    signed: SignedHead
    stored_root: bytes | None  # the stored tree's root at the signed size


# The log's reads and writes are a handful of fixed statements on the hot paths (every ingest,
# every verification). They are written as SQL, not ORM queries: compiling an ORM query costs
# more than running these on either database.
_NODE = LogNode._meta.db_table
_HEAD = Checkpoint._meta.db_table
_ENTRY = LogEntry._meta.db_table
_SIGNED = SignedCheckpoint._meta.db_table
_KEY = SigningKey._meta.db_table
_CONTINUATION = LogContinuation._meta.db_table

# The stored head and the latest signed checkpoint (with the stored root at its size), in one
# round trip; the status of the key a write path is about to sign with (the key `%s`
# names), so that a key marked compromised by `compromisekey` meanwhile signs nothing more;
# and the latest continuation of the log (`continuelog`), whose new origin is the head's when
# the log has not grown since.
_SNAPSHOT = (
    f"SELECT h.tree_size, h.root_hash, h.origin, s.signing_key_id, s.note, r.root_hash, "
    f"k.status, c.tree_size, c.new_origin FROM (SELECT 1 AS one) AS base "
    f"LEFT JOIN (SELECT tree_size, root_hash, origin FROM {_HEAD} "
    f"ORDER BY tree_size DESC LIMIT 1) AS h ON 1 = 1 "
    f"LEFT JOIN (SELECT tree_size, signing_key_id, note FROM {_SIGNED} "
    f"ORDER BY tree_size DESC, id DESC LIMIT 1) AS s ON 1 = 1 "
    f"LEFT JOIN {_HEAD} AS r ON r.tree_size = s.tree_size "
    f"LEFT JOIN {_KEY} AS k ON k.kid = %s "
    f"LEFT JOIN (SELECT tree_size, new_origin FROM {_CONTINUATION} "
    f"ORDER BY id DESC LIMIT 1) AS c ON 1 = 1"
)
# A checkpoint by a compromised key counts only when it was signed before the compromise:
# SigningKey.disowns, in SQL, so that the read stays one round trip.
_DISOWNED = SigningKey.disowns_sql("k", "s.signed_at")
# For reads: the latest signed note (and the kid of its key when that key was compromised
# before it signed), the stored size, the stored root at the size LOG_STATE_FILE remembers,
# and (for /healthz and /metrics: readiness()) the status of the configured key, in one round
# trip.
_PUBLISHED = (
    f"SELECT s.note, CASE WHEN {_DISOWNED} THEN k.kid END, "
    f"(SELECT MAX(tree_size) FROM {_HEAD}), "
    f"(SELECT root_hash FROM {_HEAD} WHERE tree_size = %s), "
    f"(SELECT status FROM {_KEY} WHERE kid = %s) "
    f"FROM (SELECT 1 AS one) AS base "
    f"LEFT JOIN (SELECT note, signing_key_id, signed_at FROM {_SIGNED} "
    f"ORDER BY tree_size DESC, id DESC LIMIT 1) AS s ON 1 = 1 "
    f"LEFT JOIN {_KEY} AS k ON k.id = s.signing_key_id"
)


def _query(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _nodes(keys: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    wanted = {LogNode.node_key(level, index): (level, index) for level, index in keys}
    if not wanted:
        return {}
    marks = ", ".join(["%s"] * len(wanted))
    rows = _query(f"SELECT key, hash FROM {_NODE} WHERE key IN ({marks})", list(wanted))
    return {wanted[key]: bytes(digest) for key, digest in rows}


@functools.lru_cache(maxsize=16)
def _parse(text: str) -> SignedHead:
    """A stored signed note as a SignedHead (the note's own text says origin, size, root)."""
    origin, size, root = note.parse_checkpoint(text.partition("\n\n")[0] + "\n")
    return SignedHead(origin=origin, size=size, root=root, note=text)


def _snapshot(kid: str = "") -> tuple[Head, _Latest | None]:
    return _snapshot_with_status(kid)[:2]


def _snapshot_with_status(kid: str) -> tuple[Head, _Latest | None, str | None]:
    """The stored head, the latest signed checkpoint, and the status of the key `kid`."""
    rows = _query(_SNAPSHOT, [kid])
    ((size, root, origin, key_id, text, signed_root, status, continued_at, continued_as),) = rows
    latest = None
    if text is not None:
        signed = _parse(text)
        stored_root = merkle.EMPTY_ROOT if signed.size == 0 else signed_root
        latest = _Latest(key_id, signed, bytes(stored_root) if stored_root is not None else None)
    if continued_at is not None and continued_at == (size or 0) and any(
        statement.continues_as == continued_as and statement.kept_size == continued_at
        for statement in continuations().values()
    ):
        # Continued under a new origin at this very tree (`continuelog`; its statement
        # verifies): the heads stored from now on carry it. (Rare: until the next append.)
        origin = continued_as
    elif size is None:
        # The origin is fixed by the first checkpoint, even the empty tree's: a later change
        # of SITE_URL does not move the log.
        if latest is not None:
            origin = latest.signed.origin
        else:
            known = _combine(_remembered())
            origin = known.origin if known is not None else settings.LOG_ORIGIN
    if size is not None:
        return Head(origin=origin, size=size, root=bytes(root)), latest, status
    return Head(origin=origin, size=0, root=merkle.EMPTY_ROOT), latest, status


def head() -> Head:
    """The stored tree head (signed or not yet)."""
    return _snapshot()[0]


def lock_for_append() -> Head:
    """Serialise appends and signatures. Call inside the storing transaction, first; returns
    the stored tree head, which the lock keeps current until the transaction ends (pass it to
    append_many).

    On PostgreSQL a transaction-scoped advisory lock; SQLite transactions here are BEGIN
    IMMEDIATE (see settings), which already holds the single write lock. Then, under the lock,
    the log is checked before anything is stored: LogRollback (503) if the stored tree does not
    extend the largest one signed, keyring.CannotSign (503) without a usable key; and a tree an
    earlier process committed but did not live to sign is signed now (it is committed, so it
    cannot roll back), so that a receipt replayed after such a crash is answered only once a
    checkpoint includes it.
    """
    lock()
    return _bring_up_to_date()


def lock() -> None:
    """Take the lock that serialises appends and signatures, inside a transaction (see
    lock_for_append); `compromisekey` takes it too, to sign with a key of its own."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPEND_LOCK])


def _bring_up_to_date(key: keyring.ActiveKey | None = None) -> Head:
    """With the lock held: refuse a rolled-back log, else make the latest signed checkpoint
    the stored head's, signed by `key` (default: the active key). CannotSign when that key was
    marked compromised since this process recorded it."""
    kid = key.kid if key is not None else keyring.configured_kid()  # "": raised again below
    remembered = _remembered()
    current, latest, status = _snapshot_with_status(kid)
    known = read_state(current.origin, remembered)
    # The stored tree must extend both the tree remembered outside the database and the latest
    # one signed inside it (usually the same tree: then this costs no further query).
    roots = {current.size: current.root}
    if latest is not None:
        roots.setdefault(latest.signed.size, latest.stored_root or b"")
        _refuse(latest.signed, current.size, roots[latest.signed.size])
    if known is not None:
        _refuse(known, current.size, roots.get(known.size))
    if latest is not None and (known is None or known.size < latest.signed.size):
        _remember(latest.signed)  # committed before, not yet remembered (a crash in between)
    if status == SigningKey.COMPROMISED:
        if key is not None:
            raise keyring.found_compromised(key.kid)
        # `compromisekey` may have written the new key into SIGNING_KEY_FILE: sign with it.
        key = keyring.record(keyring.taken_over(kid))
    elif status == SigningKey.RETIRED:
        # Another host rotated to a new key since this process recorded its own (a rolling
        # restart), or SIGNING_KEY_FILE still names the old key: never sign with a retired one.
        raise keyring.found_retired(kid)
    elif key is None:
        key = keyring.active_key()
    if latest is not None and latest.signed.size == current.size and latest.key_id == key.row.pk:
        return current
    _store_note(current, key)
    if known is None or known.size < current.size:
        _remember(current)  # a tree committed before (a catch-up): it cannot roll back
    return current


def _store_note(current: Head, key: keyring.ActiveKey) -> None:
    body = note.checkpoint_body(current.origin, current.size, current.root)
    text = note.sign_note(body, current.origin, key.private)
    # No signed_at: the database stamps it (see the module's docstring).
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_SIGNED} (tree_size, note, signing_key_id) VALUES (%s, %s, %s)",
            [current.size, text, key.row.pk],
        )


def sign_appended(current: Head) -> None:
    """Sign the tree head an append just made and store its note, in the storing
    transaction (remember() it once that transaction has committed)."""
    _store_note(current, keyring.active_key())


def remember(current: Head) -> None:
    """Record a signed tree in LOG_STATE_FILE. Call after the transaction that stored its
    note has committed, never before: a state file that ran ahead of a commit that then
    failed would make the site refuse its own log."""
    once_committed(functools.partial(_remember_committed, current))


def _remember_committed(current: Head) -> None:
    known = _read_file()
    if known is None or known.origin != current.origin or known.size < current.size:
        _remember(current)
    else:
        logstate.write(_state_body(current))


def sign_head() -> None:
    """Sign the stored tree head with the active key and store the note, unless the latest
    stored checkpoint already is that: `migrate` and `manage.py signcheckpoint` call it, for
    the empty tree and after a key rotation. In a transaction of its own (durable), so that
    the tree it signs cannot roll back. Raises LogRollback, LogNotSigned, CannotSign."""
    with transaction.atomic(durable=True):
        lock_for_append()


def sign_head_with(key: keyring.ActiveKey) -> None:
    """As sign_head, with `key` rather than SIGNING_KEY_FILE's, inside the caller's
    transaction, after lock() (`compromisekey`, for the key it activates)."""
    _bring_up_to_date(key)


def append(receipt: Receipt, data: bytes, current: Head | None = None) -> Head:
    """Append a receipt's canonical bytes as the next leaf, and sign the new head; return that
    head (the leaf's index is its size - 1). See append_many()."""
    return append_many([(receipt, data)], current)


def append_many(stored: Sequence[tuple[Receipt, bytes]], current: Head | None = None) -> Head:
    """Append each receipt's canonical bytes as the next leaf, in order, and sign the final
    head once; return that head (the last leaf's index is its size - 1).

    Must run inside the transaction that stores the receipts, after lock_for_append(), whose
    head `current` is (read again when not given). O(k log n) for k leaves, in a constant
    number of statements: reads the frontier of complete subtrees once, then writes the k
    entries, the new nodes, a head per new size (so every size keeps its root) and one
    signed note.
    """
    if not stored:
        raise ValueError("nothing to append")
    if current is None:
        current = head()
    nodes = _nodes(merkle.nodes_for_append(current.size))
    size, root = current.size, current.root
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    entries: list[tuple[int, int]] = []
    new_nodes: list[tuple[int, bytes]] = []
    heads: list[tuple[int, bytes, str, Any]] = []
    for receipt, data in stored:
        frontier = {node: nodes[node] for node in merkle.nodes_for_append(size)}
        added, root = merkle.append(size, merkle.leaf_hash(data), frontier)
        nodes.update(added)
        new_nodes += [(LogNode.node_key(level, i), digest) for (level, i), digest in added.items()]
        entries.append((size, receipt.pk))
        size += 1
        heads.append((size, root, current.origin, now))
    insert_rows(connection, LogEntry, ["index", "receipt_id"], entries)
    insert_rows(connection, LogNode, ["key", "hash"], new_nodes)
    insert_rows(connection, Checkpoint, ["tree_size", "root_hash", "origin", "created_at"], heads)
    new_head = Head(origin=current.origin, size=size, root=root)
    sign_appended(new_head)
    return new_head


def published() -> SignedHead:
    """The latest signed checkpoint, for reads: one query, nothing written.

    Raises LogRollback when the stored tree does not extend the largest tree the site has
    signed, LogNotSigned before the first signature.
    """
    signed, _ = readiness("")
    if isinstance(signed, LogNotSigned):
        raise signed
    return signed


def readiness(kid: str) -> tuple[SignedHead | LogNotSigned, str | None]:
    """What /healthz and /metrics ask, in the one query of published(): the latest signed
    checkpoint (or the LogNotSigned, LogRollback included, that published() would raise), and
    the status of the signing key `kid` (None when no such key is recorded) for
    keyring.check_status. Nothing written."""
    signed, status, _ = _read_published(kid, "", ())
    return signed, status


def published_with(
    sql: str, params: Sequence[Any]
) -> tuple[SignedHead | LogNotSigned, tuple[Any, ...]]:
    """published() (or the LogNotSigned it would raise), and the row of `sql`, a SELECT that
    finds one row or none (then a row of NULLs), read in one statement: the verify route and
    the page read a receipt and the checkpoint its proof is against in one round trip
    (ledger/verification.verifiable). Nothing written."""
    signed, _, row = _read_published("", sql, params)
    return signed, row


def published_statement(sql: str) -> str:
    """published_with()'s one statement: the latest-checkpoint query (its parameters the
    remembered tree's size and a kid) LEFT JOINed to `sql`'s row (its parameters after)."""
    return f"SELECT p.*, q.* FROM ({_PUBLISHED}) AS p LEFT JOIN ({sql}) AS q ON 1 = 1"


def _read_published(
    kid: str, sql: str, params: Sequence[Any]
) -> tuple[SignedHead | LogNotSigned, str | None, tuple[Any, ...]]:
    # LOG_STATE_FILE first: it names only trees already committed, so the stored tree read
    # after it is at least as large unless the database went back. (Read the other way round,
    # a signature made between the two reads would look like a rollback.)
    remembered = _remembered()
    refused: LogNotSigned | None = None
    try:
        known = _combine(remembered)
    except LogNotSigned as error:  # two remembered trees disagree: the key is still asked
        known, refused = None, error
    asked = [known.size if known is not None else 0, kid]
    if sql:
        statement = published_statement(sql)
        ((text, disowned, size, root, status, *row),) = _query(statement, [*asked, *params])
    else:
        ((text, disowned, size, root, status),), row = _query(_PUBLISHED, asked), []
    if refused is not None:
        return refused, status, tuple(row)
    try:
        return _checked(text, disowned, size, root, remembered, known), status, tuple(row)
    except LogNotSigned as error:
        return error, status, tuple(row)


def _checked(
    text: str | None, disowned: str | None, size: int | None, root: bytes | None,
    remembered: list[Head], known: Head | None,
) -> SignedHead:  # fmt: skip
    if text is not None and any(state.origin != _parse(text).origin for state in remembered):
        # A tree of a log since continued under a new origin (rare: until this host signs a
        # tree of the new log): the tree its continuation kept, and the stored root at it.
        known = read_state(_parse(text).origin, remembered)
        root = root_at(known.size) if known is not None else None
    if known is not None:
        stored_root = merkle.EMPTY_ROOT if known.size == 0 else root
        _refuse(known, size or 0, bytes(stored_root) if stored_root is not None else None)
    if text is None:
        raise LogNotSigned(
            "No checkpoint has been signed yet; `python manage.py signcheckpoint` signs one."
        )
    if disowned is not None:
        logger.critical("transparency log: the latest checkpoint is by a compromised key")
        raise LogNotSigned(
            f"The latest checkpoint is signed by the key {disowned}, which was marked "
            "compromised before it signed it, so it proves nothing; `python manage.py "
            "signcheckpoint`, with SIGNING_KEY_FILE naming a key that is not compromised, "
            "signs the current tree."
        )
    return _parse(text)


def inclusion_proof(index: int, size: int) -> list[bytes]:
    return inclusion_proofs(index, [size])[0]


def inclusion_proofs(index: int, sizes: Sequence[int]) -> list[list[bytes]]:
    """The inclusion proofs of leaf `index` in the trees of `sizes`, their nodes read in one
    query (a re-signed receipt's verification shows two: ledger/verification.py)."""
    stored = _nodes(node for size in sizes for node in merkle.inclusion_proof_nodes(index, size))
    return [
        merkle.inclusion_proof(index, size, lambda level, i: stored[(level, i)]) for size in sizes
    ]


def consistency_proof(first: int, second: int) -> list[bytes]:
    stored = _nodes(merkle.consistency_proof_nodes(first, second))
    return merkle.consistency_proof(first, second, lambda level, i: stored[(level, i)])


def root_at(size: int) -> bytes | None:
    if size == 0:
        return merkle.EMPTY_ROOT
    rows = _query(f"SELECT root_hash FROM {_HEAD} WHERE tree_size = %s", [size])
    return bytes(rows[0][0]) if rows else None


# --- the largest signed tree, remembered outside the database -------------------------------


def _state_path() -> Path:
    return Path(settings.LOG_STATE_FILE)


# (path, inode, mtime_ns, size) -> the parsed state: re-read only when the file changes (it is
# replaced, never rewritten in place, so a new version is a new inode).
_state_cache: dict[str, tuple[tuple[str, int, int, int], Head]] = {}


def _state_head(data: Any) -> Head:
    return Head(
        origin=data["origin"], size=int(data["tree_size"]), root=b64decode(data["root_hash"])
    )


def _read_file() -> Head | None:
    """The tree remembered in this host's LOG_STATE_FILE."""
    # os.stat of the setting's own value: a Path made and turned into a string for each read
    # cost as much as the stat (6 % of a served /healthz's time in Django, with it).
    name = os.fspath(settings.LOG_STATE_FILE)
    try:
        info = os.stat(name)
        stamp = (name, info.st_ino, info.st_mtime_ns, info.st_size)
        cached = _state_cache.get("state")
        if cached and cached[0] == stamp:
            return cached[1]
        state = _state_head(json.loads(Path(name).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as error:
        raise LogRollback(f"LOG_STATE_FILE is unreadable ({error})") from None
    _state_cache["state"] = (stamp, state)
    return state


def _remembered() -> list[Head]:
    """The trees remembered in LOG_STATE_FILE and, with REDIS_URL, in Redis, where every host
    records what it signs (ledger/logstate.py): none, one or both."""
    state = _read_file()
    try:
        shared = logstate.read()
        other = _state_head(shared) if shared is not None else None
    except (ValueError, KeyError, TypeError) as error:
        raise LogRollback(f"the tree remembered in Redis is unreadable ({error})") from None
    return [head for head in (state, other) if head is not None]


def read_state(origin: str | None = None, remembered: list[Head] | None = None) -> Head | None:
    """The largest tree remembered (in LOG_STATE_FILE or in Redis), None before the first.
    With `origin`, the log's current origin: a tree remembered of a log since continued under
    a new origin counts as the tree of the current log it stands for (continued_tree), and a
    tree of a log the stored log does not continue is refused (LogRollback)."""
    states = _remembered() if remembered is None else remembered
    if origin is not None and any(state.origin != origin for state in states):
        chain = continuations()
        states = [continued_tree(state, origin, chain) for state in states]
    return _combine(states)


def _combine(states: list[Head]) -> Head | None:
    """The larger of the remembered trees; LogRollback for two of one size and log that
    differ."""
    if not states:
        return None
    state, other = states[0], states[-1]
    if state.size > other.size:
        return state
    if state.origin == other.origin and state.size == other.size and state.root != other.root:
        problem = (
            f"the trees of {state.size} leaves remembered in LOG_STATE_FILE and in Redis "
            "differ (do the hosts share one database?)"
        )
        logger.critical("transparency log: refusing to sign: %s", problem)
        raise LogRollback(problem)
    return other


# --- a log continued under a new origin (`manage.py continuelog`) --------------------------------


@functools.lru_cache(maxsize=64)
def _statement(text: str, name: str, public: bytes) -> Continuation | None:
    """The statement of a signed note `text` by the key `public` under `name`, or None."""
    body = note.verify_note(text, [note.verifier_key(name, public)])
    try:
        return Continuation.parse(body) if body is not None else None
    except ValueError:
        return None


def continuations() -> dict[str, Continuation]:
    """Every continuation of the log whose statement verifies (verified_continuations), by
    the origin it ended."""
    return {statement.ended: statement for _row, statement in verified_continuations()}


def verified_continuations() -> list[tuple[LogContinuation, Continuation]]:
    """The continuations of the log, oldest first, whose statement verifies: signed by the
    key its row names, under the ended log's name, by a key that does not disown it, and
    saying what its row says. A row that fails is logged and counts for nothing."""
    found: list[tuple[LogContinuation, Continuation]] = []
    for row in LogContinuation.objects.select_related("signing_key").order_by("id"):
        key = row.signing_key
        statement = _statement(row.statement, row.old_origin, bytes(key.public_key))
        expected = (
            row.old_origin, row.signed_size, bytes(row.signed_root), row.tree_size,
            bytes(row.root_hash), row.new_origin,
        )  # fmt: skip
        if (
            statement is None
            or key.disowns(row.recorded_at)
            or (
                statement.ended, statement.signed_size, statement.signed_root,
                statement.kept_size, statement.kept_root, statement.continues_as,
            ) != expected  # fmt: skip
        ):
            logger.critical(
                "transparency log: the continuation of %s (row %s) does not verify",
                row.old_origin, row.pk,
            )  # fmt: skip
            continue
        found.append((row, statement))
    return found


def continued_tree(known: Head, origin: str, chain: dict[str, Continuation]) -> Head:
    """The tree of the log `origin` that a remembered tree `known` of an ended log stands for:
    itself, renamed, when the kept tree holds it (its root is then checked like any other);
    the kept tree when it was of the leaves the statement says were lost. LogRollback when no
    continuation leads from its log to `origin`, or when the statement does not cover it (a
    larger tree, or another root at the size it says was signed)."""
    seen: set[str] = set()
    while known.origin != origin:
        statement = chain.get(known.origin)
        if statement is None or known.origin in seen:
            problem = (
                f"a tree of the log {known.origin!r} was signed before, which the stored log "
                f"{origin!r} does not continue (was the database restored from a backup older "
                "than its `continuelog`?)"
            )
            logger.critical("transparency log: refusing to sign: %s", problem)
            raise LogRollback(problem)
        seen.add(known.origin)
        beyond = known.size > statement.signed_size or (
            known.size == statement.signed_size and known.root != statement.signed_root
        )
        if beyond:
            problem = (
                f"a tree of {known.size} leaves of the log {known.origin!r} was signed before, "
                f"which its continuation as {statement.continues_as!r} does not account for "
                f"(it says {statement.signed_size} leaves)"
            )
            logger.critical("transparency log: refusing to sign: %s", problem)
            raise LogRollback(problem)
        if known.size <= statement.kept_size:
            known = Head(origin=statement.continues_as, size=known.size, root=known.root)
        else:
            known = Head(
                origin=statement.continues_as, size=statement.kept_size, root=statement.kept_root
            )
    return known


def followed(tree: Head, origin: str, chain: dict[str, Continuation]) -> tuple[Head | None, str]:
    """For a verifier that kept a checkpoint `tree` of a log since continued (`checklog
    --against`): the same tree as one of the log `origin` when each continuation kept it, and
    what was followed; else None and why (it is of leaves a statement says were lost, of more
    than the statement says was signed, or of a log the stored one does not continue)."""
    steps: list[str] = []
    while tree.origin != origin:
        statement = chain.get(tree.origin)
        if statement is None or len(steps) > len(chain):
            return None, f"the log {tree.origin!r} is not one the log {origin!r} continues"
        said = (
            f"the log {statement.ended} ended at {statement.kept_size} leaves, having signed "
            f"{statement.signed_size}, and continues as {statement.continues_as}"
        )
        if tree.size > statement.signed_size:
            return None, f"it is of {tree.size} leaves, more than the site says it signed: {said}"
        if tree.size > statement.kept_size:
            return None, f"it is of {tree.size} leaves, which the site says it lost: {said}"
        steps.append(said)
        tree = Head(origin=statement.continues_as, size=tree.size, root=tree.root)
    return tree, "; ".join(steps)


def next_origin(origin: str) -> str:
    """The default origin a log continues under: `<origin>/2`, then `/3`, ..."""
    base, _, number = origin.rpartition("/")
    if base and number.isdigit() and number == str(int(number)) and int(number) >= 2:
        return f"{base}/{int(number) + 1}"
    return f"{origin}/2"


def continue_as(new_origin: str | None, also_signed: Sequence[Head] = ()) -> Continuation:
    """End the log with a signed statement of the largest tree the site signed and the stored
    tree it keeps, and continue the stored tree under `new_origin` (default: next_origin()):
    `manage.py continuelog`, after a restore that lost signed trees. `also_signed`: trees
    signed by the site that it does not remember (a monitor's or a witness's saved
    checkpoint), which the statement accounts for too.

    In one durable transaction under the append lock: the statement (models.LogContinuation),
    and the kept tree's checkpoint signed under the new origin; the new log is then
    remembered in LOG_STATE_FILE and Redis in place of the old. ValueError, with what to do,
    when there is nothing to continue (the stored log extends every tree remembered) or the
    new origin was a log's before."""
    with transaction.atomic(durable=True):
        lock()
        key = keyring.active_key()
        current, latest, status = _snapshot_with_status(key.kid)
        if status == SigningKey.COMPROMISED:
            raise keyring.found_compromised(key.kid)
        if status == SigningKey.RETIRED:
            raise keyring.found_retired(key.kid)
        chain = continuations()
        candidates = list(_remembered()) + list(also_signed)
        if latest is not None:
            candidates.append(latest.signed)
        ended: dict[str, Head] = {}
        for tree in candidates:
            # A tree of a log the stored one does not continue stays as it is: this ends it.
            with contextlib.suppress(LogRollback):
                tree = continued_tree(tree, current.origin, chain)
            if tree.origin not in ended or ended[tree.origin].size < tree.size:
                ended[tree.origin] = tree
        if len(ended) > 1:
            ended.pop(current.origin, None)
        if len(ended) != 1:
            raise ValueError(
                "the site remembers trees of several logs that the stored log does not "
                f"continue ({', '.join(sorted(ended))}): restore the database from a backup "
                "that holds the latest `continuelog`"
            )
        (signed,) = ended.values()
        sound = signed.origin == current.origin and signed.size <= current.size
        if sound and root_at(signed.size) == signed.root:
            raise ValueError(
                f"the stored log ({current.size} leaves) extends every tree the site "
                f"remembers signing (the largest, {signed.size} leaves): nothing was lost, "
                "so the log goes on as it is"
            )
        origin = new_origin or next_origin(signed.origin)
        used = {current.origin, signed.origin, *chain, *(c.continues_as for c in chain.values())}
        if origin in used:
            raise ValueError(f"{origin!r} was a log's origin before: choose another")
        statement = Continuation(
            ended=signed.origin, signed_size=signed.size, signed_root=signed.root,
            kept_size=current.size, kept_root=current.root, continues_as=origin,
        )  # fmt: skip
        LogContinuation.objects.create(
            old_origin=statement.ended, signed_size=statement.signed_size,
            signed_root=statement.signed_root, tree_size=statement.kept_size,
            root_hash=statement.kept_root, new_origin=statement.continues_as,
            statement=note.sign_note(statement.body(), statement.ended, key.private),
            signing_key=key.row,
        )  # fmt: skip
        continued = Head(origin=origin, size=current.size, root=current.root)
        _store_note(continued, key)
    _remember(continued)
    logger.warning(
        "transparency log: the log %s ended at %s leaves (%s signed, %s lost) and continues as %s",
        statement.ended, statement.kept_size, statement.signed_size, statement.lost, origin,
    )  # fmt: skip
    return statement


def _state_body(current: Head) -> dict[str, Any]:
    return {"origin": current.origin, "tree_size": current.size, "root_hash": b64(current.root)}


def _remember(current: Head) -> None:
    """Record `current` as the largest signed tree, in LOG_STATE_FILE unless another process
    already recorded a larger one there (a lock file keeps two processes from writing out of
    order), and in Redis with REDIS_URL (an atomic "keep the larger")."""
    path = _state_path()
    body = _state_body(current)
    logstate.write(body)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            known = _read_file()
            # A tree of another origin is of a log since continued as this one (the write
            # path's check let it through): the new log's tree replaces it.
            if known is not None and known.origin == current.origin and known.size >= current.size:
                return
            temporary = path.with_suffix(path.suffix + ".tmp")
            temporary.write_text(json.dumps(body) + "\n")
            os.replace(temporary, path)
    except OSError as error:
        logger.critical("transparency log: cannot write LOG_STATE_FILE: %s", error)
        raise LogNotSigned(
            f"The site cannot record its signed tree in LOG_STATE_FILE ({error.strerror})."
        ) from None


def _refuse(known: Head, size: int, root_at_known: bytes | None) -> None:
    """Raise LogRollback unless a stored tree of `size` leaves, whose root at `known.size` is
    `root_at_known` (None: read it), extends `known`."""
    if known.size > size:
        problem = (
            f"the stored log has {size} leaves, but a tree of {known.size} leaves "
            "was signed before (was the database restored from an old backup?)"
        )
    elif (root_at_known if root_at_known is not None else root_at(known.size)) != known.root:
        problem = (
            f"the stored log's tree of {known.size} leaves differs from the one signed before "
            "(the database's log was rewritten)"
        )
    else:
        return
    logger.critical("transparency log: refusing to sign: %s", problem)
    raise LogRollback(problem)


def guard(current: Head) -> Head | None:
    """Raise LogRollback unless `current` extends the largest tree the site has signed;
    return that tree (None before the first signature)."""
    known = read_state()
    if known is not None:
        _refuse(known, current.size, current.root if known.size == current.size else None)
    return known

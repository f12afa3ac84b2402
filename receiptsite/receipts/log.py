"""The transparency log, stored: one append-only RFC 9162 Merkle tree over every receipt.

The tree lives in three append-only tables (models.LogEntry, LogNode, Checkpoint). The pure
tree arithmetic is in receiptsite.integrity.merkle; this module reads and writes the rows.

Signatures are made when a checkpoint is served, never before its tree is committed, so the
site never signs a tree that could still roll back. The largest tree it has signed is also
remembered in LOG_STATE_FILE, outside the database: after a restore from an old backup the site
refuses to sign a tree that does not extend it (see guard()).
"""

from __future__ import annotations

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
from django.db import connection
from django.utils import timezone

from receiptsite.integrity import merkle, note
from receiptsite.integrity.encoding import b64, b64decode
from receiptsite.receipts import signing
from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode, Receipt

logger = logging.getLogger(__name__)

# Any fixed number: the PostgreSQL advisory lock that serialises appends.
APPEND_LOCK = 0x7265636569707473


class LogRollback(Exception):
    """The stored tree does not extend the largest tree this site has signed."""


@dataclass(frozen=True)
class Head:
    origin: str
    size: int
    root: bytes


@dataclass(frozen=True)
class SignedHead(Head):
    note: str


# The log's reads and writes are a handful of fixed statements on the hot paths (every ingest,
# every verification). They are written as SQL, not ORM queries: compiling an ORM query costs
# more than running these on either database.
_NODE = LogNode._meta.db_table
_HEAD = Checkpoint._meta.db_table
_ENTRY = LogEntry._meta.db_table


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


def head() -> Head:
    rows = _query(
        f"SELECT tree_size, root_hash, origin FROM {_HEAD} ORDER BY tree_size DESC LIMIT 1"
    )
    if not rows:
        # The origin is fixed by the first checkpoint, even the empty tree's: a later change of
        # SITE_URL does not move the log.
        known = read_state()
        origin = known.origin if known is not None else settings.LOG_ORIGIN
        return Head(origin=origin, size=0, root=merkle.EMPTY_ROOT)
    size, root, origin = rows[0]
    return Head(origin=origin, size=size, root=bytes(root))


def lock_for_append() -> None:
    """Serialise appends. Call inside the storing transaction, before reading the head.

    On PostgreSQL a transaction-scoped advisory lock; SQLite transactions here are BEGIN
    IMMEDIATE (see settings), which already holds the single write lock.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPEND_LOCK])


def append(receipt: Receipt, data: bytes) -> int:
    """Append a receipt's canonical bytes as the next leaf; return its index.

    Must run inside the transaction that stores the receipt, after lock_for_append().
    O(log n): reads the frontier of complete subtrees, writes the new ones and the new head.
    """
    current = head()
    frontier = _nodes(merkle.nodes_for_append(current.size))
    new_nodes, root = merkle.append(current.size, merkle.leaf_hash(data), frontier)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    index = connection.ops.quote_name("index")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_ENTRY} ({index}, receipt_id) VALUES (%s, %s)",
            [current.size, receipt.pk],
        )
        cursor.executemany(
            f"INSERT INTO {_NODE} (key, hash) VALUES (%s, %s)",
            [(LogNode.node_key(level, i), digest) for (level, i), digest in new_nodes.items()],
        )
        cursor.execute(
            f"INSERT INTO {_HEAD} (tree_size, root_hash, origin, created_at) "
            "VALUES (%s, %s, %s, %s)",
            [current.size + 1, root, current.origin, now],
        )
    return current.size


def inclusion_proof(index: int, size: int) -> list[bytes]:
    stored = _nodes(merkle.inclusion_proof_nodes(index, size))
    return merkle.inclusion_proof(index, size, lambda level, i: stored[(level, i)])


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


# (path, mtime_ns, size) -> the parsed state: re-read only when the file changes.
_state_cache: dict[str, tuple[tuple[str, int, int], Head]] = {}


def read_state() -> Head | None:
    path = _state_path()
    try:
        info = path.stat()
        stamp = (str(path), info.st_mtime_ns, info.st_size)
        cached = _state_cache.get("state")
        if cached and cached[0] == stamp:
            return cached[1]
        data = json.loads(path.read_text())
        state = Head(
            origin=data["origin"], size=int(data["tree_size"]), root=b64decode(data["root_hash"])
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as error:
        raise LogRollback(f"LOG_STATE_FILE is unreadable ({error}); refusing to sign") from None
    _state_cache["state"] = (stamp, state)
    return state


def _remember(current: Head) -> None:
    """Record `current` as the largest signed tree, unless another process already recorded a
    larger one. A lock file keeps two workers from writing out of order."""
    path = _state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = read_state()
        if known is not None and known.size >= current.size:
            return
        body = {"origin": current.origin, "tree_size": current.size, "root_hash": b64(current.root)}
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_text(json.dumps(body) + "\n")
        os.replace(temporary, path)


def guard(current: Head) -> Head | None:
    """Raise LogRollback unless `current` extends the largest tree the site has signed;
    return that tree (None before the first signature)."""
    known = read_state()
    if known is None:
        return None
    if known.size > current.size:
        problem = (
            f"the stored log has {current.size} leaves, but a tree of {known.size} leaves "
            "was signed before (was the database restored from an old backup?)"
        )
    elif (root_at(known.size) if known.size != current.size else current.root) != known.root:
        problem = (
            f"the stored log's tree of {known.size} leaves differs from the one signed before "
            "(the database's log was rewritten)"
        )
    else:
        return known
    logger.critical("transparency log: refusing to sign: %s", problem)
    raise LogRollback(problem)


def signed_head() -> SignedHead:
    """The current tree head, signed now by the active key. Raises LogRollback."""
    current = head()
    known = guard(current)
    key = signing.active_key()
    signed = _sign(current, key.kid)
    if known is None or known.size < current.size:
        _remember(current)
    return SignedHead(origin=current.origin, size=current.size, root=current.root, note=signed)


@functools.lru_cache(maxsize=4)
def _sign(current: Head, kid: str) -> str:
    """Ed25519 is deterministic: the same tree head and key give the same note, so it is made
    once per tree size, not once per request. `kid` is part of the cache key."""
    body = note.checkpoint_body(current.origin, current.size, current.root)
    return note.sign_note(body, current.origin, signing.active_key().private)

"""The durable outbox: one SQLite file that holds every receipt a producer made, before and
after it reaches the site.

Two append-only tables, nothing ever updated or deleted (triggers refuse it):

- `entries`: one row per receipt (one workflow step's attempt and phase), written before any
  network call: the redacted document as JSON text, its idempotency key (UNIQUE), and the
  workflow, step, attempt and phase it records.
- `events`: what happened to an entry since, in order: `written` (pending), `refused` (failed
  without being sent), one `attempt` per HTTP request (its answer, the status it left the
  entry in), and `claim` / `release` around a publication, so that two processes flushing one
  outbox at once publish each entry once. An entry's current status is that of its latest
  `written`, `refused` or `attempt` event.

A claim is a lease: it holds the entry until `lease_until`, or until its owner releases it, or
until its owner's process is gone (an owner names its host and pid, so a process killed in
the middle of a POST does not hold its entries until the lease runs out).

Standard library only; one connection per operation, so a Client may be shared by threads
and survives a fork.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

ReceiptStatus = Literal["pending", "published", "failed"]

PENDING: Final = "pending"
PUBLISHED: Final = "published"
FAILED: Final = "failed"

SCHEMA_VERSION: Final = 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS entries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL UNIQUE,
    workflow_id     TEXT NOT NULL,
    step_id         TEXT,
    attempt         INTEGER NOT NULL,
    phase           TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_workflow ON entries (workflow_id, seq);

CREATE TABLE IF NOT EXISTS events (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    entry          INTEGER NOT NULL REFERENCES entries (seq),
    kind           TEXT NOT NULL
                   CHECK (kind IN ('written', 'refused', 'attempt', 'claim', 'release')),
    receipt_status TEXT CHECK (receipt_status IN ('pending', 'published', 'failed')),
    http_status    INTEGER,
    replayed       INTEGER,
    receipt_id     TEXT,
    url            TEXT,
    verify_url     TEXT,
    output_hash    TEXT,
    recorded_at    TEXT,
    error          TEXT,
    problem        TEXT,
    owner          TEXT,
    lease_until    REAL,
    at             TEXT NOT NULL,
    CHECK ((kind IN ('written', 'refused', 'attempt')) = (receipt_status IS NOT NULL)),
    CHECK ((kind IN ('claim', 'release')) = (owner IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS events_by_entry ON events (entry, kind, seq);

CREATE TRIGGER IF NOT EXISTS entries_are_never_updated BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'the outbox is append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_are_never_deleted BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'the outbox is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_are_never_updated BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the outbox is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_are_never_deleted BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the outbox is append-only'); END;
"""

# An entry with its current status and problem (its latest status event), the site's answer
# that published it (its first attempt that got one), and the number of HTTP attempts made.
_ENTRY_QUERY: Final = """
SELECT e.seq, e.idempotency_key, e.workflow_id, e.step_id, e.attempt, e.phase, e.payload,
       e.created_at, s.receipt_status, p.receipt_id, p.url, p.verify_url, p.output_hash,
       p.recorded_at, s.error, s.problem, p.replayed,
       (SELECT COUNT(*) FROM events a WHERE a.entry = e.seq AND a.kind = 'attempt')
FROM entries e
JOIN events s ON s.seq = (
    SELECT MAX(x.seq) FROM events x
    WHERE x.entry = e.seq AND x.kind IN ('written', 'refused', 'attempt')
)
LEFT JOIN events p ON p.seq = (
    SELECT MIN(y.seq) FROM events y
    WHERE y.entry = e.seq AND y.kind = 'attempt' AND y.receipt_status = 'published'
    AND y.receipt_id IS NOT NULL
)
"""

# Pending entries with their latest claim and whether that claim's owner released it.
_PENDING_QUERY: Final = """
SELECT * FROM (
    SELECT e.seq AS seq, e.idempotency_key, e.payload,
           (SELECT x.receipt_status FROM events x
            WHERE x.entry = e.seq AND x.kind IN ('written', 'refused', 'attempt')
            ORDER BY x.seq DESC LIMIT 1) AS receipt_status,
           c.owner, c.lease_until,
           EXISTS (SELECT 1 FROM events r WHERE r.entry = e.seq AND r.kind = 'release'
                   AND r.owner = c.owner AND r.seq > c.seq) AS released
    FROM entries e
    LEFT JOIN events c ON c.seq = (
        SELECT MAX(y.seq) FROM events y WHERE y.entry = e.seq AND y.kind = 'claim'
    )
) WHERE receipt_status = 'pending'
"""


def now_rfc3339() -> str:
    """Now, as the site writes timestamps: UTC, microseconds, Z."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Entry:
    """One receipt in the outbox, as it stands now.

    `receipt_status` is the receipt's (pending, published, failed), never the work's: the
    work's own outcome is the document's `outcome`. `error` is the latest problem in plain
    words (a network error while pending; the site's problem, with its `errors`, when failed);
    `problem` the site's problem object itself, when it answered one.
    """

    idempotency_key: str
    workflow_id: str
    step_id: str | None
    attempt: int
    phase: str
    receipt_status: ReceiptStatus
    receipt_id: str | None
    url: str | None
    error: str | None
    created_at: str
    verify_url: str | None = None
    output_hash: str | None = None
    recorded_at: str | None = None
    replayed: bool | None = None
    publish_attempts: int = 0
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    problem: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Stored:
    """What a publisher needs of an entry: its row number, key and stored payload."""

    seq: int
    idempotency_key: str
    payload: str


@dataclass(frozen=True)
class NewEntry:
    idempotency_key: str
    workflow_id: str
    step_id: str | None
    attempt: int
    phase: str
    payload: str
    refused: str | None = None  # why it is failed without being sent, if it is


@dataclass(frozen=True)
class Outcome:
    """The facts of one HTTP attempt, appended as an `attempt` event."""

    receipt_status: ReceiptStatus
    http_status: int | None = None
    replayed: bool | None = None
    receipt_id: str | None = None
    url: str | None = None
    verify_url: str | None = None
    output_hash: str | None = None
    recorded_at: str | None = None
    error: str | None = None
    problem: Mapping[str, Any] | None = None


class IdempotencyKeyReused(ValueError):
    """record() was given a key the outbox already holds for a different document."""


def new_owner() -> str:
    """A claim owner: this host and process, and a token of its own."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _owner_is_gone(owner: str) -> bool:
    """True when the owner's process is known to be gone: same host, no such pid. A claim of
    another host is only ever released by its lease."""
    try:
        host, pid_text, _token = owner.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # someone else's live process
    return False


class Outbox:
    """The outbox file at `path`, created (with its folder) if missing."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            # WAL lets readers go on while one process writes; FULL makes each commit durable
            # (the point of an outbox is that what it said it wrote survives a crash).
            db.execute("PRAGMA journal_mode = WAL")
            with _immediate(db):
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise RuntimeError(
                        f"{self.path} is an outbox of a newer client (schema {version})"
                    )
                for statement in _SCHEMA.split(";\n"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def __repr__(self) -> str:
        return f"Outbox({str(self.path)!r})"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            yield db
        finally:
            db.close()

    # --- writes ------------------------------------------------------------------------------

    def write(
        self, rows: Iterable[NewEntry], *, owner: str, lease_until: float
    ) -> list[tuple[Stored, bool]]:
        """Write new entries (pending, or failed when refused) and claim those to publish, in
        one transaction. A key already in the outbox with the same payload is that entry again
        (claimed if it is pending and free); with another payload, IdempotencyKeyReused.
        Returns each entry and whether this owner now holds it."""
        out: list[tuple[Stored, bool]] = []
        at = now_rfc3339()
        now = time.time()
        with self._connect() as db, _immediate(db):
            for row in rows:
                found = db.execute(
                    "SELECT seq, payload FROM entries WHERE idempotency_key = ?",
                    (row.idempotency_key,),
                ).fetchone()
                if found is not None:
                    seq, payload = found
                    if payload != row.payload:
                        raise IdempotencyKeyReused(
                            f"the outbox already holds a different document under the "
                            f"idempotency key {row.idempotency_key!r}; a key names one receipt"
                        )
                    stored = Stored(seq, row.idempotency_key, payload)
                    free = self._claimable(db, now, owner, seqs=[seq])
                    if free:
                        self._append_claims(db, [seq], owner, lease_until, at)
                    out.append((stored, bool(free)))
                    continue
                cursor = db.execute(
                    "INSERT INTO entries (idempotency_key, workflow_id, step_id, attempt, phase,"
                    " payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        row.idempotency_key,
                        row.workflow_id,
                        row.step_id,
                        row.attempt,
                        row.phase,
                        row.payload,
                        at,
                    ),
                )
                seq = int(cursor.lastrowid or 0)
                if row.refused is not None:
                    db.execute(
                        "INSERT INTO events (entry, kind, receipt_status, error, at)"
                        " VALUES (?, 'refused', 'failed', ?, ?)",
                        (seq, row.refused, at),
                    )
                    out.append((Stored(seq, row.idempotency_key, row.payload), False))
                    continue
                db.execute(
                    "INSERT INTO events (entry, kind, receipt_status, at)"
                    " VALUES (?, 'written', 'pending', ?)",
                    (seq, at),
                )
                self._append_claims(db, [seq], owner, lease_until, at)
                out.append((Stored(seq, row.idempotency_key, row.payload), True))
        return out

    def claim(
        self,
        *,
        owner: str,
        lease_until: float,
        limit: int,
        exclude: Iterable[int] = (),
    ) -> list[Stored]:
        """Claim up to `limit` pending entries that nobody holds, oldest first."""
        skip = set(exclude)
        now = time.time()
        with self._connect() as db, _immediate(db):
            free = [row for row in self._claimable(db, now, owner) if row.seq not in skip][:limit]
            self._append_claims(db, [row.seq for row in free], owner, lease_until, now_rfc3339())
        return free

    def record_attempt(self, seq: int, outcome: Outcome) -> None:
        """Append one HTTP attempt and the status it leaves the entry in. A status once
        reached is not undone by a late attempt of an overlapping publisher: published stays
        published, and a failed entry never goes back to pending."""
        with self._connect() as db, _immediate(db):
            current = db.execute(
                "SELECT receipt_status FROM events WHERE entry = ?"
                " AND kind IN ('written', 'refused', 'attempt') ORDER BY seq DESC LIMIT 1",
                (seq,),
            ).fetchone()[0]
            status = outcome.receipt_status
            if current == PUBLISHED or (current == FAILED and status == PENDING):
                status = current
            db.execute(
                "INSERT INTO events (entry, kind, receipt_status, http_status, replayed,"
                " receipt_id, url, verify_url, output_hash, recorded_at, error, problem, at)"
                " VALUES (?, 'attempt', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    seq,
                    status,
                    outcome.http_status,
                    None if outcome.replayed is None else int(outcome.replayed),
                    outcome.receipt_id,
                    outcome.url,
                    outcome.verify_url,
                    outcome.output_hash,
                    outcome.recorded_at,
                    outcome.error,
                    None if outcome.problem is None else json.dumps(outcome.problem),
                    now_rfc3339(),
                ),
            )

    def release(self, seqs: Iterable[int], *, owner: str) -> None:
        """Let go of entries this owner claimed (whatever their status now)."""
        at = now_rfc3339()
        with self._connect() as db, _immediate(db):
            db.executemany(
                "INSERT INTO events (entry, kind, owner, at) VALUES (?, 'release', ?, ?)",
                [(seq, owner, at) for seq in seqs],
            )

    # --- reads -------------------------------------------------------------------------------

    def entries(
        self, workflow_id: str | None = None, *, seqs: Iterable[int] | None = None
    ) -> list[Entry]:
        """Entries as they stand now, oldest first; of one workflow, or of the given rows."""
        query, params = _ENTRY_QUERY, []
        if workflow_id is not None:
            query += " WHERE e.workflow_id = ?"
            params.append(workflow_id)
        query += " ORDER BY e.seq"
        wanted = None if seqs is None else set(seqs)
        with self._connect() as db:
            rows = db.execute(query, params).fetchall()
        return [_entry(row) for row in rows if wanted is None or row[0] in wanted]

    def events(self, idempotency_key: str | None = None) -> list[dict[str, Any]]:
        """Every event, oldest first (of one entry, when a key is given): the outbox's own
        history, for inspection and tests."""
        query = "SELECT e.idempotency_key, v.* FROM events v JOIN entries e ON e.seq = v.entry"
        params: list[Any] = []
        if idempotency_key is not None:
            query += " WHERE e.idempotency_key = ?"
            params.append(idempotency_key)
        query += " ORDER BY v.seq"
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(query, params)]

    # --- helpers -----------------------------------------------------------------------------

    def _claimable(
        self,
        db: sqlite3.Connection,
        now: float,
        owner: str,
        *,
        seqs: list[int] | None = None,
    ) -> list[Stored]:
        query, params = _PENDING_QUERY, []
        if seqs is not None:
            query += f" AND seq IN ({', '.join('?' * len(seqs))})"
            params = list(seqs)
        query += " ORDER BY seq"
        free: list[Stored] = []
        for seq, key, payload, _status, holder, lease_until, released in db.execute(query, params):
            held = (
                holder is not None
                and not released
                and holder != owner
                and lease_until > now
                and not _owner_is_gone(holder)
            )
            if not held:
                free.append(Stored(seq, key, payload))
        return free

    @staticmethod
    def _append_claims(
        db: sqlite3.Connection, seqs: list[int], owner: str, lease_until: float, at: str
    ) -> None:
        db.executemany(
            "INSERT INTO events (entry, kind, owner, lease_until, at) VALUES (?, 'claim', ?, ?, ?)",
            [(seq, owner, lease_until, at) for seq in seqs],
        )


@contextlib.contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken at once (BEGIN IMMEDIATE): two processes never interleave
    a read of what is claimable with a claim."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _entry(row: tuple[Any, ...]) -> Entry:
    (
        _seq,
        key,
        workflow_id,
        step_id,
        attempt,
        phase,
        payload,
        created_at,
        status,
        receipt_id,
        url,
        verify_url,
        output_hash,
        recorded_at,
        error,
        problem,
        replayed,
        attempts,
    ) = row
    return Entry(
        idempotency_key=key,
        workflow_id=workflow_id,
        step_id=step_id,
        attempt=attempt,
        phase=phase,
        receipt_status=status,
        receipt_id=receipt_id,
        url=url,
        error=None if status == PUBLISHED else error,
        created_at=created_at,
        verify_url=verify_url,
        output_hash=output_hash,
        recorded_at=recorded_at,
        replayed=None if replayed is None else bool(replayed),
        publish_attempts=attempts,
        document=json.loads(payload),
        problem=None if problem is None or status == PUBLISHED else json.loads(problem),
    )

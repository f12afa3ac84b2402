"""The bulk fill that log_scaling.py and run.py share: the stored log's rows written in bulk, in
the shape log.append() writes them, with hashes from a tree builder independent of the site's.

Storing 10^6 receipts one at a time through the ORM would take hours, so both benchmarks write
their data sets in chunks:

- `Builder`: an RFC 9162 tree built incrementally, written without receiptsite.integrity.merkle,
  so that the hashes the site later reads were not computed by the code under test;
- `LogWriter.write()`: one chunk in one transaction: the Receipt rows, and for each receipt, in
  log order, its LogEntry, the complete-subtree LogNodes it completes (keyed
  `level<<56 | index`) and the Checkpoint of the tree size it makes, with the builder's root;
  COPY on PostgreSQL, executemany on SQLite;
- `LogWriter.finish()`: Receipt's id sequence moved past the ids written by hand and, on
  PostgreSQL, the tables VACUUM ANALYZEd.

What the receipts hold differs (log_scaling's are minimal and never verified, run.py's verify),
so each script makes its own Receipt rows; this module only writes them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

_sha256 = hashlib.sha256

# One receipt's log row values: (its Receipt id, its leaf hash, the created_at of the
# Checkpoint of the size it makes, as the database backend takes it).
Leaf = tuple[int, bytes, Any]


class Builder:
    """RFC 9162 tree built incrementally, independent of receiptsite.integrity.merkle:
    levels[l][i] is the hash of the complete subtree (l, i); `stack` is the frontier (the
    complete subtrees the current size decomposes into, left to right)."""

    def __init__(self) -> None:
        self.levels: list[list[bytes]] = [[]]
        self.stack: list[bytes] = []

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def add(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add a leaf hash; return the complete subtrees (level, index, hash) it completes."""
        levels, stack = self.levels, self.stack
        level = 0
        new = [(0, len(levels[0]), leaf)]
        levels[0].append(leaf)
        stack.append(leaf)
        while not len(levels[level]) & 1:  # the node just added is a right child
            right = stack.pop()
            parent = _sha256(b"\x01" + stack.pop() + right).digest()
            stack.append(parent)
            level += 1
            if len(levels) == level:
                levels.append([])
            new.append((level, len(levels[level]), parent))
            levels[level].append(parent)
        return new

    def root(self) -> bytes:
        stack = self.stack
        if not stack:
            return _sha256(b"").digest()
        acc = stack[-1]
        for node in reversed(stack[:-1]):
            acc = _sha256(b"\x01" + node + acc).digest()
        return acc

    def root_at(self, size: int) -> bytes:
        if size == 0:
            return _sha256(b"").digest()
        parts, start = [], 0
        for level in range(size.bit_length() - 1, -1, -1):
            if size >> level & 1:
                parts.append(self.levels[level][start >> level])
                start += 1 << level
        acc = parts[-1]
        for node in reversed(parts[:-1]):
            acc = _sha256(b"\x01" + node + acc).digest()
        return acc

    def get(self, level: int, index: int) -> bytes:
        return self.levels[level][index]


def leaf_of(data: bytes) -> bytes:
    """RFC 9162's leaf hash, computed here rather than by the site's merkle.leaf_hash."""
    return _sha256(b"\x00" + data).digest()


class LogWriter:
    """Bulk writes of receipts and their log rows on Django's default connection; `builder`
    follows the stored log, so the next chunk's first leaf has index `builder.size`."""

    def __init__(self) -> None:
        from django.db import connection

        from receiptsite.receipts.models import Receipt

        self.connection = connection
        self.vendor = connection.vendor
        self.builder = Builder()
        # Every concrete column of Receipt, so that a column added later is written too (with
        # whatever value the caller's row gives it): a Receipt row follows this order.
        self.receipt_fields = list(Receipt._meta.concrete_fields)

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        quote = self.connection.ops.quote_name
        names = ", ".join(quote(c) for c in columns)
        with self.connection.cursor() as cursor:
            if self.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {quote(table)} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(columns))
                cursor.executemany(f"INSERT INTO {quote(table)} ({names}) VALUES ({marks})", rows)

    def write(self, receipts: Sequence[Sequence[Any]], leaves: Sequence[Leaf], origin: str) -> None:
        """One chunk, in one transaction: `receipts` (rows in the order of `receipt_fields`)
        and, for each of `leaves` in log order, the rows log.append() would have written."""
        from django.db import transaction

        from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode, Receipt

        builder = self.builder
        entries, nodes, checkpoints = [], [], []
        for receipt_id, leaf, created_at in leaves:
            entries.append((builder.size, receipt_id))
            for level, i, digest in builder.add(leaf):
                nodes.append((LogNode.node_key(level, i), digest))
            checkpoints.append((builder.size, builder.root(), origin, created_at))
        with transaction.atomic():
            self.insert(
                Receipt._meta.db_table, [str(f.column) for f in self.receipt_fields], receipts
            )
            self.insert(LogEntry._meta.db_table, ["index", "receipt_id"], entries)
            self.insert(LogNode._meta.db_table, ["key", "hash"], nodes)
            self.insert(
                Checkpoint._meta.db_table,
                ["tree_size", "root_hash", "origin", "created_at"],
                checkpoints,
            )

    def finish(self) -> None:
        """After the last chunk of a fill: the next Receipt the site creates gets an id after
        the ones written here, and the planner has statistics of the filled tables."""
        from django.core.management.color import no_style

        from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode, Receipt

        with self.connection.cursor() as cursor:
            for sql in self.connection.ops.sequence_reset_sql(no_style(), [Receipt]):
                cursor.execute(sql)
            if self.vendor == "postgresql":
                # What autovacuum would soon do anyway; done now so that it does not run
                # during the measurement.
                for model in (Receipt, LogEntry, LogNode, Checkpoint):
                    cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")

#!/usr/bin/env python
"""How the transparency log scales: time per append, inclusion proof and consistency proof at
10^3, 10^4, 10^5 and 10^6 leaves, with the ratio to the smallest size measured in the same run.

Run from the repository root:

    .venv/bin/python bench/log_scaling.py                       # SQLite temp file
    .venv/bin/python bench/log_scaling.py --database-url postgres://postgres@127.0.0.1:5432/bench_log
    .venv/bin/python bench/log_scaling.py --sizes 1000,10000 --appends 100

Two layers are measured.

(a) The pure scheme: receiptsite.integrity.merkle.MemoryTree (a dict for the node table).
    The tree's dict is filled up to each size in bulk from the independent builder of
    bench/_fill.py (not timed), then, after 100 untimed warm-ups each, `--memory-ops` calls
    each of MemoryTree.append(data), merkle.inclusion_proof(i, size, tree.get) and
    merkle.consistency_proof(m, size, tree.get) are timed one by one, i and m uniformly random.
    Every node MemoryTree.append stores is compared with the builder's, every proof verified.

(b) The stored log: the real receiptsite.ledger.log.append(), inclusion_proof() and
    consistency_proof() against a real database (its own SQLite temp file, or its own
    PostgreSQL database created and dropped by the script).

    Filling. Appending 10^6 leaves through the ORM one at a time would take far too long, so the
    first N leaves are written in bulk by bench/_fill.py, the fill run.py uses too (COPY on
    PostgreSQL, executemany on SQLite, in transactions of 20,000 leaves), in the shape
    log.append() writes them: one minimal Receipt row per leaf (every column of the model,
    defaults for the optional ones; its canonical bytes are a small RFC 8785 document
    `{"id","schema","workflow_id"}` and its signature is 64 zero bytes: these filler receipts
    are never verified), one LogEntry row (index -> receipt), every complete-subtree LogNode row
    (key = level<<56 | index), and one Checkpoint row per tree size with its correct root. The
    hashes come from an independent incremental builder (bench/_fill.py, not the site's code),
    checked against merkle.root_from_leaves at small sizes; after each fill log.head() must
    return the builder's size and root. So at size N the log tables hold the rows a site that
    had stored N receipts would hold, and their indexes have their real depth. On PostgreSQL the
    filled tables are then VACUUM ANALYZEd (what autovacuum would soon do; done first so that it
    does not run during the timing).
    The database grows from one size to the next (10^3, then filled on to 10^4, ...); the
    operations "at N" run at tree sizes N to N + K + 10 (the appends add leaves).

    Appends. `--appends` K (after 10 untimed warm-up appends) real appends, each exactly as
    services.receipt_ingest does it: transaction.atomic(), log.lock_for_append(), one
    Receipt.objects.create() of a new receipt (signed with the site's key), log.append(receipt,
    canonical_bytes), commit. Two times are reported per append:
      - "log.append()": the call alone (head read, frontier read, LogEntry + LogNode +
        Checkpoint inserts), inside the open transaction;
      - "transaction": lock + Receipt insert + log.append() + COMMIT (on SQLite the commit is an
        fsync: synchronous=FULL, WAL, as the site configures it).
    The document building, canonicalisation and signing of services.receipt_ingest are not
    part of either time (they do not depend on the log's size).

    Proofs. `--proofs` P calls each (after 10 untimed warm-ups) of log.inclusion_proof(i, size)
    and log.consistency_proof(m, size) at the current tree size, i and m uniformly random, in
    autocommit, as the verify view calls them. Every proof is compared with the proof computed
    from the independent builder and checked with merkle.verify_inclusion/verify_consistency.

The output also has the 1-minute load average (other processes on the machine make the
figures noisier), the bytes on disk of each table with its indexes, and the query plans of
the SELECTs of one append and one inclusion proof at the largest size.

Queries per operation are counted with django.test.utils.CaptureQueriesContext on the warm-up
operations (counting adds overhead, so the timed ones run without it). "nodes" is the number
of stored complete-subtree hashes the operation reads (merkle.nodes_for_append /
inclusion_proof_nodes / consistency_proof_nodes: the keys of its one IN query).

Ratios are to the smallest size (10^3 by default), measured in the same run; log2(n) is
printed alongside as the shape logarithmic growth would have (log2 10^6 / log2 10^3 = 2).
Times are medians (means alongside); a handful of fsync or page-cache outliers move a mean a
lot at these op counts. The script exits 1 if any root, index or proof is wrong; it has no
timing thresholds.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import math
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import Wrong, fail, mean, median, percentile  # noqa: E402
from _fill import Builder, LogWriter, leaf_of  # noqa: E402

WARMUP = 10
FILL_CHUNK = 20_000


# --- measurements ----------------------------------------------------------------------------


@dataclass
class Op:
    times: list[float] = field(default_factory=list)  # seconds
    nodes: list[int] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return median(self.times)


@dataclass
class Row:
    size: int  # the size the layer was filled to
    measured_at: str  # the tree sizes the ops ran at
    ops: dict[str, Op]
    fill_seconds: float = 0.0
    extra: str = ""


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def load() -> str:
    """The 1-minute load average: other processes on the machine make the figures noisier."""
    return f"{os.getloadavg()[0]:.1f}"


def timed(call: Callable[..., Any], *args: object) -> tuple[float, Any]:
    start = time.perf_counter()
    value = call(*args)
    return time.perf_counter() - start, value


def print_layer(title: str, rows: list[Row], names: list[tuple[str, str]]) -> None:
    base = rows[0]
    print()
    print(title)
    header = f"{'leaves':>11} {'log2 n':>7} "
    for _, label in names:
        header += f"| {label:^38} "
    print(header)
    sub = f"{'':>11} {'(ratio)':>7} "
    for _ in names:
        sub += f"| {'p50 us':>9} {'mean us':>9} {'ratio':>6} {'nodes':>5} {'q':>3} "
    print(sub)
    for row in rows:
        line = f"{row.size:>11,} {math.log2(row.size) / math.log2(base.size):>7.2f} "
        for key, _ in names:
            op = row.ops[key]
            queries = f"{mean(op.queries):.0f}" if op.queries else "-"
            line += (
                f"| {us(op.p50):>9} {us(mean(op.times)):>9} "
                f"{_common.ratio(op.p50, base.ops[key].p50):>6} "
                f"{mean(op.nodes):>5.1f} {queries:>3} "
            )
        print(line)


# --- (a) the pure scheme ---------------------------------------------------------------------


def memory_layer(sizes: list[int], ops: int, rng: random.Random) -> list[Row]:
    from receiptsite.integrity import merkle

    tree = merkle.MemoryTree()
    builder = Builder()
    rows: list[Row] = []
    counter = 0
    print(
        f"\n(a) pure scheme: merkle.MemoryTree, {ops} timed calls of each operation per size "
        f"(+{WARMUP * 10} warm-ups each)"
    )
    for size in sizes:
        start = time.perf_counter()
        while builder.size < size:
            data = b"memory leaf %d" % counter
            counter += 1
            for level, index, digest in builder.add(leaf_of(data)):
                tree.nodes[(level, index)] = digest
        tree.size = builder.size
        fill = time.perf_counter() - start
        if tree.root() != builder.root():
            fail(f"MemoryTree root differs from the builder's at size {tree.size}")
        if size <= 4096 and merkle.root_from_leaves(builder.levels[0]) != builder.root():
            fail(f"the builder disagrees with merkle.root_from_leaves at size {size}")

        append, inclusion, consistency = Op(), Op(), Op()
        first_size = tree.size
        for j in range(WARMUP * 10 + ops):
            data = b"memory leaf %d" % counter
            counter += 1
            nodes = len(merkle.nodes_for_append(tree.size))
            seconds, index = timed(tree.append, data)
            if j >= WARMUP * 10:
                append.times.append(seconds)
                append.nodes.append(nodes)
            if index != builder.size:
                fail(f"MemoryTree.append returned {index}, expected {builder.size}")
            for level, i, digest in builder.add(leaf_of(data)):
                if tree.nodes.get((level, i)) != digest:
                    fail(f"MemoryTree stored a wrong node ({level}, {i}) at size {builder.size}")
        n = tree.size
        root = builder.root()
        if tree.root() != root:
            fail(f"MemoryTree root differs from the builder's at size {n}")
        for j in range(WARMUP * 10 + ops):
            i = rng.randrange(n)
            seconds, proof = timed(merkle.inclusion_proof, i, n, tree.get)
            if j >= WARMUP * 10:
                inclusion.times.append(seconds)
                inclusion.nodes.append(len(merkle.inclusion_proof_nodes(i, n)))
            if not merkle.verify_inclusion(builder.levels[0][i], i, n, proof, root):  # type: ignore[arg-type]
                fail(f"inclusion proof for {i} in {n} does not verify")
        for j in range(WARMUP * 10 + ops):
            m = rng.randint(1, n - 1)
            seconds, proof = timed(merkle.consistency_proof, m, n, tree.get)
            if j >= WARMUP * 10:
                consistency.times.append(seconds)
                consistency.nodes.append(len(merkle.consistency_proof_nodes(m, n)))
            if not merkle.verify_consistency(m, n, proof, builder.root_at(m), root):  # type: ignore[arg-type]
                fail(f"consistency proof {m} -> {n} does not verify")
        row = Row(
            size=size,
            measured_at=f"{first_size:,}..{n:,}",
            ops={"append": append, "inclusion": inclusion, "consistency": consistency},
            fill_seconds=fill,
        )
        rows.append(row)
        print(
            f"  {size:>9,} leaves: filled in {fill:5.1f} s; load {load()}; "
            f"append p50 {us(append.p50)} us, "
            f"inclusion p50 {us(inclusion.p50)} us, consistency p50 {us(consistency.p50)} us"
        )
    print_layer(
        "(a) pure scheme, per call (ratio = p50 / p50 at the smallest size; nodes = stored "
        "hashes read)",
        rows,
        [
            ("append", "MemoryTree.append"),
            ("inclusion", "merkle.inclusion_proof"),
            ("consistency", "merkle.consistency_proof"),
        ],
    )
    return rows


# --- (b) the stored log ----------------------------------------------------------------------


class Store(LogWriter):
    """The log's rows written in bulk (bench/_fill.py), with minimal receipts of their own."""

    def __init__(self) -> None:
        from django.conf import settings
        from django.utils import timezone

        from receiptsite.ledger import keyring
        from receiptsite.receipts.models import ApiKey, Receipt, Tenant

        super().__init__()
        self.tenant = Tenant.objects.create(slug="bench", name="Benchmark")
        self.api_key, _ = ApiKey.issue(self.tenant)
        self.signing_row = keyring.active_key().row
        self.origin = settings.LOG_ORIGIN
        self.now = timezone.now
        self.uuid_field = Receipt._meta.get_field("public_id")

    def fill(self, target: int) -> float:
        """Write receipts, log entries, nodes and checkpoints for leaves size..target-1."""
        from django.db.models import BinaryField, Max

        from receiptsite.receipts.models import Receipt

        start = time.perf_counter()
        builder = self.builder
        next_id = (Receipt.objects.aggregate(top=Max("id"))["top"] or 0) + 1
        fields = self.receipt_fields
        per_row = {"id", "public_id", "request_hash", "canonical_bytes", "output_hash"}
        while builder.size < target:
            stop = min(target, builder.size + FILL_CHUNK)
            template = Receipt(
                tenant=self.tenant,
                api_key=self.api_key,
                recorded_at=self.now(),
                workflow_id="bench-fill",
                phase="end",
                subject_name="bench",
                outcome="succeeded",
                signature=bytes(64),
                signing_key=self.signing_row,
            )
            # The columns every row of the chunk shares, filled by the model (defaults included).
            constant = {
                f.attname: bytes(getattr(template, f.attname))
                if isinstance(f, BinaryField)
                else f.get_db_prep_save(getattr(template, f.attname), self.connection)
                for f in fields
                if f.attname not in per_row
            }
            created_at = constant["recorded_at"]
            receipts, leaves = [], []
            for _ in range(builder.size, stop):
                public_id = uuid.uuid4()
                data = (
                    b'{"id":"%s","schema":"receipt/v1","workflow_id":"bench-fill"}'
                    % str(public_id).encode()
                )
                digest = hashlib.sha256(data).hexdigest()
                values = {
                    **constant,
                    "id": next_id,
                    "public_id": self.uuid_field.get_db_prep_save(public_id, self.connection),
                    "request_hash": digest,
                    "canonical_bytes": data,
                    "output_hash": digest,
                }
                receipts.append(tuple(values[f.attname] for f in fields))
                leaves.append((next_id, leaf_of(data), created_at))
                next_id += 1
            self.write(receipts, leaves, self.origin)
        self.finish()
        return time.perf_counter() - start

    def database_bytes(self) -> int:
        with self.connection.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute("SELECT pg_database_size(current_database())")
                return int(cursor.fetchone()[0])
            cursor.execute("PRAGMA page_count")
            pages = int(cursor.fetchone()[0])
            cursor.execute("PRAGMA page_size")
            return pages * int(cursor.fetchone()[0])

    def table_bytes(self) -> dict[str, int]:
        """Bytes on disk of each log table and of the receipts table, indexes included."""
        from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode, Receipt

        tables = [m._meta.db_table for m in (Receipt, LogEntry, LogNode, Checkpoint)]
        with self.connection.cursor() as cursor:
            if self.vendor == "postgresql":
                sizes = {}
                for table in tables:
                    cursor.execute("SELECT pg_total_relation_size(%s)", [table])
                    sizes[table] = int(cursor.fetchone()[0])
                return sizes
            cursor.execute(
                "SELECT m.tbl_name, SUM(s.pgsize) FROM dbstat s "
                "JOIN sqlite_master m ON m.name = s.name GROUP BY m.tbl_name"
            )
            found = dict(cursor.fetchall())
            return {table: int(found.get(table, 0)) for table in tables}

    def explain(self, sql: str) -> list[str]:
        with self.connection.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute("EXPLAIN " + sql)
                return [r[0] for r in cursor.fetchall()]
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            return [r[-1] for r in cursor.fetchall()]


def db_layer(
    sizes: list[int], appends: int, proofs: int, rng: random.Random, description: str
) -> list[Row]:
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from receiptsite.integrity import merkle
    from receiptsite.integrity.canonical import sha256_hex
    from receiptsite.ledger import keyring, log
    from receiptsite.receipts.models import Receipt

    store = Store()
    builder = store.builder
    rows: list[Row] = []
    plans: list[tuple[str, str, list[str]]] = []
    storage: list[tuple[int, dict[str, int]]] = []
    print(
        f"\n(b) stored log on {description}: {appends} appends and {proofs} proofs of each kind "
        f"per size (+{WARMUP} warm-ups each)"
    )

    def new_receipt() -> tuple[dict[str, object], bytes]:
        public_id = uuid.uuid4()
        data = (
            b'{"id":"%s","schema":"receipt/v1","workflow_id":"bench-append"}'
            % str(public_id).encode()
        )
        signature, key = keyring.sign(data)
        digest = sha256_hex(data)
        fields: dict[str, object] = {
            "public_id": public_id,
            "tenant": store.tenant,
            "api_key": store.api_key,
            "recorded_at": timezone.now(),
            "workflow_id": "bench-append",
            "phase": "end",
            "subject_name": "bench",
            "outcome": "succeeded",
            "request_hash": digest,
            "canonical_bytes": data,
            "output_hash": digest,
            "signature": signature,
            "signing_key": key,
        }
        return fields, data

    largest = sizes[-1]
    for size in sizes:
        gc.collect()
        fill = store.fill(size)
        if log.head().size != size or log.head().root != builder.root():
            fail(f"the stored head after the bulk fill is not the builder's tree of {size}")
        append, transaction_op = Op(), Op()
        inclusion, consistency = Op(), Op()
        first_size = builder.size
        for j in range(WARMUP + appends):
            fields, data = new_receipt()
            expected = builder.size
            counting = j < WARMUP
            nodes = len(merkle.nodes_for_append(expected))
            start = time.perf_counter()
            with transaction.atomic():
                log.lock_for_append()
                receipt = Receipt.objects.create(**fields)
                if counting:
                    with CaptureQueriesContext(connection) as captured:
                        index = log.append(receipt, data).size - 1
                    append.queries.append(len(captured.captured_queries))
                    if size == largest and j == 0:
                        for query in captured.captured_queries:
                            if query["sql"].lstrip().upper().startswith("SELECT"):
                                plans.append(
                                    ("log.append", query["sql"], store.explain(query["sql"]))
                                )
                    seconds = float("nan")
                else:
                    t0 = time.perf_counter()
                    index = log.append(receipt, data).size - 1
                    seconds = time.perf_counter() - t0
            total = time.perf_counter() - start
            if index != expected:
                fail(f"log.append returned index {index}, expected {expected}")
            builder.add(leaf_of(data))
            if not counting:
                append.times.append(seconds)
                append.nodes.append(nodes)
                transaction_op.times.append(total)
                transaction_op.nodes.append(nodes)
        current = log.head()
        n = builder.size
        root = builder.root()
        if current.size != n or current.root != root:
            fail(f"the stored head after the appends differs from the builder's tree of {n}")
        probe = rng.randint(1, n)
        if log.root_at(probe) != builder.root_at(probe):
            fail(f"the stored checkpoint of size {probe} has a wrong root")

        for j in range(WARMUP + proofs):
            i = rng.randrange(n)
            counting = j < WARMUP
            if counting:
                with CaptureQueriesContext(connection) as captured:
                    proof = log.inclusion_proof(i, n)
                inclusion.queries.append(len(captured.captured_queries))
                if size == largest and j == 0:
                    sql = captured.captured_queries[0]["sql"]
                    plans.append(("log.inclusion_proof", sql, store.explain(sql)))
            else:
                seconds, proof = timed(log.inclusion_proof, i, n)
                inclusion.times.append(seconds)
                inclusion.nodes.append(len(merkle.inclusion_proof_nodes(i, n)))
            if proof != merkle.inclusion_proof(i, n, builder.get) or not merkle.verify_inclusion(
                builder.levels[0][i],
                i,
                n,
                proof,
                root,  # type: ignore[arg-type]
            ):
                fail(f"stored inclusion proof for leaf {i} in {n} is wrong")
        for j in range(WARMUP + proofs):
            m = rng.randint(1, n - 1)
            counting = j < WARMUP
            if counting:
                with CaptureQueriesContext(connection) as captured:
                    proof = log.consistency_proof(m, n)
                consistency.queries.append(len(captured.captured_queries))
            else:
                seconds, proof = timed(log.consistency_proof, m, n)
                consistency.times.append(seconds)
                consistency.nodes.append(len(merkle.consistency_proof_nodes(m, n)))
            if proof != merkle.consistency_proof(
                m, n, builder.get
            ) or not merkle.verify_consistency(m, n, proof, builder.root_at(m), root):  # type: ignore[arg-type]
                fail(f"stored consistency proof {m} -> {n} is wrong")
        transaction_op.queries = []
        row = Row(
            size=size,
            measured_at=f"{first_size:,}..{n:,}",
            ops={
                "append": append,
                "transaction": transaction_op,
                "inclusion": inclusion,
                "consistency": consistency,
            },
            fill_seconds=fill,
            extra=f"{store.database_bytes() / 2**20:,.0f} MiB",
        )
        storage.append((n, store.table_bytes()))
        rows.append(row)
        print(
            f"  {size:>9,} leaves: bulk fill {fill:6.1f} s, database {row.extra}, load {load()};\n"
            "                    "
            f"log.append p50 {us(append.p50)} us (p95 {us(percentile(append.times, 0.95))}), "
            f"transaction p50 {us(transaction_op.p50)} us, "
            f"inclusion p50 {us(inclusion.p50)} us, consistency p50 {us(consistency.p50)} us"
        )

    print_layer(
        "(b) stored log, per call (ratio = p50 / p50 at the smallest size; nodes = LogNode rows "
        "read; q = SQL queries)",
        rows,
        [
            ("append", "log.append()"),
            ("inclusion", "log.inclusion_proof()"),
            ("consistency", "log.consistency_proof()"),
        ],
    )
    base = rows[0].ops["transaction"]
    print(
        "\n(b) whole storing transaction per append: lock_for_append + Receipt insert + "
        "log.append() + COMMIT"
    )
    print(f"{'leaves':>11} | {'p50 us':>9} {'mean us':>9} {'p95 us':>9} {'ratio':>6}")
    for row in rows:
        op = row.ops["transaction"]
        print(
            f"{row.size:>11,} | {us(op.p50):>9} {us(mean(op.times)):>9} "
            f"{us(percentile(op.times, 0.95)):>9} {_common.ratio(op.p50, base.p50):>6}"
        )
    print(
        "\nstorage on disk, tables with their indexes (bytes per leaf in brackets; the filler "
        "receipts are smaller than real ones)"
    )
    names = list(storage[0][1])
    short = [name.removeprefix("receipts_") for name in names]
    print(f"{'leaves':>11} | " + " | ".join(f"{name:>20}" for name in short))
    for n, sizes_ in storage:
        print(
            f"{n:>11,} | "
            + " | ".join(
                f"{sizes_[name] / 2**20:>9.1f} MiB [{sizes_[name] / n:>4.0f}]" for name in names
            )
        )
    print(f"\nquery plans at {largest:,} leaves (SELECTs of one append and one inclusion proof):")
    for name, sql, lines in plans:
        shown = sql if len(sql) < 160 else sql[:157] + "..."
        print(f"  {name}: {shown}")
        for line in lines:
            print(f"      {line if len(line) < 140 else line[:137] + '...'}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="1000,10000,100000,1000000",
        help="comma-separated log sizes (default 1000,10000,100000,1000000)",
    )
    parser.add_argument("--appends", type=int, default=200, help="timed appends per size (db)")
    parser.add_argument("--proofs", type=int, default=200, help="timed proofs per kind (db)")
    parser.add_argument(
        "--memory-ops",
        type=int,
        default=2000,
        help="timed calls per operation and size in the pure layer",
    )
    parser.add_argument("--layers", default="memory,db", help="memory, db, or both")
    parser.add_argument("--seed", type=int, default=9162)
    _common.add_database_argument(parser)
    args = parser.parse_args()
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    if not sizes or sizes[0] < 2:
        parser.error("sizes must be at least 2")
    layers = {layer.strip() for layer in args.layers.split(",")}

    started = time.perf_counter()
    description = _common.setup_django(args, migrate="db" in layers)
    print(f"log_scaling: {_common.machine()}")
    print(f"sizes {', '.join(f'{s:,}' for s in sizes)}; seed {args.seed}")
    try:
        if "memory" in layers:
            memory_layer(sizes, args.memory_ops, random.Random(args.seed))
            gc.collect()
        if "db" in layers:
            db_layer(sizes, args.appends, args.proofs, random.Random(args.seed), description)
    except Wrong as error:
        print(f"\nWRONG RESULT: {error}", file=sys.stderr)
        return 1
    print(
        f"\nall roots, indexes and proofs checked; total run time "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

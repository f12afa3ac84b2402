#!/usr/bin/env python
"""The site under load: a real gunicorn, a real database, wrk on loopback.

Run from the repository root:

    .venv/bin/python bench/run.py                          # PostgreSQL, 100,000 receipts
    .venv/bin/python bench/run.py --database sqlite
    .venv/bin/python bench/run.py --receipts 1000000       # the large run
    .venv/bin/python bench/run.py --sizes 10000,1000000    # how reads scale with the data set

What it does, in order:

1. A database of its own: on PostgreSQL (the default) a database `bench_run_<random>` created
   on the local server (`--database-url` names another server or name) and dropped at exit
   (bench/_common.py); with `--database sqlite`, a file in a temporary directory. A signing
   key, LOG_STATE_FILE, SECRET_KEY and VAR_DIR in that directory too. `migrate`, static files
   collected, two tenants with one API key each.
2. The fill: `--receipts` receipts (or each size of `--sizes` in turn, filling up to the next
   size between measurements) that verify, made in `--fill-processes` processes and written
   with COPY (PostgreSQL) or executemany (SQLite) in the shape the site writes them: Receipt,
   LogEntry, every complete-subtree LogNode and one Checkpoint per tree size, whose hashes
   come from an independent tree builder (bench/log_scaling.py's). A receipt whose body holds
   a secret is built by the site's own functions, as an ingest builds it (document.validate,
   links, redact.redact, document.evidence_document, canonical_bytes); the others by the same
   steps with json.dumps(sort_keys=True) for the RFC 8785 bytes (the pure-Python serialiser
   would take most of the fill's time), and one in SITE_SAMPLE both ways, which must agree to
   the byte. Every receipt is signed with the site's key (keyring, integrity.keys.sign) and
   its stored columns come from evidence.columns_of. The final head is then signed with the
   site's code (log.sign_head(), which also writes LOG_STATE_FILE), and a few random
   receipts must verify "valid" in-process. The contents vary as a real tenant's do:
   workflows of a dozen receipts (tool starts and ends, retries, a completion linking its
   children, a confirmation or hand-off naming its parent), sessions of four workflows, two
   dozen subjects of unequal popularity, every phase and outcome, one receipt in ten of a
   second tenant, about 1.8 KB of canonical bytes each, now and then a secret the site
   redacts.
3. The site: `gunicorn receiptsite.wsgi -c gunicorn.conf.py -k gthread -w 2 --threads 4`
   (`--workers`, `--threads`) with RATE_LIMITS=off, and for the baseline the same command
   line serving bench/raw_wsgi.py (a fixed 2 KB JSON answer), one at a time.
4. Before the load, one answer of each route is checked properly: verify says "valid", the
   page is 200 with the receipt and without the tamper warning, each list answer is the
   receipts the same filter selects in the database, ingest is 201 and what it stored
   verifies. Then wrk (`-t 2 -c 16`, `--duration` seconds per route after `--warmup`
   seconds) drives each route from its own process: the Lua scripts in bench/wrk/ pick a
   random stored id (or filter value) per request, give every POST new idempotency keys, and
   count every answer outside 2xx. While wrk runs, the VmHWM of each gunicorn worker is read
   from /proc/<pid>/status (workers are recycled after max_requests, so all of them are
   followed).
5. Printed: requests/s, receipts/s (ingest: how much the stored log grew during the timed
   run, so a batch still being stored at the end counts), p50 and p99 latency, non-2xx
   answers and socket errors, the peak RSS per worker, each figure's ratio to the raw
   baseline of the same run,
   the targets and whether each holds; with `--sizes`, the read latencies at each size and
   the largest size's as a ratio to the smallest; the query plans (EXPLAIN, or EXPLAIN QUERY
   PLAN on SQLite) of the SQL that verify, the page and each list filter run, captured from
   one request each in-process (django.test.utils.CaptureQueriesContext).

The script exits 1 only if a result is wrong: a check before the load fails, a non-2xx answer
during it, ingest answers for more receipts than the log grew by, a receipt that does not
verify. It has no timing thresholds: a missed target is
printed, not an error. wrk is Debian's package `wrk`; when it is missing the script installs it
with apt-get as root, and otherwise stops with a line saying how.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import hashlib
import itertools
import json
import multiprocessing
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from log_scaling import Builder  # noqa: E402

REPO = _common.REPO
BENCH = REPO / "bench"
VENV_BIN = (
    REPO / ".venv" / "bin" if (REPO / ".venv" / "bin").is_dir() else Path(sys.executable).parent
)
GUNICORN = VENV_BIN / "gunicorn"
DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/"
CHUNK = 6_000  # receipts per fill chunk (a multiple of the 12-receipt workflow)
START_TIMEOUT = 60  # seconds until a gunicorn answers
SAMPLE = 20_000  # random stored receipts the GET routes pick from
BATCH = 100  # receipts per batch body


class Wrong(Exception):
    """A result is wrong: the script exits 1."""


def fail(message: str) -> None:
    raise Wrong(message)


# --- the data set ------------------------------------------------------------------------------

TENANTS = (("acme", "Acme Corp"), ("globex", "Globex Logistics"))
OUTCOMES = ("succeeded", "failed", "timed_out", "uncertain")
# (type, name) with Zipf-like popularity: the first is about ten times as common as the last.
SUBJECTS = (
    ("tool", "web_search"), ("tool", "website_audit"), ("tool", "sql_query"),
    ("tool", "send_email"), ("tool", "fetch_url"), ("tool", "crm_update"),
    ("tool", "create_invoice"), ("tool", "refund_payment"), ("tool", "read_file"),
    ("tool", "write_file"), ("tool", "calendar_lookup"), ("tool", "slack_post"),
    ("tool", "geocode"), ("tool", "translate"), ("tool", "summarise_pdf"),
    ("model", "gpt-4o"), ("model", "claude-sonnet"), ("external", "stripe_webhook"),
    ("external", "github_pull_request"), ("tool", "ticket_lookup"),
)  # fmt: skip
TASKS = (("task", "research"), ("task", "write_report"), ("agent_run", "support_agent"),
         ("task", "triage_ticket"), ("chain", "rag_pipeline"))  # fmt: skip
SUBJECT_WEIGHTS = list(itertools.accumulate(1 / (k + 1) for k in range(len(SUBJECTS))))
OUTCOME_WEIGHTS = list(itertools.accumulate((85, 8, 4, 3)))
FRAMEWORKS = ("langchain", "crewai", "openai-agents", "custom")
SENTENCES = (
    "The tool returned a complete answer within its time limit.",
    "The request was sent to the production endpoint of the service.",
    "Three records matched the query and were returned in full.",
    "The response carried a status code of 200 and a JSON body.",
    "The agent passed the customer's order number as the only argument.",
    "No retry was needed; the first attempt succeeded.",
    "The answer was summarised before it was handed back to the model.",
    "The call used the read-only credentials of the support team.",
    "A draft was written but not sent; a person has to approve it first.",
    "The page was fetched over HTTPS and parsed as HTML.",
    "The invoice total was computed from the line items shown.",
    "The run was started by a scheduled job, not by a person.",
)
NOT_OBSERVED = (
    "Whether the customer read the message.",
    "Whether the refund reached the bank account.",
    "Whether the numbers in the report are correct.",
    "What the external service did with the request after answering.",
    "Whether a person reviewed the draft before it was sent.",
)
WORDS = (
    "order", "shipment", "invoice", "customer", "refund", "ticket", "report", "summary", "audit",
    "page", "query", "record", "account", "payment", "region", "warehouse", "schedule",
    "contract", "review", "finding", "status", "update", "draft",
)  # fmt: skip
SLOTS = 12  # receipts per workflow: 5 tool calls (start + end), a completion, a confirmation
WORKFLOWS_PER_SESSION = 4
DAYS = 90  # the data set's receipts are spread over this many days before the run


def tenant_of(index: int) -> int:
    """Receipt `index` belongs to tenant 0 (acme) or, one block in ten, 1 (globex)."""
    return 1 if (index // (SLOTS * 10)) % 10 == 9 else 0


def public_id(seed: int, index: int) -> uuid.UUID:
    """Receipt `index`'s id, derived from the index: links and the load need no look-up."""
    digest = hashlib.sha256(b"bench-run %d %d" % (seed, index)).digest()
    return uuid.UUID(bytes=digest[:16], version=4)


def workflow_of(index: int) -> str:
    return f"{TENANTS[tenant_of(index)][0]}-wf-{index // SLOTS:07d}"


def session_of(index: int) -> str:
    return f"sess-{index // (SLOTS * WORKFLOWS_PER_SESSION):06d}"


@dataclass(frozen=True)
class Shape:
    """What every process must agree on to make the same data set."""

    seed: int
    total: int  # the largest size: recorded_at spreads the whole data set over DAYS
    epoch: datetime  # recorded_at of receipt 0

    def recorded_at(self, index: int) -> datetime:
        step = timedelta(days=DAYS) / max(self.total, 1)
        return self.epoch + step * index


def stamp(moment: datetime) -> str:
    """A producer's timestamp (RFC 3339, UTC, microseconds)."""
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def payload(shape: Shape, index: int) -> dict[str, Any]:
    """The producer's body of receipt `index`, as an agent runtime would send it."""
    rng = random.Random(shape.seed * 1_000_003 + index)
    slot = index % SLOTS
    workflow = workflow_of(index)
    recorded = shape.recorded_at(index)
    links: dict[str, Any] | None = None
    if slot < 10:
        call = slot // 2
        phase = "start" if slot % 2 == 0 else "end"
        kind, name = rng.choices(SUBJECTS, cum_weights=SUBJECT_WEIGHTS)[0]
        step = f"call-{call}-{name}"
        attempt: dict[str, Any] = {"number": 1}
        if phase == "end" and rng.random() < 0.1:
            attempt = {
                "number": 2,
                "prior_attempt_id": f"{workflow}/{step}/1",
                "retry_reason": "the first attempt timed out after 30 s",
            }
    else:
        kind, name = TASKS[(index // SLOTS) % len(TASKS)]
        step = "finish"
        attempt = {"number": 1}
        base = index - slot
        if slot == 10:
            phase = "completion"
            children = [str(public_id(shape.seed, base + k)) for k in (1, 3, 5, 7, 9)]
            links = {"child_receipt_ids": children}
        else:
            phase = "confirmation" if (index // SLOTS) % 2 else "handoff"
            links = {"parent_receipt_id": str(public_id(shape.seed, base + 10))}
    started = recorded - timedelta(milliseconds=rng.randint(200, 90_000))
    body: dict[str, Any] = {
        "workflow_id": workflow,
        "step_id": step,
        "attempt": attempt,
        "phase": phase,
        "subject": {"type": kind, "name": name, "version": f"{rng.randint(1, 4)}.0"},
        "framework": {
            "name": FRAMEWORKS[(index // SLOTS) % len(FRAMEWORKS)],
            "version": "1.2.3",
            "run_id": hashlib.md5(b"%d" % index).hexdigest()[:16],
            "parent_run_id": hashlib.md5(b"w%d" % (index // SLOTS)).hexdigest()[:16],
        },
        "session_id": session_of(index),
        "actor": f"agent-{(index // SLOTS) % 7}",
        "trace_id": hashlib.sha256(b"trace %d" % (index // SLOTS)).hexdigest()[:32],
        "request_id": f"req-{index:08d}",
        "started_at": stamp(started),
        "input_summary": json.dumps(
            {"query": words(rng, rng.randint(8, 30)), "order": f"ORD-{rng.randint(1000, 99999)}"}
        ),
        "observed": rng.sample(SENTENCES, rng.randint(2, 4)),
        "not_observed": rng.sample(NOT_OBSERVED, rng.randint(1, 2)),
        "idempotency_key": f"{workflow}/{step}/{phase}/{attempt['number']}",
        "metadata": {
            "ticket": f"OPS-{rng.randint(100, 99999)}",
            "region": rng.choice(("eu-west", "us-east", "ap-south")),
            "cost_cents": rng.randint(0, 5000),
        },
    }
    if phase != "start":
        body["outcome"] = rng.choices(OUTCOMES, cum_weights=OUTCOME_WEIGHTS)[0]
        body["ended_at"] = stamp(recorded)
        body["duration_ms"] = int((recorded - started).total_seconds() * 1000)
        result = " ".join(rng.sample(SENTENCES, rng.randint(3, 7))) + " " + words(rng, 40)
        if rng.random() < 0.01:
            result += " token sk-proj-" + hashlib.sha256(b"%d" % index).hexdigest()[:24]
        body["result"] = result
    if links is not None:
        body["links"] = links
    return body


# --- the fill ---------------------------------------------------------------------------------


@dataclass
class Site:
    """The rows every receipt of a tenant points to, and the signing key."""

    tenants: list[Tenant]
    signing_key_id: int


_WORKER: dict[str, Any] = {}  # what the fill's worker processes inherit at fork


def _json_bytes(doc: Any) -> bytes:
    """RFC 8785 bytes the fast way, for documents of strings, whole numbers, lists and objects
    with ASCII keys: sorted keys, no spaces, UTF-8, and JSON's own escapes are then exactly
    what RFC 8785 prescribes. _make_rows proves it against the site's canonical_bytes on a
    sample of every chunk."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


Tenant = tuple[int, str, str, int, str]  # (tenant id, slug, name, API key id, key prefix)
Made = tuple[dict[str, Any], bytes, bytes]  # producer's part, its bytes, the document's bytes


def _site_pipeline(body: dict[str, Any], receipt_id: str, recorded_at: str, tenant: Tenant) -> Made:
    """What an ingest does to a body before its transaction, with the site's own functions:
    (producer's part, its canonical bytes, the document's canonical bytes)."""
    from django.conf import settings

    from receiptsite.evidence.document import evidence_document, producer_with_links, validate
    from receiptsite.evidence.redaction import redact
    from receiptsite.integrity.canonical import canonical_bytes

    draft = validate(body)
    if draft.links is not None:
        links = draft.links
        children = list(links.child_receipt_ids)
        producer = producer_with_links(draft, links.parent_receipt_id, children)
    else:
        producer = draft.producer
    producer, redactions = redact(producer, limit=settings.TEXT_LIMIT)
    _, slug, name, _, prefix = tenant
    document = evidence_document(
        producer,
        receipt_id=receipt_id,
        tenant_slug=slug,
        tenant_name=name,
        recorded_at=recorded_at,
        key_prefix=prefix,
        redactions=redactions,
    )
    return producer, canonical_bytes(producer), canonical_bytes(document)


def _fast_pipeline(body: dict[str, Any], receipt_id: str, recorded_at: str, tenant: Tenant) -> Made:
    """The same for a body the benchmark made (already normalised, nothing to redact or cut),
    without the pure-Python RFC 8785 serialiser: about ten times faster."""
    from receiptsite.evidence.declaration import BOUNDARY, SCHEMA

    _, slug, name, _, prefix = tenant
    document = {
        **body,
        "not_observed": [*body["not_observed"], BOUNDARY[body["phase"]]],
        "schema": SCHEMA,
        "id": receipt_id,
        "tenant": {"slug": slug, "name": name},
        "recorded_at": recorded_at,
        "publisher": {"key_prefix": prefix},
        "redactions": [],
    }
    return body, _json_bytes(body), _json_bytes(document)


SITE_SAMPLE = 100  # one receipt in this many also goes through the site's functions


def _make_rows(span: tuple[int, int]) -> list[tuple[tuple[Any, ...], bytes]]:
    """Receipts start..stop-1 as database rows (in the order of Receipt's concrete fields),
    each with its leaf hash. Runs in a worker process.

    A receipt whose body holds a secret goes through the site's functions only (_site_pipeline:
    validation, links, redaction, evidence_document, canonical_bytes); every other one through
    _fast_pipeline, and one in SITE_SAMPLE through both, which must agree to the byte."""
    from django.conf import settings
    from django.db import connection
    from django.db.models import DateTimeField, UUIDField

    from receiptsite.evidence.declaration import columns_of
    from receiptsite.integrity import keys, merkle
    from receiptsite.integrity.canonical import sha256_hex
    from receiptsite.receipts.models import Receipt, format_timestamp

    shape: Shape = _WORKER["shape"]
    site: Site = _WORKER["site"]
    first_id: int = _WORKER["first_id"]
    fields = list(Receipt._meta.concrete_fields)
    # The values a database driver takes: UUIDs and datetimes as the backend wants them, the
    # rest (text, numbers, bytes) as they are; a column the benchmark does not fill gets its
    # model default.
    # (PostgreSQL's driver takes UUID and datetime objects as they are.)
    prepared = [
        connection.vendor != "postgresql" and isinstance(f, UUIDField | DateTimeField)
        for f in fields
    ]
    defaults = {f.attname: f.get_default() for f in fields}
    private = settings.SIGNING_KEY
    assert private is not None
    rows = []
    for index in range(*span):
        tenant = site.tenants[tenant_of(index)]
        body = payload(shape, index)
        receipt_id = public_id(shape.seed, index)
        recorded = shape.recorded_at(index)
        stamp = format_timestamp(recorded)
        if "sk-proj-" in body.get("result", ""):
            producer, producer_bytes, data = _site_pipeline(body, str(receipt_id), stamp, tenant)
        else:
            producer, producer_bytes, data = _fast_pipeline(body, str(receipt_id), stamp, tenant)
            if index % SITE_SAMPLE == 0:
                site_made = _site_pipeline(copy.deepcopy(body), str(receipt_id), stamp, tenant)
                if site_made[1:] != (producer_bytes, data):
                    raise Wrong(f"the fast path made other bytes than the site for receipt {index}")
        values = {
            **defaults,
            "id": first_id + index,
            "public_id": receipt_id,
            "tenant_id": tenant[0],
            "api_key_id": tenant[3],
            "recorded_at": recorded,
            **columns_of(producer),
            "request_hash": sha256_hex(producer_bytes),
            "canonical_bytes": data,
            "output_hash": sha256_hex(data),
            "signature": keys.sign(private, data),
            "signing_key_id": site.signing_key_id,
        }
        row = tuple(
            f.get_db_prep_save(values[f.attname], connection) if prep else values[f.attname]
            for f, prep in zip(fields, prepared, strict=True)
        )
        rows.append((row, merkle.leaf_hash(data)))
    return rows


def _ahead(pool: Any, spans: Sequence[tuple[int, int]], depth: int) -> Iterator[list[Any]]:
    """The chunks of `spans`, in order, made by the pool at most `depth` ahead of the writer
    (unbounded, a slow database would let them pile up in memory)."""
    waiting: collections.deque[Any] = collections.deque()
    pending = iter(spans)
    for span in itertools.islice(pending, depth):
        waiting.append(pool.apply_async(_make_rows, (span,)))
    while waiting:
        rows = waiting.popleft().get()
        for span in itertools.islice(pending, 1):
            waiting.append(pool.apply_async(_make_rows, (span,)))
        yield rows


class Filler:
    """Bulk writes of receipts that verify, and of their log rows."""

    def __init__(self, shape: Shape, site: Site, processes: int) -> None:
        from django.db import connection

        self.shape = shape
        self.site = site
        self.processes = processes
        self.connection = connection
        self.vendor = connection.vendor
        self.builder = Builder()
        self.first_id = 1

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        quote = self.connection.ops.quote_name
        names = ", ".join(quote(c) for c in columns)
        with self.connection.cursor() as cursor:
            if self.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {quote(table)} ({names}) FROM STDIN") as copy_:
                    for row in rows:
                        copy_.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(columns))
                cursor.executemany(f"INSERT INTO {quote(table)} ({names}) VALUES ({marks})", rows)

    def fill(self, target: int) -> float:
        """Receipts builder.size .. target-1, their log rows, the signed head. Seconds taken."""
        from django.core.management.color import no_style
        from django.db import connections, transaction
        from django.db.models import Max

        from receiptsite.ledger import log
        from receiptsite.receipts.models import Checkpoint, LogEntry, LogNode, Receipt

        started = time.perf_counter()
        builder = self.builder
        current = log.head()
        if current.size != builder.size or current.root != builder.root():
            fail(f"the stored log ({current.size} leaves) is not the one the fill made")
        if builder.size == 0:
            self.first_id = (Receipt.objects.aggregate(top=Max("id"))["top"] or 0) + 1
        fields = [str(f.column) for f in Receipt._meta.concrete_fields]
        created_at = Checkpoint._meta.get_field("created_at")
        spans = [
            (start, min(start + CHUNK, target)) for start in range(builder.size, target, CHUNK)
        ]
        _WORKER.update(shape=self.shape, site=self.site, first_id=self.first_id)
        connections.close_all()  # no connection may cross the fork
        context = multiprocessing.get_context("fork")
        with context.Pool(self.processes) as pool:
            made = _ahead(pool, spans, 2 * self.processes)
            for (start, stop), rows in zip(spans, made, strict=True):
                entries, nodes, checkpoints = [], [], []
                for offset, (_, leaf) in enumerate(rows):
                    index = start + offset
                    entries.append((index, self.first_id + index))
                    for level, i, digest in builder.add(leaf):
                        nodes.append((LogNode.node_key(level, i), digest))
                    when = created_at.get_db_prep_save(
                        self.shape.recorded_at(index), self.connection
                    )
                    checkpoints.append((index + 1, builder.root(), current.origin, when))
                with transaction.atomic():
                    self.insert(Receipt._meta.db_table, fields, [row for row, _ in rows])
                    self.insert(LogEntry._meta.db_table, ["index", "receipt_id"], entries)
                    self.insert(LogNode._meta.db_table, ["key", "hash"], nodes)
                    self.insert(
                        Checkpoint._meta.db_table,
                        ["tree_size", "root_hash", "origin", "created_at"],
                        checkpoints,
                    )
                print(f"\r  filled {stop:,} of {target:,}", end="", flush=True)
        print()
        with self.connection.cursor() as cursor:
            for sql in self.connection.ops.sequence_reset_sql(no_style(), [Receipt]):
                cursor.execute(sql)
            if self.vendor == "postgresql":
                # What autovacuum would soon do; done now so that it does not run under load
                # and the planner has its statistics.
                for model in (Receipt, LogEntry, LogNode, Checkpoint):
                    cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
        log.sign_head()  # the site's code signs the final head and writes LOG_STATE_FILE
        head = log.head()
        if head.size != target or head.root != builder.root():
            fail(f"the stored head after the fill is not the builder's tree of {target}")
        state = log.read_state()
        if state is None or state.size != target or state.root != head.root:
            fail("LOG_STATE_FILE does not name the signed head after the fill")
        return time.perf_counter() - started

    def check_some(self, rng: random.Random, count: int = 5) -> None:
        """A few random receipts of the fill must verify in-process."""
        from receiptsite.ledger.verification import verification_json
        from receiptsite.receipts.models import Receipt

        for _ in range(count):
            index = rng.randrange(self.builder.size)
            receipt = Receipt.objects.for_verification().get(
                public_id=public_id(self.shape.seed, index)
            )
            answer = verification_json(receipt)
            if answer["status"] != "valid":
                failed = [c["name"] for c in answer["checks"] if c["result"] != "pass"]
                fail(f"filled receipt {index} verifies {answer['status']}: {failed}")


# --- servers ----------------------------------------------------------------------------------


def http(
    url: str, method: str = "GET", body: bytes | None = None, key: str = "", timeout: float = 60
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


class Server:
    """One gunicorn with the repository's gunicorn.conf.py and the run's worker flags."""

    def __init__(self, app: Sequence[str], env: dict[str, str], flags: Sequence[str], tmp: Path,
                 name: str, ready: str) -> None:  # fmt: skip
        self.app, self.env, self.flags, self.tmp, self.name = app, env, flags, tmp, name
        self.port = _common_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready = ready
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.stderr_path = self.tmp / f"{self.name}.stderr"
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(GUNICORN), *self.app, "-c", "gunicorn.conf.py", *self.flags],
            cwd=REPO,
            env={**self.env, "BIND": f"127.0.0.1:{self.port}"},
            stdout=subprocess.DEVNULL,  # the access log: one line per request
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self.__exit__()
                sys.exit(f"{self.name}: gunicorn exited:\n{self.stderr_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                if http(self.url + self.ready, timeout=2)[0] == 200:
                    return self
            if time.monotonic() > deadline:
                self.__exit__()
                sys.exit(f"{self.name}: {self.ready} did not answer 200 in {START_TIMEOUT} s")
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=20)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.stderr.close()

    def workers(self) -> list[int]:
        """The master's children now (workers come and go with max_requests)."""
        assert self.process is not None
        master = self.process.pid
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = Path(entry.path, "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == master:
                    found.append(int(entry.name))
        return found


def _common_free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PeakRss:
    """VmHWM of every worker of a server, read every 0.2 s while a measurement runs."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peaks: dict[int, int] = {}  # pid -> kB
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> None:
        for pid in self.server.workers():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        kb = int(line.split()[1])
                        self.peaks[pid] = max(self.peaks.get(pid, 0), kb)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._read()

    def __enter__(self) -> PeakRss:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()


# --- wrk ----------------------------------------------------------------------------------------


def find_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk is missing: apt-get install -y wrk")
        done = subprocess.run(["apt-get", "install", "-y", "wrk"], capture_output=True)
        found = shutil.which("wrk")
        if done.returncode == 0 and found:
            return found
        sys.exit(f"apt-get install -y wrk failed: {done.stderr.decode(errors='replace')[-500:]}")
    sys.exit("bench/run.py needs wrk: install it with `sudo apt-get install -y wrk` (Debian)")


@dataclass
class Measure:
    route: str
    requests: int = 0
    seconds: float = 0.0
    receipts_per_request: int = 0  # ingest routes: receipts per request
    stored: int = 0  # ingest routes: receipts the log grew by during the timed run
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    non2xx: int = 0
    first_non2xx: str = ""
    socket_errors: int = 0
    rss_mib: float = 0.0  # the largest VmHWM of a worker
    workers_seen: int = 0
    load: float = 0.0  # 1-minute load average after the run

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def receipts_per_second(self) -> float:
        # Counted in the database, not from wrk's completed requests: a batch still being
        # stored when the run ends has stored most of its receipts.
        return self.stored / self.seconds if self.seconds else 0.0


def _log_size() -> int:
    """The stored log's size, which every receipt stored grows by one."""
    from django.db import connection

    from receiptsite.ledger import log

    size = log.head().size
    connection.close()  # no connection of this process stays open beside the site's
    return size


@dataclass
class Load:
    wrk: str
    threads: int
    connections: int
    duration: int
    warmup: int
    scripts: Path = field(default_factory=lambda: BENCH / "wrk")
    runs: int = 0  # wrk invocations so far

    def run(self, server: Server, route: str, script: str, env: dict[str, str],
            per_request: int = 0) -> Measure:  # fmt: skip
        if self.warmup:
            self._wrk(server, script, env, self.warmup)
        before = _log_size() if per_request else 0
        with PeakRss(server) as rss:
            result = self._wrk(server, script, env, self.duration)
        stored = _log_size() - before if per_request else 0
        measure = Measure(
            route=route,
            requests=result["requests"],
            seconds=result["duration_us"] / 1e6,
            receipts_per_request=per_request,
            stored=stored,
            p50_ms=result["p50_us"] / 1000,
            p99_ms=result["p99_us"] / 1000,
            non2xx=result["non2xx"],
            first_non2xx=result["first_non2xx"],
            socket_errors=sum(result[k] for k in ("connect", "read", "write", "timeout")),
            rss_mib=max(rss.peaks.values(), default=0) / 1024,
            workers_seen=len(rss.peaks),
            load=os.getloadavg()[0],
        )
        if measure.stored < measure.requests * per_request:
            fail(
                f"{route}: {measure.requests} answered requests of {per_request} receipts, but "
                f"the log grew by {measure.stored}: answers that stored nothing"
            )
        few = "  (few requests: a longer --duration is firmer)" if measure.requests < 20 else ""
        print(f"  {format_row(measure, None)}{few}", flush=True)
        return measure

    def _wrk(
        self, server: Server, script: str, env: dict[str, str], seconds: int
    ) -> dict[str, Any]:
        command = [
            self.wrk, f"-t{self.threads}", f"-c{self.connections}", f"-d{seconds}s",
            "--timeout", "60s", "-s", str(self.scripts / script), server.url,
        ]  # fmt: skip
        self.runs += 1
        if "BENCH_RUN" in env:  # new idempotency keys in every run, warm-up or timed
            env = {**env, "BENCH_RUN": f"{env['BENCH_RUN']}-{self.runs}"}
        done = subprocess.run(
            command, env={**os.environ, **env}, capture_output=True, timeout=seconds + 120
        )
        for line in done.stdout.decode(errors="replace").splitlines():
            if line.startswith("BENCH_RESULT "):
                result: dict[str, Any] = json.loads(line.removeprefix("BENCH_RESULT "))
                return result
        fail(
            f"wrk printed no result (exit {done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')}\n{done.stderr.decode(errors='replace')}"
        )
        raise AssertionError  # unreachable


# --- routes and their checks ----------------------------------------------------------------


@dataclass
class ListRoute:
    label: str
    name: str  # the filter parameter ("" for none, "since/until")
    queries: list[dict[str, str]]  # the query parameters, one dict per path


def list_routes(shape: Shape, size: int, rng: random.Random) -> list[ListRoute]:
    """The tenant's list, without and with each filter, with values of the first tenant that
    occur in the data set (so each filter selects its realistic fraction)."""
    from receiptsite.evidence.declaration import LIST_FILTERS, OUTCOMES, PHASES

    mine = [i for i in (rng.randrange(size) for _ in range(4000)) if tenant_of(i) == 0] or [0]
    values: dict[str, list[str]] = {
        "workflow_id": [workflow_of(i) for i in mine],
        "session_id": [session_of(i) for i in mine],
        "subject_name": [name for _, name in SUBJECTS],
        "phase": list(PHASES),
        "outcome": list(OUTCOMES),
    }
    routes = [ListRoute("list", "", [{}])]
    for column in LIST_FILTERS:
        if column.name not in values:
            fail(f"the list has a filter the benchmark does not know: {column.name}")
        routes.append(
            ListRoute(
                f"list {column.name}", column.name, [{column.name: v} for v in values[column.name]]
            )
        )
    span = shape.recorded_at(size) - shape.recorded_at(0)
    windows = []
    for i in mine:  # a window of 1% of the data set's time, around a receipt of the tenant
        since = shape.recorded_at(i) - span / 200
        windows.append(
            {
                "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "until": (since + span / 100).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    routes.append(ListRoute("list since/until", "since/until", windows))
    return routes


def list_path(query: dict[str, str]) -> str:
    return "/api/receipts" + ("?" + urlencode(query) if query else "")


def expected_list(tenant_id: int, query: dict[str, str]) -> list[str]:
    """The ids the list must answer, from the database (newest first, 50)."""
    from receiptsite.lib.rfc3339 import parse_rfc3339
    from receiptsite.receipts.models import Receipt

    rows = Receipt.objects.filter(tenant_id=tenant_id)
    for name, value in query.items():
        if name == "since":
            rows = rows.filter(recorded_at__gte=parse_rfc3339(value))
        elif name == "until":
            rows = rows.filter(recorded_at__lt=parse_rfc3339(value))
        else:
            rows = rows.filter(**{name: value})
    return [str(u) for u in rows.order_by("-id").values_list("public_id", flat=True)[:50]]


def check_verify(url: str, receipt_id: str) -> None:
    status, body = http(f"{url}/api/receipt/{receipt_id}/verify")
    if status != 200:
        fail(f"verify of {receipt_id[:8]} answered {status}")
    answer = json.loads(body)
    if answer.get("status") != "valid":
        failed = [c["name"] for c in answer.get("checks", []) if c.get("result") != "pass"]
        fail(f"verify of {receipt_id[:8]} says {answer.get('status')!r}: {failed}")


def check_page(url: str, receipt_id: str) -> None:
    status, body = http(f"{url}/run/{receipt_id}")
    html = body.decode("utf-8", "replace")
    if status != 200:
        fail(f"the page of {receipt_id[:8]} answered {status}")
    if "alert-bad" in html or receipt_id not in html:
        fail(f"the page of {receipt_id[:8]} warns that the receipt does not verify, or lacks it")


def check_list(url: str, key: str, tenant_id: int, query: dict[str, str], label: str) -> None:
    status, body = http(url + list_path(query), key=key)
    if status != 200:
        fail(f"{label} answered {status}: {body[:300]!r}")
    got = [r["id"] for r in json.loads(body)["receipts"]]
    want = expected_list(tenant_id, query)
    if got != want:
        fail(f"{label} ({query}) answered {len(got)} receipts, not the {len(want)} it selects")
    if not got:
        fail(f"{label} ({query}) selects nothing: the check would prove nothing")


def ingest_bodies(shape: Shape, size: int, rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Bodies like the first tenant's stored ones (links to its stored receipts included),
    with "@KEY@" for the idempotency key."""
    bodies: list[dict[str, Any]] = []
    while len(bodies) < count:
        index = rng.randrange(size)
        if tenant_of(index) != 0 or index - index % SLOTS + SLOTS > size:
            continue
        body = payload(shape, index)
        body["idempotency_key"] = "@KEY@"
        bodies.append(body)
    return bodies


def with_key(body: dict[str, Any], key: str) -> bytes:
    return json.dumps(body).replace("@KEY@", key).encode()


# --- output ------------------------------------------------------------------------------------

HEADER = (
    f"{'route':<24} {'req/s':>9} {'rcpt/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non2xx':>6} "
    f"{'sockerr':>7} {'RSS MiB':>7} {'wk':>3} {'load':>5} | x raw: {'req/s':>6} {'p50':>6} "
    f"{'p99':>6} {'RSS':>6}"
)


def format_row(m: Measure, raw: Measure | None) -> str:
    receipts = f"{m.receipts_per_second:9,.0f}" if m.receipts_per_request else f"{'-':>9}"
    line = (
        f"{m.route:<24} {m.rps:9,.1f} {receipts} {m.p50_ms:8.2f} {m.p99_ms:8.2f} {m.non2xx:>6} "
        f"{m.socket_errors:>7} {m.rss_mib:7.1f} {m.workers_seen:>3} {m.load:5.1f}"
    )
    if raw is not None:
        ratios = ((m.rps, raw.rps), (m.p50_ms, raw.p50_ms), (m.p99_ms, raw.p99_ms),
                  (m.rss_mib, raw.rss_mib))  # fmt: skip
        line += " |        " + " ".join(f"{_common.ratio(a, b):>6}" for a, b in ratios)
    return line


def verdict(holds: bool, *measures: Measure) -> str:
    """holds or MISSED; no verdict from a run in which no request completed."""
    empty = [m.route for m in measures if not (m.requests or m.stored)]
    if empty:
        return f"no verdict: nothing of {', '.join(empty)} completed (a longer --duration)"
    return "holds" if holds else "MISSED"


def print_targets(results: dict[str, Measure], reads: list[str]) -> None:
    raw = results["raw WSGI baseline"]
    print("\ntargets (16 connections unless told otherwise):")
    for route, share in (("verify", 0.25), ("page", 0.25), ("ingest single", 0.12)):
        m = results[route]
        print(
            f"  {route:<17} req/s >= {share:.2f} x raw: {m.rps:,.1f} vs {share * raw.rps:,.1f} "
            f"({_common.ratio(m.rps, raw.rps)}): {verdict(m.rps >= share * raw.rps, m, raw)}"
        )
    single, batch = results["ingest single"], results["ingest batch"]
    print(
        f"  ingest batch      receipts/s >= 20 x single: {batch.receipts_per_second:,.0f} vs "
        f"{20 * single.receipts_per_second:,.0f} "
        f"({_common.ratio(batch.receipts_per_second, single.receipts_per_second)}): "
        f"{verdict(batch.receipts_per_second >= 20 * single.receipts_per_second, batch, single)}"
    )
    for route in reads:
        m = results[route]
        print(f"  {route:<17} p99 < 50 ms: {m.p99_ms:.2f} ms: {verdict(m.p99_ms < 50, m)}")


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Run:
    args: argparse.Namespace
    tmp: Path
    env: dict[str, str]
    shape: Shape
    site: Site
    keys: list[str]  # API keys, by tenant
    load: Load
    rng: random.Random
    run_token: str = field(default_factory=lambda: f"load-{secrets.token_hex(4)}")

    @property
    def flags(self) -> list[str]:
        return ["-k", "gthread", "-w", str(self.args.workers), "--threads", str(self.args.threads)]

    def site_server(self) -> Server:
        return Server(["receiptsite.wsgi"], self.env, self.flags, self.tmp, "site", "/healthz")

    def raw_server(self) -> Server:
        return Server(
            ["--pythonpath", str(BENCH), "raw_wsgi:application"],
            self.env, self.flags, self.tmp, "raw", "/",
        )  # fmt: skip

    def paths_file(self, name: str, paths: Sequence[str]) -> Path:
        path = self.tmp / f"{name}.paths"
        path.write_text("\n".join(paths) + "\n")
        return path

    def reads(self, server: Server, size: int) -> dict[str, Measure]:
        """Check, then load, verify, the page and each list route at the current size."""
        sample = [
            str(public_id(self.shape.seed, self.rng.randrange(size)))
            for _ in range(min(size, SAMPLE))
        ]
        check_verify(server.url, sample[0])
        check_page(server.url, sample[0])
        lists = list_routes(self.shape, size, self.rng)
        acme = self.site.tenants[0][0]
        for route in lists:
            check_list(server.url, self.keys[0], acme, route.queries[0], route.label)
        results = {}
        verify = self.paths_file("verify", [f"/api/receipt/{i}/verify" for i in sample])
        results["verify"] = self.load.run(
            server, "verify", "paths.lua", {"BENCH_PATHS": str(verify)}
        )
        page = self.paths_file("page", [f"/run/{i}" for i in sample])
        results["page"] = self.load.run(server, "page", "paths.lua", {"BENCH_PATHS": str(page)})
        for route in lists:
            file = self.paths_file(route.label.replace(" ", "_").replace("/", "_"),
                                   [list_path(q) for q in route.queries])  # fmt: skip
            results[route.label] = self.load.run(
                server, route.label, "paths.lua",
                {"BENCH_PATHS": str(file), "BENCH_API_KEY": self.keys[0]},
            )  # fmt: skip
        return results

    def ingests(self, server: Server, size: int) -> dict[str, Measure]:
        key = self.keys[0]
        singles = ingest_bodies(self.shape, size, self.rng, 50)
        status, body = http(server.url + "/api/receipts", "POST",
                            with_key(singles[0], f"{self.run_token}/check/1"), key)  # fmt: skip
        if status != 201:
            fail(f"single ingest answered {status}: {body[:300]!r}")
        check_verify(server.url, json.loads(body)["id"])
        batches = [
            {"receipts": ingest_bodies(self.shape, size, self.rng, BATCH)} for _ in range(4)
        ]
        text = json.dumps(batches[0])
        count = iter(range(1, BATCH + 1))
        text = "".join(
            part if n == 0 else f"{self.run_token}/check-batch/{next(count)}{part}"
            for n, part in enumerate(text.split("@KEY@"))
        )
        status, body = http(server.url + "/api/receipts/batch", "POST", text.encode(), key)
        results_ = json.loads(body).get("results", []) if status == 200 else []
        if status != 200 or len(results_) != BATCH or any(r.get("status") != 201 for r in results_):
            fail(f"batch ingest answered {status}: {body[:300]!r}")
        check_verify(server.url, results_[-1]["id"])

        out = {}
        files = {}
        for name, items in (("single", singles), ("batch", batches)):
            files[name] = self.tmp / f"ingest-{name}.bodies"
            files[name].write_text("\n".join(json.dumps(b) for b in items) + "\n")
        common = {"BENCH_API_KEY": key, "BENCH_RUN": self.run_token}
        out["ingest single"] = self.load.run(
            server, "ingest single", "ingest.lua",
            {**common, "BENCH_BODIES": str(files["single"]), "BENCH_PATH": "/api/receipts",
             "BENCH_RUN": self.run_token + "-single"},
            per_request=1,
        )  # fmt: skip
        out["ingest batch"] = self.load.run(
            server, "ingest batch", "ingest.lua",
            {**common, "BENCH_BODIES": str(files["batch"]), "BENCH_PATH": "/api/receipts/batch",
             "BENCH_RUN": self.run_token + "-batch"},
            per_request=BATCH,
        )  # fmt: skip
        # What the load stored verifies too: the newest receipt of the tenant.
        # (Batches wrk left in flight are still being stored: wait for them.)
        status, body = http(server.url + "/api/receipts?limit=1", key=key, timeout=600)
        newest = json.loads(body)["receipts"][0]["id"] if status == 200 else ""
        if not newest:
            fail(f"the list after the ingest load answered {status}")
        check_verify(server.url, newest)
        return out

    def explain(self, size: int) -> None:
        """The plans of the SELECTs of one verify, one page and one request of each list
        route, captured in-process with the test Client."""
        from django.db import connection
        from django.test import Client
        from django.test.utils import CaptureQueriesContext

        client = Client(HTTP_HOST="127.0.0.1")
        receipt = str(public_id(self.shape.seed, self.rng.randrange(size)))
        requests: list[tuple[str, str, dict[str, str]]] = [
            ("verify", f"/api/receipt/{receipt}/verify", {}),
            ("page", f"/run/{receipt}", {}),
        ]
        auth = {"HTTP_AUTHORIZATION": f"Bearer {self.keys[0]}"}
        for route in list_routes(self.shape, size, self.rng):
            requests.append((route.label, list_path(route.queries[0]), auth))
        word = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
        print(f"\nquery plans at {size:,} receipts ({word} of each SELECT of one request):")
        seen: dict[str, str] = {}
        for label, path, headers in requests:
            with CaptureQueriesContext(connection) as captured:
                answer = client.get(path, **headers)  # type: ignore[arg-type]
            if answer.status_code != 200:
                fail(f"{label} in-process answered {answer.status_code}")
            # The reads (set_config() of the row-level-security settings plans nothing).
            selects = [q["sql"] for q in captured.captured_queries
                       if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))
                       and not q["sql"].lstrip().startswith("SELECT set_config(")]  # fmt: skip
            print(f"  {label} ({path[:60]}{'...' if len(path) > 60 else ''}): "
                  f"{len(captured.captured_queries)} queries, {len(selects)} SELECTs")  # fmt: skip
            for sql in selects:
                shown = sql if len(sql) <= 300 else sql[:297] + "..."
                if sql in seen:
                    print(f"    - {shown[:120]}... (as for {seen[sql]})")
                    continue
                seen[sql] = label
                print(f"    - {shown}")
                with connection.cursor() as cursor:
                    cursor.execute(f"{word} {sql}")
                    rows = cursor.fetchall()
                for row in rows:
                    print(f"        {row[0] if connection.vendor == 'postgresql' else row[-1]}")


def parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] < SLOTS * 10:
        raise argparse.ArgumentTypeError(f"sizes must be at least {SLOTS * 10}")
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument(
        "--database-url",
        default="",
        help="with --database postgresql: postgres://user@host:port/NAME, NAME created for the "
        f"run and dropped at exit (default {DEFAULT_SERVER}bench_run_<random>)",
    )
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--receipts", type=int, default=100_000, help="receipts in the data set")
    parser.add_argument(
        "--sizes", type=parse_sizes, default=None,
        help="comma-separated data-set sizes: reads measured at each (overrides --receipts)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (-w)")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker (--threads)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (-c)")
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (-t)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of load per route")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of untimed load first")
    parser.add_argument(
        "--fill-processes", type=int, default=os.cpu_count() or 1,
        help="processes building and signing the documents of the fill",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=8785)
    args = parser.parse_args()
    sizes = args.sizes or parse_sizes(str(args.receipts))
    if args.wrk_threads > args.connections:
        parser.error("--wrk-threads must not exceed --connections")
    wrk = find_wrk()
    started = time.perf_counter()

    tmp = Path(tempfile.mkdtemp(prefix="receiptsite-bench-run-"))
    if args.database == "postgresql":
        url = args.database_url or f"{DEFAULT_SERVER}bench_run_{secrets.token_hex(4)}"
    elif args.database_url:
        parser.error("--database-url is for --database postgresql")
    else:
        url = ""
    database_url, description = _common.own_database(url, tmp, keep=args.keep_database)

    from receiptsite.integrity.keys import generate_private_key_pem

    key_file = tmp / "signing-key.pem"
    key_file.write_bytes(generate_private_key_pem())
    key_file.chmod(0o600)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "GUNICORN"))},
        "DJANGO_SETTINGS_MODULE": "receiptsite.settings",
        "DATABASE_URL": database_url,
        "SECRET_KEY": secrets.token_urlsafe(40),
        "SIGNING_KEY_FILE": str(key_file),
        "SITE_URL": "http://127.0.0.1",
        "ALLOWED_HOSTS": "127.0.0.1",
        "RATE_LIMITS": "off",
        "LOG_STATE_FILE": str(tmp / "log-state.json"),
        "VAR_DIR": str(tmp / "var"),
        "DEBUG": "false",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("REDIS_URL", "TRUSTED_PROXIES", "WEB_CONCURRENCY", "BIND", "PORT"):
        env.pop(name, None)
    os.environ.clear()
    os.environ.update(env)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    from receiptsite.ledger import keyring
    from receiptsite.receipts.models import ApiKey, Tenant

    call_command("migrate", verbosity=0, interactive=False)
    call_command("collectstatic", verbosity=0, interactive=False)
    tenants, keys = [], []
    for slug, name in TENANTS:
        tenant = Tenant.objects.create(slug=slug, name=name)
        key, raw = ApiKey.issue(tenant)
        tenants.append((tenant.pk, slug, name, key.pk, key.prefix))
        keys.append(raw)
    site = Site(tenants=tenants, signing_key_id=keyring.active_key().row.pk)
    shape = Shape(
        seed=args.seed,
        total=sizes[-1],
        epoch=datetime.now(UTC).replace(microsecond=0) - timedelta(days=DAYS + 1),
    )
    run = Run(
        args=args, tmp=tmp, env=env, shape=shape, site=site, keys=keys,
        load=Load(wrk, args.wrk_threads, args.connections, args.duration, args.warmup),
        rng=random.Random(args.seed),
    )  # fmt: skip
    print(f"bench/run.py: {_common.machine()}, {description}")
    print(
        f"gunicorn -c gunicorn.conf.py {' '.join(run.flags)}; wrk -t{args.wrk_threads} "
        f"-c{args.connections}, {args.duration} s per route after {args.warmup} s warm-up; "
        f"sizes {', '.join(f'{s:,}' for s in sizes)}; 1-minute load {os.getloadavg()[0]:.1f}"
    )
    filler = Filler(shape, site, max(1, args.fill_processes))
    by_size: dict[int, dict[str, Measure]] = {}
    results: dict[str, Measure] = {}
    try:
        for size in sizes:
            print(f"\nfill to {size:,} receipts ({filler.processes} processes):")
            before = filler.builder.size
            seconds = filler.fill(size)
            filler.check_some(run.rng)
            print(f"  filled in {seconds:.1f} s ({(size - before) / seconds:,.0f} receipts/s); "
                  "5 random receipts verify in-process")  # fmt: skip
            from django.db import connections

            connections.close_all()
            last = size == sizes[-1]
            print(f"\n{HEADER}")
            if last:
                with run.raw_server() as baseline:
                    status, body = http(baseline.url + "/")
                    if status != 200 or len(body) != 2048:
                        fail(f"the raw baseline answered {status} with {len(body)} bytes")
                    results["raw WSGI baseline"] = run.load.run(
                        baseline, "raw WSGI baseline", "paths.lua",
                        {"BENCH_PATHS": str(run.paths_file("raw", ["/"]))},
                    )  # fmt: skip
            with run.site_server() as server:
                if last:
                    results["/healthz"] = run.load.run(
                        server, "/healthz", "paths.lua",
                        {"BENCH_PATHS": str(run.paths_file("healthz", ["/healthz"]))},
                    )  # fmt: skip
                by_size[size] = run.reads(server, size)
                if last:
                    results.update(by_size[size])
                    results.update(run.ingests(server, size))
            connections.close_all()
        largest = sizes[-1]
        raw_measure = results["raw WSGI baseline"]
        print(f"\nresults at {largest:,} receipts (ratios to the raw baseline of this run):")
        print(HEADER)
        for m in results.values():
            print(format_row(m, raw_measure))
        read_routes = [r for r in by_size[largest] if r in results]
        print_targets(results, read_routes)
        if len(sizes) > 1:
            smallest = sizes[0]
            print(f"\nscaling: latency at {largest:,} as a ratio to {smallest:,} receipts "
                  "(target: p50 within x1.25)")  # fmt: skip
            print(f"  {'route':<22} " + " ".join(f"{f'p50 @{s:,}':>13}" for s in sizes)
                  + f" {'p50 ratio':>9} {'p99 ratio':>9}")  # fmt: skip
            for route in by_size[smallest]:
                first, final = by_size[smallest][route], by_size[largest][route]
                ratio = final.p50_ms / first.p50_ms if first.p50_ms else float("inf")
                print(
                    f"  {route:<22} "
                    + " ".join(f"{by_size[s][route].p50_ms:13.2f}" for s in sizes)
                    + f" {ratio:>9.2f} {_common.ratio(final.p99_ms, first.p99_ms):>9} "
                    f"{verdict(ratio <= 1.25, first, final)}"
                )
        run.explain(largest)
        wrong = [m for m in results.values() if m.non2xx]
        wrong += [m for s in by_size.values() for m in s.values() if m.non2xx and m not in wrong]
        if wrong:
            fail(
                "answers outside 2xx under load: "
                + ", ".join(f"{m.route} {m.non2xx} (first {m.first_non2xx})" for m in wrong)
            )
    except Wrong as error:
        print(f"\nWRONG RESULT: {error}", file=sys.stderr)
        for name in ("site", "raw"):
            path = tmp / f"{name}.stderr"
            if path.exists() and path.stat().st_size:
                print(f"--- {name} gunicorn stderr (end) ---\n{path.read_text()[-2000:]}",
                      file=sys.stderr)  # fmt: skip
        return 1
    sockets = sum(m.socket_errors for s in [results, *by_size.values()] for m in s.values())
    if sockets:
        print(f"\n{sockets} socket errors under load (see the sockerr column)")
    print(f"\nevery checked answer was right; total run time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

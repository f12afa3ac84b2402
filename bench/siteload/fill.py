"""The fill of bench/run.py: `--receipts` receipts that verify, written in bulk.

Storing them through HTTP would take hours at 10^6, so they are made the way an ingest makes
them and written as the site would have stored them:

- `_make_rows()`, in `--fill-processes` worker processes, one chunk each: the body of
  bench/siteload/dataset.py's `payload()`; its RFC 8785 bytes, by the site's own functions for
  a body holding a secret (`_site_pipeline`: validation, links, redaction, the evidence
  document, canonical_bytes) and for one receipt in SITE_SAMPLE, else by json.dumps, which must
  agree to the byte (`_fast_pipeline`); an Ed25519 signature by the site's key; the stored
  columns from evidence.columns_of;
- `Filler.fill()`, in this process: the chunks in order, written with their log rows by
  bench/_fill.py (the fill log_scaling.py uses too), then the final head signed by the site's
  log.sign_head(), which also writes LOG_STATE_FILE;
- `Filler.check_some()`: a few random receipts must verify "valid" in-process.
"""

from __future__ import annotations

import collections
import copy
import itertools
import json
import multiprocessing
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

from _common import Wrong, fail
from _fill import LogWriter

from siteload.dataset import Shape, payload, public_id, tenant_of
from siteload.server import Site, Tenant

CHUNK = 6_000  # receipts per fill chunk (a multiple of the 12-receipt workflow)
SITE_SAMPLE = 100  # one receipt in this many also goes through the site's functions

_WORKER: dict[str, Any] = {}  # what the fill's worker processes inherit at fork

Made = tuple[dict[str, Any], bytes, bytes]  # producer's part, its bytes, the document's bytes


def _json_bytes(doc: Any) -> bytes:
    """RFC 8785 bytes the fast way, for documents of strings, whole numbers, lists and objects
    with ASCII keys: sorted keys, no spaces, UTF-8, and JSON's own escapes are then exactly
    what RFC 8785 prescribes. _make_rows proves it against the site's canonical_bytes on a
    sample of every chunk."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


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


class Filler(LogWriter):
    """Bulk writes of receipts that verify, and of their log rows (bench/_fill.py)."""

    def __init__(self, shape: Shape, site: Site, processes: int) -> None:
        super().__init__()
        self.shape = shape
        self.site = site
        self.processes = processes
        self.first_id = 1

    def fill(self, target: int) -> float:
        """Receipts builder.size .. target-1, their log rows, the signed head. Seconds taken."""
        from django.db import connections
        from django.db.models import Max

        from receiptsite.ledger import log
        from receiptsite.receipts.models import Checkpoint, Receipt

        started = time.perf_counter()
        builder = self.builder
        current = log.head()
        if current.size != builder.size or current.root != builder.root():
            fail(f"the stored log ({current.size} leaves) is not the one the fill made")
        if builder.size == 0:
            self.first_id = (Receipt.objects.aggregate(top=Max("id"))["top"] or 0) + 1
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
                # A checkpoint is as old as the receipt that made its size.
                leaves = [
                    (
                        self.first_id + index,
                        leaf,
                        created_at.get_db_prep_save(self.shape.recorded_at(index), self.connection),
                    )
                    for index, (_, leaf) in enumerate(rows, start)
                ]
                self.write([row for row, _ in rows], leaves, current.origin)
                print(f"\r  filled {stop:,} of {target:,}", end="", flush=True)
        print()
        self.finish()
        log.sign_head()  # the site's code signs the final head and writes LOG_STATE_FILE
        head = log.head()
        if head.size != target or head.root != builder.root():
            fail(f"the stored head after the fill is not the builder's tree of {target}")
        state = log.read_state()
        if state is None or state.size != target or state.root != head.root:
            fail("LOG_STATE_FILE does not name the signed head after the fill")
        return time.perf_counter() - started

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

"""The producers' client: record a receipt durably, then publish it.

    client = Client("https://receipts.example.org", api_key, "receipts.sqlite3")
    entry = client.record({"workflow_id": "wf-7f3a", "phase": "end", ...})
    entry.receipt_status   # "published", or "pending" while the site cannot be reached
    client.flush()         # later: publish what is pending, from the stored payload

`record` redacts the document, writes it to the outbox (one SQLite file) and only then tries
to publish it, for a few seconds at most: an agent is never held long, and never loses a
receipt to a network failure. The receipt's status (pending, published, failed) is the
receipt's, never the work's: a task that succeeded stays succeeded while its receipt waits.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from receiptsite_client import transport
from receiptsite_client.boundary import BOUNDARY
from receiptsite_client.document import prepare
from receiptsite_client.handoff import handoff_block
from receiptsite_client.outbox import (
    FAILED,
    PENDING,
    PUBLISHED,
    Entry,
    NewEntry,
    Outbox,
    Outcome,
    ReceiptStatus,
    Stored,
    new_owner,
)
from receiptsite_client.redaction import DEFAULT_LIMIT

log = logging.getLogger("receiptsite_client")

USER_AGENT: Final = "receiptsite-client/0.1"
BATCH_MAX_ITEMS: Final = 500
BATCH_MAX_BYTES: Final = 5 * 1024 * 1024 - 64 * 1024  # the site's default, with room to spare
LEASE_MARGIN: Final = 30.0  # seconds a claim outlives the deadline of the work it covers
FOLLOW_UP: Final = "none recorded"


class Client:
    """Publishes receipts to the site at `site_url` with `api_key`, through the outbox file
    `outbox` (created if missing).

    Keywords: `deadline` bounds one `record` / `record_batch` call's publication (seconds,
    every retry included), `flush_deadline` one `flush`; `request_timeout` bounds one HTTP
    request; `metadata_allowlist`, when given, is the set of metadata keys kept (the others
    are dropped before anything is written); `text_limit` is the cut for `input_summary` and
    `result` (the site's default); `quiet_after_failure`: for this many seconds after the site
    could not be reached, `record` writes to the outbox and returns at once (the entry
    pending) instead of waiting out its deadline again, so that an agent run while the site
    is down is not held once per receipt; `flush` always tries.
    """

    def __init__(
        self,
        site_url: str,
        api_key: str,
        outbox: str | os.PathLike[str],
        *,
        deadline: float = 3.0,
        flush_deadline: float = 60.0,
        request_timeout: float = 10.0,
        metadata_allowlist: Collection[str] | None = None,
        text_limit: int = DEFAULT_LIMIT,
        user_agent: str = USER_AGENT,
        quiet_after_failure: float = 30.0,
    ) -> None:
        parts = urlsplit(site_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"site_url must be an http(s) URL, not {site_url!r}")
        self.site_url = site_url.rstrip("/")
        self._api_key = api_key
        self.outbox = Outbox(outbox)
        self.deadline = deadline
        self.flush_deadline = flush_deadline
        self.request_timeout = request_timeout
        self.metadata_allowlist = (
            None if metadata_allowlist is None else frozenset(metadata_allowlist)
        )
        self.text_limit = text_limit
        self.user_agent = user_agent
        self.quiet_after_failure = quiet_after_failure
        self._unreachable_at: float | None = None  # monotonic time of the last network failure

    def __repr__(self) -> str:
        return f"Client({self.site_url!r}, outbox={str(self.outbox.path)!r})"

    # --- the public API ----------------------------------------------------------------------

    def record(self, document: dict[str, Any]) -> Entry:
        """Redact `document`, write it to the outbox, then try to publish it (bounded by
        `deadline`). Never raises for a network failure: the entry stays pending."""
        return self.record_batch([document])[0]

    def record_batch(self, documents: Sequence[dict[str, Any]]) -> list[Entry]:
        """`record` for several documents at once: written in one transaction, published
        with `POST /api/receipts/batch` (one POST when there is one). One entry per document,
        in order."""
        rows = [self._new_entry(document) for document in documents]
        if not rows:
            return []
        deadline_at = time.monotonic() + self.deadline
        owner = new_owner()
        written = self.outbox.write(rows, owner=owner, lease_until=self._lease(self.deadline))
        claimed = list({stored.seq: stored for stored, held in written if held}.values())
        if self._quiet():
            self.outbox.release([stored.seq for stored in claimed], owner=owner)
        else:
            self._publish_claimed(claimed, deadline_at, owner)
        by_seq = dict(self._entries_by_seq(written))
        return [by_seq[stored.seq] for stored, _held in written]

    def flush(self, *, deadline: float | None = None, chunk: int = 100) -> list[Entry]:
        """Publish every pending entry nobody else is publishing, from its stored payload
        (never calling any tool), `chunk` at a time, within `deadline` (default
        `flush_deadline`). Returns the entries it tried, as they now stand, oldest first."""
        budget = self.flush_deadline if deadline is None else deadline
        deadline_at = time.monotonic() + budget
        owner = new_owner()
        tried: list[int] = []
        while time.monotonic() < deadline_at:
            claimed = self.outbox.claim(
                owner=owner,
                lease_until=self._lease(deadline_at - time.monotonic()),
                limit=chunk,
                exclude=tried,
            )
            if not claimed:
                break
            tried += [stored.seq for stored in claimed]
            self._publish_claimed(claimed, deadline_at, owner)
        return self.outbox.entries(seqs=tried)

    def entries(self, workflow_id: str | None = None) -> list[Entry]:
        """The outbox's entries (of one workflow), oldest first."""
        return self.outbox.entries(workflow_id)

    def handoff(self, workflow_id: str) -> str:
        """The hand-off block of each of the workflow's receipts, oldest first, in the site's
        template, each saying where its receipt stands: its link once published, else
        pending or failed and why."""
        return "\n".join(handoff_text(entry) for entry in self.entries(workflow_id))

    # --- publication -------------------------------------------------------------------------

    def _new_entry(self, document: dict[str, Any]) -> NewEntry:
        prepared = prepare(
            document, limit=self.text_limit, metadata_allowlist=self.metadata_allowlist
        )
        doc = prepared.document
        attempt = doc.get("attempt")
        number = attempt.get("number", 1) if isinstance(attempt, dict) else 1
        step_id = doc.get("step_id")
        return NewEntry(
            idempotency_key=str(doc["idempotency_key"]),
            workflow_id=str(doc.get("workflow_id") or ""),
            step_id=None if step_id is None else str(step_id),
            attempt=number if isinstance(number, int) and not isinstance(number, bool) else 1,
            phase=str(doc.get("phase") or ""),
            payload=json.dumps(doc, ensure_ascii=False, separators=(",", ":")),
            refused=prepared.refusal,
        )

    def _quiet(self) -> bool:
        """True while the site was unreachable less than `quiet_after_failure` seconds ago."""
        failed = self._unreachable_at
        return failed is not None and time.monotonic() - failed < self.quiet_after_failure

    def _lease(self, budget: float) -> float:
        return time.time() + max(budget, 0.0) + self.request_timeout + LEASE_MARGIN

    def _publish_claimed(self, claimed: list[Stored], deadline_at: float, owner: str) -> None:
        """Publish what this owner claimed; release it whatever happens. A fault of the
        client's own is logged and leaves the entries pending, never breaks the caller."""
        try:
            if len(claimed) == 1:
                self._publish_one(claimed[0], deadline_at)
            elif claimed:
                for batch in _batches(claimed):
                    self._publish_batch(batch, deadline_at)
        except Exception:
            log.exception("publishing %d receipt(s) failed in the client", len(claimed))
        finally:
            if claimed:
                self.outbox.release([stored.seq for stored in claimed], owner=owner)

    def _post(self, path: str, body: bytes, deadline_at: float) -> transport.Answer | None:
        """One POST within the deadline; None when there is no time left to start one."""
        left = deadline_at - time.monotonic()
        if left < transport.MIN_ATTEMPT_TIME:
            return None
        answer = transport.request(
            "POST",
            self.site_url + path,
            api_key=self._api_key,
            body=body,
            timeout=min(self.request_timeout, left),
            user_agent=self.user_agent,
        )
        self._unreachable_at = time.monotonic() if answer.network_error is not None else None
        return answer

    def _wait(self, retry: int, answer: transport.Answer, deadline_at: float) -> bool:
        """Sleep before retry number `retry`; False (without sleeping) when the wait would
        end past the deadline."""
        wait = transport.backoff(retry, answer.retry_after())
        if time.monotonic() + wait + transport.MIN_ATTEMPT_TIME > deadline_at:
            return False
        time.sleep(wait)
        return True

    def _publish_one(self, stored: Stored, deadline_at: float) -> None:
        body = stored.payload.encode("utf-8")
        retry = 0
        while True:
            answer = self._post("/api/receipts", body, deadline_at)
            if answer is None:
                return
            outcome = _outcome(answer, answer.body, answer.replayed)
            self.outbox.record_attempt(stored.seq, outcome)
            if outcome.receipt_status != PENDING:
                return
            retry += 1
            if not self._wait(retry, answer, deadline_at):
                return

    def _publish_batch(self, batch: list[Stored], deadline_at: float) -> None:
        """POST /api/receipts/batch; the items the site could not take yet are sent again,
        in a smaller batch, within the deadline."""
        left = batch
        retry = 0
        while left:
            body = ('{"receipts":[' + ",".join(s.payload for s in left) + "]}").encode("utf-8")
            answer = self._post("/api/receipts/batch", body, deadline_at)
            if answer is None:
                return
            results = answer.body.get("results") if isinstance(answer.body, dict) else None
            if answer.status == 413:
                # The site's batch limit is lower than ours: send them one by one.
                for stored in left:
                    self._publish_one(stored, deadline_at)
                return
            readable = isinstance(results, list) and len(results) == len(left)
            if answer.status != 200 or not readable:
                if answer.status == 200:  # not the answer the API promises: try again
                    outcome = Outcome(
                        PENDING, http_status=200, error="200: a batch answer without its results"
                    )
                else:
                    outcome = _outcome(answer, answer.body, False)
                for stored in left:
                    self.outbox.record_attempt(stored.seq, outcome)
                if outcome.receipt_status != PENDING:
                    return
            else:
                assert isinstance(results, list)
                again: list[Stored] = []
                for stored, result in zip(left, results, strict=True):
                    item = _item_answer(answer, result)
                    replayed = isinstance(result, dict) and result.get("replayed") is True
                    outcome = _outcome(item, result, replayed)
                    self.outbox.record_attempt(stored.seq, outcome)
                    if outcome.receipt_status == PENDING:
                        again.append(stored)
                left = again
                if not left:
                    return
            retry += 1
            if not self._wait(retry, answer, deadline_at):
                return

    def _entries_by_seq(self, written: Iterable[tuple[Stored, bool]]) -> list[tuple[int, Entry]]:
        seqs = [stored.seq for stored, _held in written]
        entries = self.outbox.entries(seqs=seqs)
        ordered = sorted(set(seqs))
        return list(zip(ordered, entries, strict=True))


def _item_answer(batch: transport.Answer, result: Any) -> transport.Answer:
    """One batch result as if it were the answer to its own POST."""
    if not isinstance(result, dict):
        return transport.Answer(503, batch.headers, None)
    status = result.get("status")
    return transport.Answer(status if isinstance(status, int) else 503, batch.headers, result)


def _outcome(answer: transport.Answer, body: Any, replayed: bool) -> Outcome:
    """What an answer makes of an entry: published (a 201, a replay included), pending (no
    answer, or one worth retrying) or failed (any other, its problem kept). Failed is final:
    a 422 `idempotency-key-reused` or a 410 `withdrawn` (the key's receipt was withdrawn since)
    would only be refused again, and a withdrawn receipt must never be published twice."""
    if answer.status is not None and 200 <= answer.status < 300:
        if isinstance(body, dict) and isinstance(body.get("id"), str) and body.get("url"):
            return Outcome(
                PUBLISHED,
                http_status=answer.status,
                replayed=replayed,
                receipt_id=body["id"],
                url=body["url"],
                verify_url=body.get("verify_url"),
                output_hash=body.get("output_hash"),
                recorded_at=body.get("recorded_at"),
            )
        return Outcome(
            PENDING,
            http_status=answer.status,
            error=f"{answer.status}: an answer without the receipt's id and url",
        )
    status: ReceiptStatus = PENDING if answer.retryable else FAILED
    problem = body if isinstance(body, dict) and answer.status is not None else None
    return Outcome(status, http_status=answer.status, error=answer.describe(), problem=problem)


def _batches(entries: list[Stored]) -> Iterable[list[Stored]]:
    batch: list[Stored] = []
    size = 0
    for stored in entries:
        length = len(stored.payload.encode("utf-8")) + 1
        if batch and (len(batch) >= BATCH_MAX_ITEMS or size + length > BATCH_MAX_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(stored)
        size += length
    if batch:
        yield batch


def handoff_text(entry: Entry) -> str:
    """One entry's hand-off block: the site's template, with the receipt's link when it is
    published, and otherwise what stands in for it."""
    doc = dict(entry.document)
    # The site appends its boundary statement to what the record does not show; the outbox
    # holds the producer's part, so it is added here as the site adds it.
    statement = BOUNDARY.get(str(doc.get("phase")))
    if statement is not None:
        doc["not_observed"] = [*doc.get("not_observed", ()), statement]
    if entry.receipt_status == PUBLISHED and entry.url:
        where = entry.url
        doc["recorded_at"] = entry.recorded_at or ""
    else:
        doc.pop("recorded_at", None)
        if entry.receipt_status == FAILED:
            where = f"failed: {_short(entry.error or 'the site refused it')}"
        else:
            where = f"pending: not yet published (idempotency key {entry.idempotency_key})"
    return handoff_block(doc, where, FOLLOW_UP)


def _short(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"

"""What the framework adapters (langchain, crewai, openai_agents) share; no framework is
imported here.

- receipt/v1's limits, and identifiers and texts the site takes (`safe_id`, `cut`);
- the pieces of a receipt document: its `attempt` and `framework` parts and the document itself
  (`receipt_document`), the outcome of an exception, a duration, the id a link may name;
- `Ledger`, what an adapter recorded: each receipt's key and entry, read back fresh from the
  outbox, and every exception it caught; `ReceiptViews` shows it as `entries` and `urls`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Protocol

from receiptsite_client.redaction import find_secrets

if TYPE_CHECKING:
    from receiptsite_client import Client, Entry

MAX_ID: Final = 200  # receipt/v1: identifiers and names
MAX_LIST_TEXT: Final = 500  # receipt/v1: one observed / not_observed entry, a metadata string
MAX_REMEMBERED: Final = 10_000  # entries an adapter keeps in a table (attempt numbering)


# --- identifiers and texts -------------------------------------------------------------------


def safe_id(value: object) -> str | None:
    """An identifier the site will take: a string of 1..200 characters that does not look like
    a secret (the site refuses, and never redacts, an identifier that does)."""
    if value is None:
        return None
    text = str(value)
    if not text or len(text) > MAX_ID or find_secrets(text):
        return None
    return text


def cut(text: str, limit: int = MAX_LIST_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_text(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def trim(table: dict[Any, Any]) -> None:
    """Drop the oldest entries of a table over its bound (dicts keep insertion order)."""
    while len(table) > MAX_REMEMBERED:
        del table[next(iter(table))]


# --- the document ----------------------------------------------------------------------------


def outcome_of(error: BaseException) -> str:
    """The outcome of work that raised `error`."""
    return "timed_out" if isinstance(error, TimeoutError) else "failed"


def elapsed_ms(started: float) -> int:
    """Milliseconds since `started`, a time.monotonic() reading."""
    return max(0, round((time.monotonic() - started) * 1000))


def published_id(entry: Entry | None) -> str | None:
    """The receipt id a link may name: only a published receipt's, since the site refuses
    (422) a link to a receipt it does not hold, and a refused receipt would be lost."""
    if entry is None or entry.receipt_status != "published" or not entry.receipt_id:
        return None
    return str(entry.receipt_id)


def attempt_field(
    number: int, prior_attempt_id: str | None = None, retry_reason: str | None = None
) -> dict[str, Any]:
    """receipt/v1's `attempt`: its number, and for a retry what it retries and why."""
    attempt: dict[str, Any] = {"number": number}
    if prior_attempt_id:
        attempt["prior_attempt_id"] = cut(prior_attempt_id, MAX_ID)
    if retry_reason:
        attempt["retry_reason"] = cut(retry_reason)
    return attempt


def framework_field(
    name: str, version: str | None, run_id: str | None, **ids: str | None
) -> dict[str, str]:
    """receipt/v1's `framework`: the framework's name, version and its own ids (`run_id`,
    `parent_run_id`, `tool_call_id`); an id it does not have is left out."""
    every = {"name": name, "version": version, "run_id": run_id, **ids}
    return {key: value for key, value in every.items() if value}


def receipt_document(
    *,
    workflow_id: str,
    step_id: str,
    attempt: dict[str, Any],
    phase: str,
    subject_type: str,
    subject_name: str,
    framework: dict[str, str],
    idempotency_key: str | None,
    trace_id: str | None = None,
    outcome: str | None = None,
    started_at: str | None = None,
    ended_at: str | None = None,
    duration_ms: int | None = None,
    input_summary: str | None = None,
    result: str | None = None,
    observed: list[str] | None = None,
    not_observed: list[str] | None = None,
    links: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A receipt/v1 document, its fields in the contract's order; a field given as None is
    left out (an empty string or list is sent as it is)."""
    fields: dict[str, Any] = {
        "workflow_id": workflow_id,
        "step_id": step_id,
        "attempt": attempt,
        "phase": phase,
        "subject": {"type": subject_type, "name": subject_name},
        "framework": framework,
        "trace_id": trace_id,
        "outcome": outcome,
        "started_at": started_at,
        "ended_at": ended_at,
        "duration_ms": duration_ms,
        "input_summary": input_summary,
        "result": result,
        "observed": observed,
        "not_observed": not_observed,
        "links": links,
        "idempotency_key": idempotency_key,
        "metadata": metadata,
    }
    return {key: value for key, value in fields.items() if value is not None}


# --- what an adapter recorded ----------------------------------------------------------------


class _Keyed(Protocol):
    @property
    def phase(self) -> str: ...


class Ledger[K: _Keyed]:
    """Every receipt an adapter recorded (its key, of the adapter's own ReceiptKey type, and
    the Entry `client.record` returned), oldest first, and every exception it caught.
    Thread-safe."""

    def __init__(
        self, client: Client, workflow_id: str, logger: logging.Logger, goes_on: str
    ) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.errors: list[BaseException] = []
        self._logger = logger
        self._goes_on = goes_on  # the warning logged with each exception caught
        self._lock = threading.Lock()
        self._recorded: list[tuple[K, Entry]] = []

    def keep(self, error: BaseException) -> None:
        with self._lock:
            self.errors.append(error)
        self._logger.warning(self._goes_on, exc_info=error)

    def record(self, key: K, document: dict[str, Any]) -> Entry:
        """`client.record(document)`, kept under `key`; what the client raises goes on."""
        entry = self.client.record(document)
        with self._lock:
            self._recorded.append((key, entry))
        if entry.receipt_status == "failed":
            self._logger.warning(
                "receiptsite refused the %s receipt %s: %s", key.phase, key, entry.error
            )
        return entry

    def recorded(self) -> list[tuple[K, Entry]]:
        """(key, Entry) as `client.record` returned each."""
        with self._lock:
            return list(self._recorded)

    def current(self) -> list[tuple[K, Entry]]:
        """(key, Entry) as the outbox holds each now (an entry published later by
        `client.flush()` shows its receipt id and URL)."""
        recorded = self.recorded()
        try:
            fresh = {e.idempotency_key: e for e in self.client.entries(self.workflow_id)}
        except Exception as error:  # the outbox unreadable: what record() returned will do
            self.keep(error)
            return recorded
        return [(key, fresh.get(entry.idempotency_key, entry)) for key, entry in recorded]


class ReceiptViews[K: _Keyed]:
    """`entries` and `urls` of an adapter that keeps a Ledger (`_receipts` gives them)."""

    def _receipts(self) -> list[tuple[K, Entry]]:
        raise NotImplementedError

    @property
    def entries(self) -> list[Entry]:
        """Every entry recorded, oldest first, as the outbox holds it now (an entry published
        later by ``client.flush()`` shows its receipt id and URL)."""
        return [entry for _, entry in self._receipts()]

    @property
    def urls(self) -> dict[K, str]:
        """Every receipt URL, keyed by the adapter's ``ReceiptKey``. A run yields many
        receipts; there is no single "latest". Pending entries have none yet."""
        return {key: entry.url for key, entry in self._receipts() if entry.url}

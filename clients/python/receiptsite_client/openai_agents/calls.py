"""One tool call's receipts, for the hooks and the function-tool wrapper alike: the run a
call belongs to (the SDK has no run id), its attempts (the same call id again, or the same
tool and arguments after a failure), its start and end documents, and what was recorded."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import agents
from agents import RunContextWrapper

from receiptsite_client._adapters import (
    MAX_ID,
    Ledger,
    ReceiptViews,
    attempt_field,
    cut,
    elapsed_ms,
    framework_field,
    published_id,
    receipt_document,
    safe_id,
    trim,
)
from receiptsite_client.openai_agents.runs import current_trace_id, run_id_of
from receiptsite_client.redaction import find_secrets

if TYPE_CHECKING:
    from receiptsite_client import Client, Entry

# The package's logger, whichever of its modules logs.
logger = logging.getLogger(__package__ or __name__)

FRAMEWORK_NAME = "openai-agents"
FRAMEWORK_VERSION: str = getattr(agents, "__version__", "") or ""
KEY_PREFIX = "oa"


class ReceiptKey(NamedTuple):
    """Where a receipt sits: the key of ``.urls``. ``run_id`` is the run's id (as in
    ``framework.run_id``), ``tool_call_id`` the SDK's tool call id, ``phase`` ``start`` or
    ``end``, ``attempt`` the attempt number."""

    run_id: str
    tool_call_id: str
    phase: str
    attempt: int



# --- small helpers ---------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _key_part(value: str) -> str:
    """A piece of an idempotency key: the value itself when it is short visible ASCII without
    a slash and does not look like a secret, else a digest of it."""
    if (
        value
        and len(value) <= 64
        and all("\x21" <= c <= "\x7e" and c != "/" for c in value)
        and not find_secrets(value)
    ):
        return value
    return "h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def output_text(value: Any) -> str:
    """The text of a tool's output (the client redacts it and cuts it to the site's limit)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _arguments_identity(arguments: str) -> str:
    """The arguments of a call, written one way (so that a retry with the same arguments in
    other whitespace or key order is recognised)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return arguments


# --- the recorder both adapters share --------------------------------------------------------


@dataclass
@dataclass
class ToolCall:
    run_id: str
    tool_call_id: str
    framework_call_id: str | None  # the SDK's id, None when it had none
    tool_name: str
    step_id: str
    attempt: int
    arguments: str | None
    start_key: str
    started_at: str
    started: float  # time.monotonic()
    agent_name: str | None
    trace_id: str | None
    prior_attempt_id: str | None = None
    retry_reason: str | None = None
    start_entry: Entry | None = None
    outcome: str | None = None
    error: str | None = None
    end_key: str | None = None



class Recorder:
    """Keeps the receipts of tool calls: builds the documents, records them, remembers the
    attempts. Thread-safe (sync tools run in worker threads); never raises."""

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        run_id: str | None,
        metadata: dict[str, Any] | None,
        include_inputs: bool,
        include_results: bool,
    ) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.metadata = dict(metadata or {})
        self.include_inputs = include_inputs
        self.include_results = include_results
        self.ledger: Ledger[ReceiptKey] = Ledger(
            client, workflow_id, logger, "receipt not recorded; the agent run goes on"
        )
        self.errors: list[BaseException] = self.ledger.errors
        self._lock = threading.RLock()
        self._calls: dict[tuple[str, str], ToolCall] = {}  # (run, call id) -> its latest attempt
        self._by_arguments: dict[tuple[str, str, str], ToolCall] = {}  # (run, tool, args) -> call

    # --- what the application reads ------------------------------------------------------

    def current(self) -> list[tuple[ReceiptKey, Entry]]:
        # Nothing recorded yet: no need to read the outbox.
        return self.ledger.current() if self.ledger.recorded() else []

    def keep(self, error: BaseException) -> None:
        self.ledger.keep(error)

    # --- recording -----------------------------------------------------------------------

    def run_of(self, context: RunContextWrapper[Any]) -> str:
        return self.run_id if self.run_id else run_id_of(context)

    def start(
        self,
        context: RunContextWrapper[Any],
        tool_name: str,
        agent_name: str | None = None,
    ) -> ToolCall | None:
        """Record the start of a tool call; the call, or None when nothing could be done."""
        try:
            return self._start(context, tool_name, agent_name)
        except Exception as error:
            self.keep(error)
            return None

    def end(
        self,
        call: ToolCall | None,
        outcome: str,
        result: str | None,
        observed: list[str],
        not_observed: list[str] | None = None,
    ) -> None:
        if call is None:
            return
        try:
            self._end(call, outcome, result, observed, list(not_observed or []))
        except Exception as error:
            self.keep(error)

    def _start(
        self, context: RunContextWrapper[Any], tool_name: str, agent_name: str | None
    ) -> ToolCall:
        run_id = self.run_of(context)
        framework_call_id = getattr(context, "tool_call_id", None)
        if not isinstance(framework_call_id, str) or not framework_call_id:
            framework_call_id = None
        tool_call_id = framework_call_id or f"local-{uuid.uuid4().hex}"
        arguments = getattr(context, "tool_arguments", None)
        arguments = arguments if isinstance(arguments, str) else None
        if agent_name is None:
            agent = getattr(context, "agent", None)
            agent_name = getattr(agent, "name", None) if agent is not None else None
        with self._lock:
            attempt, step_id, prior, reason = self._attempt_of(
                run_id, tool_call_id, tool_name, arguments
            )
            call = ToolCall(
                run_id=run_id,
                tool_call_id=tool_call_id,
                framework_call_id=framework_call_id,
                tool_name=tool_name,
                step_id=step_id,
                attempt=attempt,
                arguments=arguments,
                start_key=self._key(run_id, tool_call_id, "start", attempt),
                started_at=_now(),
                started=time.monotonic(),
                agent_name=agent_name if isinstance(agent_name, str) else None,
                trace_id=current_trace_id(),
                prior_attempt_id=prior,
                retry_reason=reason,
            )
            self._calls[(run_id, tool_call_id)] = call
            if arguments is not None:
                self._by_arguments[(run_id, tool_name, _arguments_identity(arguments))] = call
            trim(self._calls)
            trim(self._by_arguments)
        observed = [
            cut(
                f"The OpenAI Agents SDK invoked the tool {tool_name}"
                + (f" for the model's tool call {framework_call_id}" if framework_call_id else "")
                + (" with the arguments in the input summary." if arguments is not None else ".")
            )
        ]
        document = self._document(call, "start", observed=observed)
        call.start_entry = self._record(
            ReceiptKey(run_id, tool_call_id, "start", attempt), document
        )
        return call


    def _attempt_of(
        self, run_id: str, tool_call_id: str, tool_name: str, arguments: str | None
    ) -> tuple[int, str, str | None, str | None]:
        """(attempt number, step id, prior attempt id, retry reason) of a new call."""
        prior = self._calls.get((run_id, tool_call_id))
        if prior is None and arguments is not None:
            same = self._by_arguments.get((run_id, tool_name, _arguments_identity(arguments)))
            if same is not None and same.outcome in ("failed", "timed_out"):
                prior = same
        if prior is None:
            return 1, cut(f"{tool_name}/{tool_call_id}", MAX_ID), None, None
        prior_id = prior.end_key or prior.start_key
        return prior.attempt + 1, prior.step_id, prior_id, prior.error

    def _end(
        self,
        call: ToolCall,
        outcome: str,
        result: str | None,
        observed: list[str],
        not_observed: list[str],
    ) -> None:
        with self._lock:
            call.outcome = outcome
            call.error = cut(result or outcome) if outcome != "succeeded" else None
            call.end_key = self._key(call.run_id, call.tool_call_id, "end", call.attempt)
        ended_at = _now()
        duration_ms = elapsed_ms(call.started)
        links: dict[str, Any] | None = None
        start_id = published_id(self._fresh(call.start_entry))
        if start_id:
            links = {"parent_receipt_id": start_id}
        else:
            not_observed.append(
                cut(
                    "This receipt is not linked to its start receipt (idempotency key "
                    f"{call.start_key}), which was not yet published when this was recorded."
                )
            )
        document = self._document(
            call,
            "end",
            observed=observed,
            not_observed=not_observed,
            outcome=outcome,
            result=result,
            ended_at=ended_at,
            duration_ms=duration_ms,
            links=links,
        )
        self._record(ReceiptKey(call.run_id, call.tool_call_id, "end", call.attempt), document)


    def _fresh(self, entry: Entry | None) -> Entry | None:
        if entry is None or entry.receipt_status != "pending":
            return entry
        try:
            for candidate in self.client.entries(self.workflow_id):
                if candidate.idempotency_key == entry.idempotency_key:
                    return candidate
        except Exception as error:
            self.keep(error)
        return entry


    def _document(
        self,
        call: ToolCall,
        phase: str,
        *,
        observed: list[str],
        not_observed: list[str] | None = None,
        outcome: str | None = None,
        result: str | None = None,
        ended_at: str | None = None,
        duration_ms: int | None = None,
        links: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        metadata = dict(self.metadata)
        if call.agent_name:
            metadata.setdefault("agent", cut(call.agent_name))
        return receipt_document(
            workflow_id=self.workflow_id,
            step_id=call.step_id,
            attempt=attempt_field(call.attempt, call.prior_attempt_id, call.retry_reason),
            phase=phase,
            subject_type="tool",
            subject_name=cut(call.tool_name, MAX_ID) or "tool",
            framework=framework_field(
                FRAMEWORK_NAME,
                FRAMEWORK_VERSION,
                safe_id(call.run_id),
                tool_call_id=safe_id(call.framework_call_id),
            ),
            trace_id=call.trace_id or None,
            outcome=outcome,
            started_at=call.started_at,
            ended_at=ended_at,
            duration_ms=duration_ms,
            input_summary=call.arguments if self.include_inputs else None,
            result=result if self.include_results else None,
            observed=[cut(text) for text in observed][:20],
            not_observed=[cut(text) for text in not_observed][:20] if not_observed else None,
            links=links or None,
            idempotency_key=call.start_key if phase == "start" else call.end_key,
            metadata=metadata or None,
        )

    def _key(self, run_id: str, tool_call_id: str, phase: str, attempt: int) -> str:
        return f"{KEY_PREFIX}/{_key_part(run_id)}/{_key_part(tool_call_id)}/{phase}/{attempt}"

    def _record(self, key: ReceiptKey, document: dict[str, Any]) -> Entry | None:
        try:
            return self.ledger.record(key, document)
        except Exception as error:
            self.keep(error)
            return None


class Receipts(ReceiptViews[ReceiptKey]):
    """What both adapters show: ``entries``, ``urls``, ``receipts``, ``errors``."""

    _recorder: Recorder

    def _receipts(self) -> list[tuple[ReceiptKey, Entry]]:
        return self._recorder.current()

    @property
    def client(self) -> Client:
        return self._recorder.client

    @property
    def workflow_id(self) -> str:
        return self._recorder.workflow_id

    @property
    def errors(self) -> list[BaseException]:
        """Every exception caught (from the client or this adapter), oldest first."""
        return self._recorder.errors

    @property
    def receipts(self) -> list[tuple[ReceiptKey, Entry]]:
        """Every (ReceiptKey, Entry) recorded, oldest first, as the outbox holds it now."""
        return self._recorder.current()

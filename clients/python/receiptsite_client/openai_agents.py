"""Execution receipts for the OpenAI Agents SDK (``openai-agents``): run hooks, and a
function-tool wrapper.

    from agents import Agent, Runner
    from receiptsite_client import Client
    from receiptsite_client.openai_agents import ReceiptRunHooks, receipt_function_tool

    client = Client(SITE, KEY, "outbox.sqlite3")

    # 1. Run hooks: a start and an end receipt for every local tool the SDK runs.
    hooks = ReceiptRunHooks(client, "order-4711")
    result = await Runner.run(agent, "question", hooks=hooks)
    hooks.urls   # {ReceiptKey(run_id, tool_call_id, phase, attempt): "https://.../run/<id>"}

    # 2. Or the tool records itself (exact outcomes: it sees the exception the tool raised).
    tools = receipt_function_tool(client, "order-4711")

    @tools
    def refund(order: str, cents: int) -> str:
        ...

    agent = Agent(name="support", tools=[refund])
    tools.urls   # the same keys, for every call of every tool made by `tools`

What is recorded, through ``client.record`` (so each document is redacted and written to the
outbox before anything is sent):

- a ``start`` receipt when the SDK invokes a tool (subject type ``tool``, its name, the raw
  argument JSON as ``input_summary``);
- an ``end`` receipt when it returns: outcome ``succeeded`` with the tool's output as
  ``result``; ``failed`` when the tool raised (``receipt_function_tool`` sees the exception
  and records it, then re-raises it, so the SDK's own failure handling proceeds exactly as
  without the wrapper: its ``failure_error_function`` answers the model, or the run fails);
  ``timed_out`` when the SDK cancelled it for its ``timeout``.

The run hooks see only what the model is given back: they record ``failed`` when that is the
SDK's default error message (``default_tool_error_function``) and ``timed_out`` when it is the
SDK's default timeout message; output made by a custom ``failure_error_function`` (or a
``RunConfig.tool_error_formatter``) cannot be told from a real result there, and a tool
whose exception fails the run never reaches ``on_tool_end`` (its start receipt stands
alone). ``receipt_function_tool`` has neither gap; the hooks leave the tools it made alone,
so a call never yields two sets of receipts.

Ids, in ``framework``: name ``openai-agents``, the SDK's version, ``tool_call_id`` = the
model's call id for the tool call (``ToolContext.tool_call_id``), and ``run_id`` = an id for
the ``Runner.run`` call: the ``run_id`` given (give each run its own: a key names one
receipt), else one made per run (the SDK has no run id of
its own; a run is told apart by the context object the SDK shares between the run and all its
tool calls, so the hooks and the wrapper give one run the same id). When tracing is on, the
SDK's trace id is the receipt's ``trace_id``.

Idempotency keys name one receipt each: ``oa/<run id>/<tool call id>/<phase>/<attempt>``.
Attempts: the same call id run again in one run (a resumed run) is the next attempt of its
step; so is a call of the same tool with the same arguments after a call of it failed (the
model trying again: the SDK gives it a new call id). An attempt after the first carries
``prior_attempt_id`` (the prior attempt's end receipt key) and ``retry_reason`` (its error).
``step_id`` is ``<tool name>/<call id of the first attempt>``.

Links: an end receipt links its start (``links.parent_receipt_id``) when the start is already
published; the site refuses (422) a link to a receipt it does not hold, and a refused end
receipt would be lost, so otherwise it says in ``not_observed`` which start it belongs to.

A failure to publish never breaks the agent run: the client keeps unsent receipts ``pending``
in its outbox, and every exception from the client or from this adapter is caught, logged and
kept in ``.errors``. ``.entries`` and ``.urls`` keep every receipt (a run yields many; there is
no single "latest"), refreshed from the outbox, so receipts published later by
``client.flush()`` show their URL too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast, get_origin, get_type_hints, overload

import agents
from agents import FunctionTool, RunContextWrapper, RunHooks, default_tool_error_function
from agents.tool import Tool, default_tool_timeout_error_message
from agents.tool_context import ToolContext
from agents.tracing import get_current_trace

from receiptsite_client._adapters import (
    MAX_ID,
    cut,
    error_text,
    safe_id,
    trim,
)
from receiptsite_client.redaction import find_secrets

if TYPE_CHECKING:
    from agents.agent import AgentBase

    from receiptsite_client import Client, Entry

__all__ = ["ReceiptKey", "ReceiptRunHooks", "ReceiptTools", "receipt_function_tool"]

logger = logging.getLogger(__name__)

FRAMEWORK_NAME = "openai-agents"
FRAMEWORK_VERSION: str = getattr(agents, "__version__", "") or ""
KEY_PREFIX = "oa"
_CONTEXT_PARAMETER = "_receiptsite_tool_context"


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




def _text(value: Any) -> str:
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




# --- one id per run --------------------------------------------------------------------------

# The SDK has no run id. Each Runner.run makes one RunContextWrapper, and every ToolContext it
# derives for a tool call shares that wrapper's `usage` object (a public field, kept for the
# whole run): that object tells one run from another. Keyed by id() with a weak reference
# (Usage is an unhashable dataclass); an entry goes when its run's Usage is collected.
_RUNS: dict[int, tuple[weakref.ref[Any], str]] = {}
_RUNS_LOCK = threading.Lock()


def _run_id_of(context: RunContextWrapper[Any]) -> str:
    usage = getattr(context, "usage", None)
    if usage is None:
        usage = context
    key = id(usage)
    with _RUNS_LOCK:
        known = _RUNS.get(key)
        if known is not None and known[0]() is usage:
            return known[1]
        run_id = uuid.uuid4().hex

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            current = _RUNS.get(key)
            if current is not None and current[0] is ref:
                _RUNS.pop(key, None)

        # Not weakly referenceable: no memory, one id per call of this function.
        with contextlib.suppress(TypeError):
            _RUNS[key] = (weakref.ref(usage, forget), run_id)
        return run_id


def _trace_id() -> str | None:
    """The SDK's trace id when tracing is on (a disabled trace's id is "no-op")."""
    try:
        trace = get_current_trace()
        trace_id = getattr(trace, "trace_id", None) if trace is not None else None
    except Exception:
        return None
    if not isinstance(trace_id, str) or trace_id == "no-op":
        return None
    return safe_id(trace_id)


# --- the recorder both adapters share --------------------------------------------------------


@dataclass
class _Call:
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


class _Recorder:
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
        self.errors: list[BaseException] = []
        self._lock = threading.RLock()
        self._recorded: list[tuple[ReceiptKey, Entry]] = []
        self._calls: dict[tuple[str, str], _Call] = {}  # (run, call id) -> its latest attempt
        self._by_arguments: dict[tuple[str, str, str], _Call] = {}  # (run, tool, args) -> call

    # --- what the application reads ------------------------------------------------------

    def current(self) -> list[tuple[ReceiptKey, Entry]]:
        with self._lock:
            recorded = list(self._recorded)
        if not recorded:
            return []
        try:
            fresh = {e.idempotency_key: e for e in self.client.entries(self.workflow_id)}
        except Exception as error:  # the outbox unreadable: what record() returned will do
            self.keep(error)
            return recorded
        return [(key, fresh.get(entry.idempotency_key, entry)) for key, entry in recorded]

    def keep(self, error: BaseException) -> None:
        with self._lock:
            self.errors.append(error)
        logger.warning("receipt not recorded; the agent run goes on", exc_info=error)

    # --- recording -----------------------------------------------------------------------

    def run_of(self, context: RunContextWrapper[Any]) -> str:
        return self.run_id if self.run_id else _run_id_of(context)

    def start(
        self,
        context: RunContextWrapper[Any],
        tool_name: str,
        agent_name: str | None = None,
    ) -> _Call | None:
        """Record the start of a tool call; the call, or None when nothing could be done."""
        try:
            return self._start(context, tool_name, agent_name)
        except Exception as error:
            self.keep(error)
            return None

    def end(
        self,
        call: _Call | None,
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
    ) -> _Call:
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
            call = _Call(
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
                trace_id=_trace_id(),
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
        call: _Call,
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
        duration_ms = max(0, round((time.monotonic() - call.started) * 1000))
        links: dict[str, Any] | None = None
        start = self._fresh(call.start_entry)
        if start is not None and start.receipt_status == "published" and start.receipt_id:
            links = {"parent_receipt_id": start.receipt_id}
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
        call: _Call,
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
        framework: dict[str, Any] = {"name": FRAMEWORK_NAME, "run_id": safe_id(call.run_id)}
        if FRAMEWORK_VERSION:
            framework["version"] = FRAMEWORK_VERSION
        tool_call_id = safe_id(call.framework_call_id)
        if tool_call_id is not None:
            framework["tool_call_id"] = tool_call_id
        attempt: dict[str, Any] = {"number": call.attempt}
        if call.prior_attempt_id:
            attempt["prior_attempt_id"] = cut(call.prior_attempt_id, MAX_ID)
        if call.retry_reason:
            attempt["retry_reason"] = cut(call.retry_reason)
        metadata = dict(self.metadata)
        if call.agent_name:
            metadata.setdefault("agent", cut(call.agent_name))
        document: dict[str, Any] = {
            "workflow_id": self.workflow_id,
            "step_id": call.step_id,
            "attempt": attempt,
            "phase": phase,
            "subject": {"type": "tool", "name": cut(call.tool_name, MAX_ID) or "tool"},
            "framework": {k: v for k, v in framework.items() if v is not None},
            "started_at": call.started_at,
            "observed": [cut(text) for text in observed][:20],
            "idempotency_key": call.start_key if phase == "start" else call.end_key,
        }
        if call.trace_id:
            document["trace_id"] = call.trace_id
        if self.include_inputs and call.arguments is not None:
            document["input_summary"] = call.arguments
        if outcome is not None:
            document["outcome"] = outcome
        if result is not None and self.include_results:
            document["result"] = result
        if ended_at is not None:
            document["ended_at"] = ended_at
        if duration_ms is not None:
            document["duration_ms"] = duration_ms
        if not_observed:
            document["not_observed"] = [cut(text) for text in not_observed][:20]
        if links:
            document["links"] = links
        if metadata:
            document["metadata"] = metadata
        return document

    def _key(self, run_id: str, tool_call_id: str, phase: str, attempt: int) -> str:
        return f"{KEY_PREFIX}/{_key_part(run_id)}/{_key_part(tool_call_id)}/{phase}/{attempt}"

    def _record(self, key: ReceiptKey, document: dict[str, Any]) -> Entry | None:
        try:
            entry = self.client.record(document)
        except Exception as error:
            self.keep(error)
            return None
        with self._lock:
            self._recorded.append((key, entry))
        if entry.receipt_status == "failed":
            logger.warning("receiptsite refused the %s receipt %s: %s", key.phase, key, entry.error)
        return entry


class _Receipts:
    """What both adapters show: ``entries``, ``urls``, ``errors``."""

    _recorder: _Recorder

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
    def entries(self) -> list[Entry]:
        """Every entry recorded, oldest first, as the outbox holds it now (an entry published
        later by ``client.flush()`` shows its receipt id and URL)."""
        return [entry for _, entry in self._recorder.current()]

    @property
    def receipts(self) -> list[tuple[ReceiptKey, Entry]]:
        """Every (ReceiptKey, Entry) recorded, oldest first, as the outbox holds it now."""
        return self._recorder.current()

    @property
    def urls(self) -> dict[ReceiptKey, str]:
        """Every receipt URL, keyed by (run id, tool call id, phase, attempt). A run yields
        many receipts; there is no single "latest". Pending entries have none yet."""
        return {key: entry.url for key, entry in self._recorder.current() if entry.url}


# --- the run hooks ---------------------------------------------------------------------------


def _outcome_from_output(tool: Tool, result: object) -> str:
    """What the hooks can tell from the output the model is given back."""
    if not isinstance(result, str) or not isinstance(tool, FunctionTool):
        return "succeeded"
    try:
        # The SDK's default failure message, whatever error it names (some releases add the
        # error's text after this prefix, some do not).
        if result.startswith(default_tool_error_function(cast(Any, None), Exception())):
            return "failed"
        timeout = tool.timeout_seconds
        if timeout and result == default_tool_timeout_error_message(
            tool_name=tool.name, timeout_seconds=timeout
        ):
            return "timed_out"
    except Exception:
        return "succeeded"
    return "succeeded"


def _is_self_recording(tool: object) -> bool:
    return isinstance(getattr(tool, "receipts", None), ReceiptTools)


class ReceiptRunHooks(RunHooks[Any], _Receipts):
    """``agents.RunHooks`` that publish a start and an end receipt for every local tool call.

    ``client``: a ``receiptsite_client.Client``; ``workflow_id``: the application's id for the
    workflow, on every receipt. ``run_id``: the run id on the receipts (default: one made per
    ``Runner.run``). ``metadata``: extra receipt metadata (flat; keys as receipt/v1 allows).
    ``include_inputs`` / ``include_results``: send the tool's argument JSON / output text
    (redacted by the client) or leave them out.

    After a run: ``entries``, ``urls`` (``ReceiptKey`` -> URL), ``receipts``, ``errors``.
    The client's calls run in a worker thread, so a slow site never blocks the event loop.
    """

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        include_inputs: bool = True,
        include_results: bool = True,
    ) -> None:
        super().__init__()
        self._recorder = _Recorder(
            client,
            workflow_id,
            run_id=run_id,
            metadata=metadata,
            include_inputs=include_inputs,
            include_results=include_results,
        )
        self._open: dict[tuple[str, str], list[_Call]] = {}
        self._open_lock = threading.Lock()

    def _pairing(self, context: RunContextWrapper[Any], tool: Tool) -> tuple[str, str]:
        """What pairs a tool's end with its start: the tool call id, else the run and tool."""
        call_id = getattr(context, "tool_call_id", None)
        run = self._recorder.run_of(context)
        if isinstance(call_id, str) and call_id:
            return run, "call:" + call_id
        return run, "tool:" + str(getattr(tool, "name", type(tool).__name__))

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: AgentBase[Any], tool: Tool
    ) -> None:
        try:
            if _is_self_recording(tool):
                return
            name = str(getattr(tool, "name", "") or type(tool).__name__)
            pairing = self._pairing(context, tool)
            call = await asyncio.to_thread(
                self._recorder.start, context, name, getattr(agent, "name", None)
            )
            if call is not None:
                with self._open_lock:
                    self._open.setdefault(pairing, []).append(call)
                    trim(self._open)
        except Exception as error:
            self._recorder.keep(error)

    async def on_tool_end(
        self,
        context: RunContextWrapper[Any],
        agent: AgentBase[Any],
        tool: Tool,
        result: object,
    ) -> None:
        try:
            if _is_self_recording(tool):
                return
            pairing = self._pairing(context, tool)
            with self._open_lock:
                started = self._open.get(pairing)
                call = started.pop(0) if started else None
                if started is not None and not started:
                    del self._open[pairing]
            if call is None:
                return
            outcome = _outcome_from_output(tool, result)
            text = _text(result)
            if outcome == "succeeded":
                observed = [f"The tool {call.tool_name} returned the output in the result."]
                not_observed = [
                    "Whether the output is the tool's own return value or a message made by a "
                    "custom failure handler: run hooks see only what the model is given back."
                ]
            elif outcome == "timed_out":
                observed = [
                    f"The SDK stopped the tool {call.tool_name} at its timeout and gave the "
                    "model its timeout message, in the result."
                ]
                not_observed = ["What the tool did before it was stopped."]
            else:
                observed = [
                    f"The tool {call.tool_name} raised an error; the SDK gave the model its "
                    "default error message instead of an output, in the result."
                ]
                not_observed = ["The error the tool raised: the SDK does not pass it on."]
            await asyncio.to_thread(self._recorder.end, call, outcome, text, observed, not_observed)
        except Exception as error:
            self._recorder.keep(error)


# --- the function-tool wrapper ---------------------------------------------------------------


def _takes_context(func: Callable[..., Any], hints: dict[str, Any]) -> bool:
    """Whether the SDK would pass the tool context to `func` (its own rule: the first
    parameter annotated RunContextWrapper or ToolContext)."""
    parameters = list(inspect.signature(func).parameters.values())
    if not parameters:
        return False
    annotation = hints.get(parameters[0].name, parameters[0].annotation)
    if annotation is inspect.Parameter.empty:
        return False
    origin = get_origin(annotation) or annotation
    return origin is RunContextWrapper or origin is ToolContext


class ReceiptTools(_Receipts):
    """Makes function tools that record their own receipts; see ``receipt_function_tool``.

    Call it on a function (``tools(func)`` or ``@tools``) to get an ``agents.FunctionTool``;
    every tool it made shares its ``entries``, ``urls``, ``receipts`` and ``errors``, and has
    it as its ``receipts`` attribute.
    """

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        include_inputs: bool = True,
        include_results: bool = True,
        **function_tool_options: Any,
    ) -> None:
        self._recorder = _Recorder(
            client,
            workflow_id,
            run_id=run_id,
            metadata=metadata,
            include_inputs=include_inputs,
            include_results=include_results,
        )
        self._options = function_tool_options

    def __call__(self, func: Callable[..., Any], **function_tool_options: Any) -> FunctionTool:
        """An ``agents.function_tool`` of `func` (``function_tool_options`` as that takes,
        over those given to ``receipt_function_tool``) that records each of its calls."""
        options = {**self._options, **function_tool_options}
        holder: list[FunctionTool] = []
        wrapper = self._wrap(func, holder)
        tool = agents.function_tool(wrapper, **options)
        holder.append(tool)
        tool.receipts = self  # type: ignore[attr-defined]
        return tool

    # --- the wrapper the SDK calls ---------------------------------------------------------

    def _wrap(self, func: Callable[..., Any], holder: list[FunctionTool]) -> Callable[..., Any]:
        if isinstance(func, FunctionTool):
            raise TypeError("receipt_function_tool takes the function itself, not a FunctionTool")
        hints = get_type_hints(func, include_extras=True)
        takes_context = _takes_context(func, hints)
        signature = inspect.signature(func)
        recorder = self._recorder

        def tool_name(ctx: Any) -> str:
            name = getattr(ctx, "tool_name", None)
            if isinstance(name, str) and name:
                return name
            return holder[0].name if holder else getattr(func, "__name__", "tool")

        def call_args(ctx: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            return (ctx, *args) if takes_context else args

        def success(call: _Call | None, result: Any) -> None:
            name = call.tool_name if call is not None else ""
            recorder.end(
                call,
                "succeeded",
                _text(result),
                [f"The tool {name} returned the output in the result."],
            )

        def failure(call: _Call | None, error: BaseException) -> None:
            name = call.tool_name if call is not None else ""
            if isinstance(error, asyncio.CancelledError):
                timed = bool(holder and holder[0].timeout_seconds)
                outcome = "timed_out" if timed else "uncertain"
                observed = [
                    f"The tool {name} was cancelled"
                    + (" at its timeout." if timed else " before it returned.")
                ]
                not_observed = ["What the tool did before it was cancelled."]
            else:
                outcome = "timed_out" if isinstance(error, TimeoutError) else "failed"
                observed = [
                    f"The tool {name} raised {type(error).__name__}; the result holds the "
                    "error. The SDK's failure handling then took over."
                ]
                not_observed = ["Whether the tool made any change before it raised."]
            recorder.end(call, outcome, error_text(error), observed, not_observed)

        wrapper: Callable[..., Any]
        if inspect.iscoroutinefunction(func):

            async def async_wrapper(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                call = await asyncio.to_thread(recorder.start, ctx, tool_name(ctx))
                try:
                    result = await func(*call_args(ctx, args), **kwargs)
                except asyncio.CancelledError as error:
                    failure(call, error)  # in this thread: the task is being torn down
                    raise
                except Exception as error:
                    await asyncio.to_thread(failure, call, error)
                    raise
                await asyncio.to_thread(success, call, result)
                return result

            wrapper = async_wrapper
        else:
            # The SDK runs a sync tool in a worker thread: recording there blocks no loop.
            def sync_wrapper(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                call = recorder.start(ctx, tool_name(ctx))
                try:
                    result = func(*call_args(ctx, args), **kwargs)
                except Exception as error:
                    failure(call, error)
                    raise
                success(call, result)
                return result

            wrapper = sync_wrapper

        # The SDK reads the tool's schema, name and docs from the wrapper: give it func's,
        # with a context parameter first when func takes none (so the SDK passes the
        # ToolContext, which holds the tool call id).
        parameters = list(signature.parameters.values())
        annotations = dict(hints)
        if not takes_context:
            parameters.insert(
                0,
                inspect.Parameter(
                    _CONTEXT_PARAMETER,
                    inspect.Parameter.POSITIONAL_ONLY,
                    annotation=ToolContext,
                ),
            )
            annotations = {_CONTEXT_PARAMETER: ToolContext, **annotations}
        target = cast(Any, wrapper)
        target.__signature__ = signature.replace(parameters=parameters)
        target.__annotations__ = annotations
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
            value = getattr(func, attribute, None)
            if value is not None:
                setattr(target, attribute, value)
        return wrapper


@overload
def receipt_function_tool(
    client: Client,
    workflow_id: str,
    func: Callable[..., Any],
    *,
    run_id: str | None = ...,
    metadata: dict[str, Any] | None = ...,
    include_inputs: bool = ...,
    include_results: bool = ...,
    **function_tool_options: Any,
) -> FunctionTool: ...


@overload
def receipt_function_tool(
    client: Client,
    workflow_id: str,
    func: None = ...,
    *,
    run_id: str | None = ...,
    metadata: dict[str, Any] | None = ...,
    include_inputs: bool = ...,
    include_results: bool = ...,
    **function_tool_options: Any,
) -> ReceiptTools: ...


def receipt_function_tool(
    client: Client,
    workflow_id: str,
    func: Callable[..., Any] | None = None,
    *,
    run_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    include_inputs: bool = True,
    include_results: bool = True,
    **function_tool_options: Any,
) -> FunctionTool | ReceiptTools:
    """``agents.function_tool`` with receipts: each call of the tool records a ``start``
    receipt, then an ``end`` receipt (``succeeded`` with the output, or ``failed`` with the
    error when the function raises; the exception then goes on to the SDK, whose failure
    handling proceeds exactly as it would without this wrapper).

    With `func`: the ``FunctionTool`` (its ``receipts`` attribute holds ``entries``, ``urls``,
    ``errors``). Without: a ``ReceiptTools``, a decorator for any number of functions whose
    tools share its ``entries``, ``urls`` and ``errors``. ``function_tool_options`` go to
    ``agents.function_tool`` (``name_override``, ``failure_error_function``, ``timeout``, ...);
    the others are as for ``ReceiptRunHooks``. The receipt keys are
    ``ReceiptKey(run_id, tool_call_id, phase, attempt)``, the tool call id being the SDK's.
    """
    tools = ReceiptTools(
        client,
        workflow_id,
        run_id=run_id,
        metadata=metadata,
        include_inputs=include_inputs,
        include_results=include_results,
        **function_tool_options,
    )
    if func is None:
        return tools
    return tools(func)

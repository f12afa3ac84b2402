"""Execution receipts for LangChain runs: a callback handler on langchain-core's own hooks.

    from receiptsite_client import Client
    from receiptsite_client.langchain import ReceiptCallbackHandler

    handler = ReceiptCallbackHandler(Client(SITE, KEY, "outbox.sqlite3"), "order-4711")
    agent.invoke(question, config={"callbacks": [handler]})
    handler.urls  # {ReceiptKey(run_id, call_id, phase, attempt): "https://.../run/<id>", ...}

What it records, through `client.record` (so every document is redacted and written to the
outbox before anything is sent):

- ``on_tool_start``: a ``start`` receipt (subject type ``tool``, the tool's name, the input
  string as ``input_summary``);
- ``on_tool_end``: an ``end`` receipt, outcome ``succeeded`` and the tool's output as
  ``result`` (``failed`` when LangChain handled the tool's error and returned a ToolMessage
  with status ``error``);
- ``on_tool_error``: an ``end`` receipt, outcome ``failed`` (``timed_out`` for a
  TimeoutError) and the error text as ``result``;
- ``on_chain_end`` / ``on_chain_error`` of the outermost run (``parent_run_id`` None), when
  ``completion`` is true: a ``completion`` receipt that links the tool receipts of that run.

Every receipt carries LangChain's ids in ``framework``: ``run_id``, ``parent_run_id`` and the
model's ``tool_call_id``; ``metadata["langchain.root_run_id"]`` names the outermost run.

Idempotency keys name one receipt each: ``<prefix>/<tool run id>/<phase>/<attempt>`` and
``<prefix>/<root run id>/completion/<attempt>`` (prefix ``lc``). Attempts: a tool run whose
model tool call id (or, lacking one, whose run id) was already seen in the same outermost run
is a retry (``RunnableRetry`` re-invokes a tool with the same tool call under a new run id);
so is a run under ``RunnableRetry``'s ``retry:attempt:N`` tag. A retry's ``attempt`` carries
``number``, ``prior_attempt_id`` (the prior attempt's LangChain run id) and ``retry_reason``
(the prior attempt's error, when it failed).

Links: the site refuses (422) a link to a receipt it does not hold, and a refused completion
would be lost, so the completion links, by id, only the tool receipts already ``published``
when it is recorded; it says in ``not_observed`` how many were not linked and names their
idempotency keys. With the site down for the whole run, the completion therefore links
nothing; every receipt still reaches the site on ``client.flush()``.

A failure to publish never breaks the agent run: the client keeps unsent receipts ``pending``
in its outbox, and any exception from the client or from this handler is caught, logged and
kept in ``handler.errors`` (``raise_error`` is False, so LangChain would not re-raise either).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import langchain_core
from langchain_core.callbacks import BaseCallbackHandler

from receiptsite_client._adapters import (
    MAX_ID,
    cut,
    error_text,
    safe_id,
    trim,
)

if TYPE_CHECKING:
    from receiptsite_client import Client, Entry

__all__ = ["ReceiptCallbackHandler", "ReceiptKey"]

logger = logging.getLogger(__name__)

FRAMEWORK_NAME = "langchain"
MAX_CHILD_LINKS = 100  # receipt/v1: links.child_receipt_ids holds at most 100 ids
_RETRY_TAG = "retry:attempt:"


class ReceiptKey(NamedTuple):
    """Where a receipt sits in a LangChain run: the key of ``handler.urls``.

    ``run_id`` is the outermost run's id, ``call_id`` the tool run's id (for the completion,
    the outermost run's id again), ``phase`` the receipt's phase, ``attempt`` its number.
    All ids are LangChain's UUIDs as strings.
    """

    run_id: str
    call_id: str
    phase: str
    attempt: int


@dataclass
class _ToolRun:
    root: UUID
    name: str
    identity: str  # what stays the same across attempts: the tool call id, else a run id
    attempt: int
    started_at: str
    started: float  # time.monotonic()
    parent_run_id: UUID | None
    tool_call_id: str | None


@dataclass
class _ChainRun:
    name: str
    started_at: str
    started: float
    input_summary: str | None
    children: list[tuple[ReceiptKey, Entry]] = field(default_factory=list)
    tool_calls: int = 0
    tool_failures: int = 0
    run_ids: list[UUID] = field(default_factory=list)  # runs registered under this root


@dataclass
class _Attempt:
    number: int
    run_id: UUID
    error: str | None = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")




def _text(value: Any) -> str:
    """The readable text of a LangChain value: a message's content, a string, else repr."""
    content = getattr(value, "content", None)
    if content is not None and not isinstance(value, (str, bytes)):
        value = content
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content blocks
        parts = []
        for block in value:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(repr(block))
        return "\n".join(parts)
    if isinstance(value, dict) and len(value) == 1:
        return _text(next(iter(value.values())))
    return repr(value)






class ReceiptCallbackHandler(BaseCallbackHandler):
    """Publishes a receipt for every tool start, end and error LangChain reports, and one
    completion receipt per outermost run.

    ``client``: a ``receiptsite_client.Client``; ``workflow_id``: the application's id for
    the workflow, on every receipt. ``completion``: record the completion receipt.
    ``completion_subject_type``: ``"chain"`` or ``"agent_run"``; ``completion_name``: its
    subject name (default: the outermost run's name). ``include_inputs`` /
    ``include_results``: send the tool's input string / output text (redacted by the client
    and truncated by the site) or leave them out (a failure's error text is still sent, cut to
    500 characters: it is what the failure receipt shows). ``key_prefix``: the idempotency
    keys' prefix.

    After a run: ``entries`` (every Entry, in the order recorded, refreshed from the outbox),
    ``urls`` (``ReceiptKey`` -> receipt URL, for every published receipt), ``errors`` (every
    exception caught). Thread-safe: hooks from parallel tool calls are serialised.
    """

    raise_error: bool = False
    run_inline: bool = False

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        completion: bool = True,
        completion_subject_type: str = "chain",
        completion_name: str | None = None,
        include_inputs: bool = True,
        include_results: bool = True,
        key_prefix: str = "lc",
    ) -> None:
        if completion_subject_type not in ("chain", "agent_run"):
            raise ValueError("completion_subject_type must be 'chain' or 'agent_run'")
        self.client = client
        self.workflow_id = workflow_id
        self.completion = completion
        self.completion_subject_type = completion_subject_type
        self.completion_name = completion_name
        self.include_inputs = include_inputs
        self.include_results = include_results
        self.key_prefix = key_prefix
        self.errors: list[BaseException] = []
        self._lock = threading.RLock()
        self._recorded: list[tuple[ReceiptKey, Entry]] = []
        self._parents: dict[UUID, UUID | None] = {}
        self._chains: dict[UUID, _ChainRun] = {}
        self._tools: dict[UUID, _ToolRun] = {}
        # (root, identity) -> the attempts seen; (parent run, tool name) -> identity, for
        # RunnableRetry's attempts of a tool called without a tool call id.
        self._attempts: dict[tuple[UUID, str], list[_Attempt]] = {}
        self._retry_parents: dict[tuple[UUID | None, str], str] = {}
        self._completions: dict[UUID, int] = {}

    # --- what the application reads ----------------------------------------------------------

    @property
    def entries(self) -> list[Entry]:
        """Every entry this handler recorded, oldest first, as the outbox holds it now (so an
        entry published later by ``client.flush()`` shows its receipt id and URL)."""
        return [entry for _, entry in self._current()]

    @property
    def urls(self) -> dict[ReceiptKey, str]:
        """Every receipt URL, keyed by (outermost run id, tool run id, phase, attempt). A run
        yields many receipts; there is no single "latest". Pending entries have none yet."""
        return {key: entry.url for key, entry in self._current() if entry.url}

    def _current(self) -> list[tuple[ReceiptKey, Entry]]:
        with self._lock:
            recorded = list(self._recorded)
        try:
            fresh = {e.idempotency_key: e for e in self.client.entries(self.workflow_id)}
        except Exception as error:  # the outbox unreadable: what we were given will do
            self._keep(error)
            return recorded
        return [(key, fresh.get(entry.idempotency_key, entry)) for key, entry in recorded]

    # --- LangChain's hooks -------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: dict[str, Any] | Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            with self._lock:
                root = self._register(run_id, parent_run_id)
                if parent_run_id is None:
                    name = (
                        self.completion_name
                        or kwargs.get("name")
                        or (serialized or {}).get("name")
                        or "langchain run"
                    )
                    self._chains[run_id] = _ChainRun(
                        name=str(name),
                        started_at=_now(),
                        started=time.monotonic(),
                        input_summary=_text(inputs) if self.include_inputs else None,
                        run_ids=[run_id],
                    )
                elif root in self._chains:
                    self._chains[root].run_ids.append(run_id)
        except Exception as error:
            self._keep(error)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            with self._lock:
                self._tool_start(serialized, input_str, run_id, parent_run_id, tags, kwargs)
        except Exception as error:
            self._keep(error)

    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            with self._lock:
                failed = getattr(output, "status", None) == "error"  # a handled tool error
                self._tool_end(
                    run_id,
                    parent_run_id,
                    outcome="failed" if failed else "succeeded",
                    result=_text(output),
                    error=_text(output) if failed else None,
                    name=kwargs.get("name"),
                )
        except Exception as error:
            self._keep(error)

    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            with self._lock:
                text = error_text(error)
                self._tool_end(
                    run_id,
                    parent_run_id,
                    outcome="timed_out" if isinstance(error, TimeoutError) else "failed",
                    result=text,
                    error=text,
                    name=kwargs.get("name"),
                    tool_call_id=kwargs.get("tool_call_id"),
                )
        except Exception as caught:
            self._keep(caught)

    def on_chain_end(
        self,
        outputs: dict[str, Any] | Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None:
            return
        try:
            with self._lock:
                self._chain_end(run_id, outcome="succeeded", result=_text(outputs))
        except Exception as error:
            self._keep(error)

    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None:
            return
        try:
            with self._lock:
                outcome = "timed_out" if isinstance(error, TimeoutError) else "failed"
                self._chain_end(run_id, outcome=outcome, result=error_text(error))
        except Exception as caught:
            self._keep(caught)

    # --- the work ----------------------------------------------------------------------------

    def _register(self, run_id: UUID, parent_run_id: UUID | None) -> UUID:
        """Remember the run's parent; the outermost run known above it."""
        self._parents[run_id] = parent_run_id
        root = run_id
        for _ in range(10_000):  # a tree, but never loop forever on a malformed one
            parent = self._parents.get(root)
            if parent is None:
                break
            root = parent
        return root

    def _tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        kwargs: dict[str, Any],
    ) -> None:
        root = self._register(run_id, parent_run_id)
        chain = self._chains.get(root)
        if chain is not None:
            chain.run_ids.append(run_id)
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        tool_call_id = kwargs.get("tool_call_id")
        identity = str(tool_call_id) if tool_call_id else f"run:{run_id}"
        retry_number = _retry_number(tags)
        if not tool_call_id and retry_number > 1:
            identity = self._retry_parents.get((parent_run_id, name), identity)
        if parent_run_id is not None:
            self._retry_parents[(parent_run_id, name)] = identity
        history = self._attempts.setdefault((root, identity), [])
        number = max(len(history) + 1, retry_number)
        prior = history[-1] if history else None
        history.append(_Attempt(number=number, run_id=run_id))
        self._forget_old()

        run = _ToolRun(
            root=root,
            name=name,
            identity=identity,
            attempt=number,
            started_at=_now(),
            started=time.monotonic(),
            parent_run_id=parent_run_id,
            tool_call_id=str(tool_call_id) if tool_call_id else None,
        )
        self._tools[run_id] = run
        attempt: dict[str, Any] = {"number": number}
        if prior is not None:
            attempt["prior_attempt_id"] = str(prior.run_id)
            if prior.error:
                attempt["retry_reason"] = cut(prior.error)
        document = self._tool_document(run, run_id, "start", attempt)
        document["started_at"] = run.started_at
        if self.include_inputs:
            document["input_summary"] = input_str
        document["observed"] = [
            f"LangChain's callback manager reported that tool {name!r} started"
            + (f" for the model's tool call {run.tool_call_id}" if run.tool_call_id else "")
            + (f" (attempt {number})." if number > 1 else ".")
        ]
        self._record(ReceiptKey(str(root), str(run_id), "start", number), document, chain)

    def _tool_end(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        *,
        outcome: str,
        result: str,
        error: str | None,
        name: object = None,
        tool_call_id: object = None,
    ) -> None:
        run = self._tools.pop(run_id, None)
        if run is None:  # the start was not seen (the handler came in late): record the end
            root = self._register(run_id, parent_run_id)
            run = _ToolRun(
                root=root,
                name=str(name or "tool"),
                identity=str(tool_call_id) if tool_call_id else f"run:{run_id}",
                attempt=1,
                started_at="",
                started=0.0,
                parent_run_id=parent_run_id,
                tool_call_id=str(tool_call_id) if tool_call_id else None,
            )
        for attempt in reversed(self._attempts.get((run.root, run.identity), [])):
            if attempt.run_id == run_id:
                attempt.error = error
                break
        chain = self._chains.get(run.root)
        if chain is not None:
            chain.tool_calls += 1
            chain.tool_failures += outcome != "succeeded"
        document = self._tool_document(run, run_id, "end", {"number": run.attempt})
        document["outcome"] = outcome
        ended_at = _now()
        if run.started_at:
            document["started_at"] = run.started_at
            document["duration_ms"] = max(0, round((time.monotonic() - run.started) * 1000))
        document["ended_at"] = ended_at
        if self.include_results or outcome != "succeeded":
            document["result"] = result if self.include_results else cut(result)
        document["observed"] = [
            f"LangChain's callback manager reported that tool {run.name!r} "
            + ("returned." if outcome == "succeeded" else f"ended with outcome {outcome}.")
        ]
        key = ReceiptKey(str(run.root), str(run_id), "end", run.attempt)
        self._record(key, document, chain)
        if run.root == run_id:  # a tool called outside any chain: nothing else will end
            self._parents.pop(run_id, None)

    def _tool_document(
        self, run: _ToolRun, run_id: UUID, phase: str, attempt: dict[str, Any]
    ) -> dict[str, Any]:
        framework: dict[str, Any] = {
            "name": FRAMEWORK_NAME,
            "version": langchain_core.__version__,
            "run_id": str(run_id),
        }
        if run.parent_run_id is not None:
            framework["parent_run_id"] = str(run.parent_run_id)
        tool_call_id = safe_id(run.tool_call_id)
        if tool_call_id:
            framework["tool_call_id"] = tool_call_id
        step_id = safe_id(f"{run.name}/{run.identity}"[:MAX_ID]) or f"tool/{run_id}"
        return {
            "workflow_id": self.workflow_id,
            "step_id": step_id,
            "attempt": attempt,
            "phase": phase,
            "subject": {"type": "tool", "name": safe_id(run.name[:MAX_ID]) or "tool"},
            "framework": framework,
            "idempotency_key": self._key(run_id, phase, attempt["number"]),
            "metadata": {"langchain.root_run_id": str(run.root)},
        }

    def _chain_end(self, run_id: UUID, *, outcome: str, result: str) -> None:
        chain = self._chains.pop(run_id, None)
        try:
            if not self.completion:
                return
            if chain is None:  # the start was not seen
                chain = _ChainRun(
                    name=self.completion_name or "langchain run",
                    started_at="",
                    started=0.0,
                    input_summary=None,
                )
            number = self._completions.get(run_id, 0) + 1
            self._completions[run_id] = number
            self._forget_old()
            self._completion(run_id, chain, number, outcome, result)
        finally:
            self._forget_run(run_id, chain)

    def _completion(
        self, run_id: UUID, chain: _ChainRun, number: int, outcome: str, result: str
    ) -> None:
        linked: list[str] = []
        unlinked: list[str] = []
        for _, entry in chain.children:
            if (
                entry.receipt_status == "published"
                and entry.receipt_id
                and (len(linked) < MAX_CHILD_LINKS)
            ):
                linked.append(str(entry.receipt_id))
            else:
                unlinked.append(entry.idempotency_key)
        document: dict[str, Any] = {
            "workflow_id": self.workflow_id,
            "step_id": f"run/{run_id}",
            "attempt": {"number": number},
            "phase": "completion",
            "subject": {
                "type": self.completion_subject_type,
                "name": safe_id(chain.name[:MAX_ID]) or "langchain run",
            },
            "framework": {
                "name": FRAMEWORK_NAME,
                "version": langchain_core.__version__,
                "run_id": str(run_id),
            },
            "outcome": outcome,
            "ended_at": _now(),
            "idempotency_key": self._key(run_id, "completion", number),
            "metadata": {
                "langchain.root_run_id": str(run_id),
                "tool_calls": chain.tool_calls,
                "tool_failures": chain.tool_failures,
            },
        }
        if chain.started_at:
            document["started_at"] = chain.started_at
            document["duration_ms"] = max(0, round((time.monotonic() - chain.started) * 1000))
        if chain.input_summary is not None:
            document["input_summary"] = chain.input_summary
        if self.include_results or outcome != "succeeded":
            document["result"] = result if self.include_results else cut(result)
        document["observed"] = [
            f"LangChain's callback manager reported that the outermost run "
            f"{'returned' if outcome == 'succeeded' else 'ended with outcome ' + outcome}, "
            f"after {chain.tool_calls} tool call(s), {chain.tool_failures} of which did not "
            "succeed."
        ]
        if linked:
            document["links"] = {"child_receipt_ids": linked}
        if unlinked:
            document["not_observed"] = [
                cut(
                    f"{len(unlinked)} tool receipt(s) of this run were not published when "
                    "this completion was recorded, so it does not link them (idempotency "
                    "keys: " + ", ".join(unlinked) + ")."
                )
            ]
        self._record(ReceiptKey(str(run_id), str(run_id), "completion", number), document)

    # --- bookkeeping -------------------------------------------------------------------------

    def _key(self, run_id: UUID, phase: str, attempt: int) -> str:
        return f"{self.key_prefix}/{run_id}/{phase}/{attempt}"

    def _record(
        self, key: ReceiptKey, document: dict[str, Any], chain: _ChainRun | None = None
    ) -> None:
        entry = self.client.record(document)
        self._recorded.append((key, entry))
        if chain is not None:
            chain.children.append((key, entry))
        if entry.receipt_status == "failed":
            logger.warning("receiptsite refused the %s receipt %s: %s", key.phase, key, entry.error)

    def _forget_run(self, root: UUID, chain: _ChainRun | None) -> None:
        for run_id in chain.run_ids if chain else [root]:
            self._parents.pop(run_id, None)
            self._tools.pop(run_id, None)
        for attempt_key in [k for k in self._attempts if k[0] == root]:
            del self._attempts[attempt_key]
        live = set(self._parents)
        for retry_key in [k for k in self._retry_parents if k[0] is not None and k[0] not in live]:
            del self._retry_parents[retry_key]

    def _forget_old(self) -> None:
        trim(self._attempts)
        trim(self._retry_parents)
        trim(self._completions)

    def _keep(self, error: BaseException) -> None:
        self.errors.append(error)
        logger.warning("receipt callback failed; the LangChain run goes on", exc_info=error)




def _retry_number(tags: Sequence[str] | None) -> int:
    """N from RunnableRetry's ``retry:attempt:N`` tag, else 0."""
    for tag in tags or ():
        if isinstance(tag, str) and tag.startswith(_RETRY_TAG):
            try:
                return int(tag[len(_RETRY_TAG) :])
            except ValueError:
                return 0
    return 0

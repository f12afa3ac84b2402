"""ReceiptCallbackHandler: LangChain's callback hooks, turned into receipt documents (a tool
run's start and end, the outermost run's completion) and recorded through the client. The
package's docstring says what each receipt holds."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from receiptsite_client._adapters import Ledger, ReceiptViews, error_text, outcome_of
from receiptsite_client.langchain.documents import Documents, now, text_of
from receiptsite_client.langchain.runs import ChainRun, ReceiptKey, Runs

if TYPE_CHECKING:
    from receiptsite_client import Client, Entry

# The package's logger, whichever of its modules logs.
logger = logging.getLogger(__package__ or __name__)


class ReceiptCallbackHandler(BaseCallbackHandler, Documents, ReceiptViews[ReceiptKey]):
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
        self._ledger: Ledger[ReceiptKey] = Ledger(
            client, workflow_id, logger, "receipt callback failed; the LangChain run goes on"
        )
        self.errors: list[BaseException] = self._ledger.errors
        self._lock = threading.RLock()
        self._runs = Runs()

    def _receipts(self) -> list[tuple[ReceiptKey, Entry]]:
        return self._ledger.current()

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """One hook at a time; whatever it raises is kept in ``errors``, never raised into
        LangChain (a receipt must not break the run)."""
        try:
            with self._lock:
                yield
        except Exception as error:
            self._ledger.keep(error)

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
        with self._guarded():
            self._runs.chain_started(run_id, parent_run_id)
            if parent_run_id is None:
                name = (
                    self.completion_name
                    or kwargs.get("name")
                    or (serialized or {}).get("name")
                    or "langchain run"
                )
                self._runs.chains[run_id] = ChainRun(
                    name=str(name),
                    started_at=now(),
                    started=time.monotonic(),
                    input_summary=text_of(inputs) if self.include_inputs else None,
                    run_ids=[run_id],
                )

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
        with self._guarded():
            self._tool_start(serialized, input_str, run_id, parent_run_id, tags, kwargs)

    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._guarded():
            failed = getattr(output, "status", None) == "error"  # a handled tool error
            self._tool_end(
                run_id,
                parent_run_id,
                outcome="failed" if failed else "succeeded",
                result=text_of(output),
                error=text_of(output) if failed else None,
                name=kwargs.get("name"),
            )

    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._guarded():
            text = error_text(error)
            self._tool_end(
                run_id,
                parent_run_id,
                outcome=outcome_of(error),
                result=text,
                error=text,
                name=kwargs.get("name"),
                tool_call_id=kwargs.get("tool_call_id"),
            )

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
        with self._guarded():
            self._chain_end(run_id, outcome="succeeded", result=text_of(outputs))

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
        with self._guarded():
            self._chain_end(run_id, outcome=outcome_of(error), result=error_text(error))

    # --- the receipts ------------------------------------------------------------------------

    def _tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        kwargs: dict[str, Any],
    ) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        started = (now(), time.monotonic())
        run, prior, chain = self._runs.tool_started(
            run_id, parent_run_id, name, kwargs.get("tool_call_id"), tags, started
        )
        document = self._start_document(run, run_id, prior, input_str)
        self._record(ReceiptKey(str(run.root), str(run_id), "start", run.attempt), document, chain)

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
        run, chain = self._runs.tool_ended(
            run_id,
            parent_run_id,
            succeeded=outcome == "succeeded",
            error=error,
            name=name,
            tool_call_id=tool_call_id,
        )
        document = self._end_document(run, run_id, outcome, result)
        key = ReceiptKey(str(run.root), str(run_id), "end", run.attempt)
        self._record(key, document, chain)
        self._runs.tool_recorded(run, run_id)

    def _chain_end(self, run_id: UUID, *, outcome: str, result: str) -> None:
        chain = self._runs.chains.pop(run_id, None)
        try:
            if not self.completion:
                return
            if chain is None:  # the start was not seen
                chain = ChainRun(
                    name=self.completion_name or "langchain run",
                    started_at="",
                    started=0.0,
                    input_summary=None,
                )
            number = self._runs.completion_number(run_id)
            document = self._completion_document(run_id, chain, number, outcome, result)
            self._record(ReceiptKey(str(run_id), str(run_id), "completion", number), document)
        finally:
            self._runs.forget_run(run_id, chain)

    # --- bookkeeping -------------------------------------------------------------------------

    def _record(
        self, key: ReceiptKey, document: dict[str, Any], chain: ChainRun | None = None
    ) -> None:
        entry = self._ledger.record(key, document)
        if chain is not None:
            chain.children.append((key, entry))

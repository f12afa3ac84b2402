"""ReceiptRunHooks: the SDK's run hooks, recording a start and an end receipt for every local
tool call it runs (except the tools receipt_function_tool made, which record themselves). They
see only what the model is given back, so an outcome is read from the SDK's own messages."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, cast

from agents import FunctionTool, RunContextWrapper, RunHooks, default_tool_error_function
from agents.tool import Tool, default_tool_timeout_error_message

from receiptsite_client._adapters import trim
from receiptsite_client.openai_agents.calls import Receipts, Recorder, ToolCall, output_text
from receiptsite_client.openai_agents.tools import ReceiptTools

if TYPE_CHECKING:
    from agents.agent import AgentBase

    from receiptsite_client import Client


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


class ReceiptRunHooks(RunHooks[Any], Receipts):
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
        self._recorder = Recorder(
            client,
            workflow_id,
            run_id=run_id,
            metadata=metadata,
            include_inputs=include_inputs,
            include_results=include_results,
        )
        self._open: dict[tuple[str, str], list[ToolCall]] = {}
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
            text = output_text(result)
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


"""ReceiptTools and receipt_function_tool: function tools that record their own receipts,
seeing the exception the tool raised (then re-raising it, so the SDK's failure handling goes
on exactly as without the wrapper)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast, get_origin, get_type_hints, overload

import agents
from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from receiptsite_client._adapters import error_text, outcome_of
from receiptsite_client.openai_agents.calls import Receipts, Recorder, ToolCall, output_text

if TYPE_CHECKING:
    from receiptsite_client import Client

_CONTEXT_PARAMETER = "_receiptsite_tool_context"


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


class ReceiptTools(Receipts):
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
        self._recorder = Recorder(
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

        def success(call: ToolCall | None, result: Any) -> None:
            name = call.tool_name if call is not None else ""
            recorder.end(
                call,
                "succeeded",
                output_text(result),
                [f"The tool {name} returned the output in the result."],
            )

        def failure(call: ToolCall | None, error: BaseException) -> None:
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
                outcome = outcome_of(error)
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

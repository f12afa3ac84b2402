"""The LangChain agent the adapter's tests drive: real langchain-core, a local fake chat model
(langchain-core's own ``GenericFakeChatModel``) asking for four tools, and a second callback
handler that records what LangChain's callback manager reported, to check the adapter's ids
against LangChain's own."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import BaseTool, ToolException, tool
from receiptsite_client.langchain import ReceiptCallbackHandler, ReceiptKey

ANSWER = "Paris is sunny; the card was declined; a table for 2 is booked; order A1 is unknown."
QUESTION = "Plan my evening in Paris."
TOOL_CALLS = [
    {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_weather"},
    {"name": "charge_card", "args": {"amount": 40}, "id": "call_charge"},
    {"name": "reserve_table", "args": {"people": 2}, "id": "call_reserve"},
    {"name": "lookup_order", "args": {"order": "A1"}, "id": "call_lookup"},
]


# --- the agent: real langchain-core, a local fake model ------------------------------------


@dataclass
class ToolRun:
    """What LangChain's callback manager reported for one tool run (seen by a second,
    independent handler, so that the adapter's ids are checked against LangChain's own)."""

    name: str
    run_id: uuid.UUID
    parent_run_id: uuid.UUID | None
    tool_call_id: str | None
    failed: bool | None = None


@dataclass(eq=False)  # LangChain keeps handlers in sets: they must stay hashable
class Recorder(BaseCallbackHandler):
    tools: list[ToolRun] = field(default_factory=list)
    roots: list[uuid.UUID] = field(default_factory=list)

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: uuid.UUID, **kwargs: Any
    ) -> None:
        if kwargs.get("parent_run_id") is None:
            self.roots.append(run_id)

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: uuid.UUID, **kwargs: Any
    ) -> None:
        self.tools.append(
            ToolRun(
                serialized["name"], run_id, kwargs.get("parent_run_id"), kwargs.get("tool_call_id")
            )
        )

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._run(run_id).failed = getattr(output, "status", None) == "error"

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._run(run_id).failed = True

    def _run(self, run_id: uuid.UUID) -> ToolRun:
        return next(run for run in self.tools if run.run_id == run_id)


def make_agent() -> Runnable[str, str]:
    """A tool-calling agent: the fake model asks for four tools, gets their results (an error
    becomes an error ToolMessage, as agents do), then answers."""

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    @tool
    def charge_card(amount: int) -> str:
        """Charge the customer's card."""
        raise RuntimeError(f"card declined for {amount} EUR")

    reservations = {"calls": 0}

    @tool
    def reserve_table(people: int) -> str:
        """Reserve a table; the booking service drops the first request."""
        reservations["calls"] += 1
        if reservations["calls"] == 1:
            raise ConnectionError("booking service unreachable")
        return f"Table for {people} at 20:00"

    @tool
    def lookup_order(order: str) -> str:
        """Look an order up."""
        raise ToolException(f"no order {order}")

    lookup_order.handle_tool_error = True  # LangChain turns it into an error ToolMessage

    tools: dict[str, BaseTool | Runnable[Any, Any]] = {
        "get_weather": get_weather,
        "charge_card": charge_card,
        "reserve_table": reserve_table.with_retry(
            retry_if_exception_type=(ConnectionError,),
            stop_after_attempt=2,
            wait_exponential_jitter=False,
        ),
        "lookup_order": lookup_order,
    }
    model = GenericFakeChatModel(
        messages=iter([AIMessage(content="", tool_calls=TOOL_CALLS), AIMessage(content=ANSWER)])
    )

    def agent(question: str) -> str:
        messages: list[BaseMessage] = [HumanMessage(question)]
        for _ in range(5):
            reply = model.invoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                try:
                    messages.append(tools[call["name"]].invoke(call))
                except Exception as error:  # the model is told, the run goes on
                    messages.append(
                        ToolMessage(
                            content=f"error: {error}", tool_call_id=call["id"], status="error"
                        )
                    )
        raise AssertionError("the fake model never answered")

    return RunnableLambda(agent, name="evening_agent")


def run_agent(handler: ReceiptCallbackHandler) -> tuple[str, uuid.UUID, Recorder]:
    recorder = Recorder()
    root = uuid.uuid4()
    answer = make_agent().invoke(
        QUESTION, config={"callbacks": [handler, recorder], "run_id": root}
    )
    assert recorder.roots == [root]
    # 5 tool runs: reserve_table twice (RunnableRetry's second attempt, same tool call id).
    assert [run.name for run in recorder.tools] == [
        "get_weather",
        "charge_card",
        "reserve_table",
        "reserve_table",
        "lookup_order",
    ]
    assert [run.failed for run in recorder.tools] == [False, True, True, False, True]
    return answer, root, recorder


def expected_keys(root: uuid.UUID, recorder: Recorder) -> list[ReceiptKey]:
    """(outermost run, tool run, phase, attempt) of every receipt, in the order LangChain ran
    them: a start and an end per tool run, the retried call's second run as attempt 2."""
    keys: list[ReceiptKey] = []
    seen: dict[str | None, int] = {}
    for run in recorder.tools:
        attempt = seen[run.tool_call_id] = seen.get(run.tool_call_id, 0) + 1
        for phase in ("start", "end"):
            keys.append(ReceiptKey(str(root), str(run.run_id), phase, attempt))
    keys.append(ReceiptKey(str(root), str(root), "completion", 1))
    return keys

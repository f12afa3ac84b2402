"""The agent the OpenAI Agents SDK adapter's tests run: the real SDK with a local fake model
(``ScriptedToolModel``, the SDK's own ``Model`` interface answering scripted turns), two tools
with real side effects (``Shop``), and a guard that refuses every connection beyond loopback."""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import agents
import pytest
from agents import Agent, ModelResponse, RunConfig, Runner
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

QUESTION = "Where is order 42, and charge it."
ANSWER = "Order 42 has shipped and its card was charged 1999 cents."
CARD_ERROR = "card processor unavailable"
# What the SDK gives the model back for the failing tool (its default failure message).
SDK_ERROR_MESSAGE = agents.default_tool_error_function(
    None,  # type: ignore[arg-type]
    RuntimeError(CARD_ERROR),
)

LOOKUP_ARGS = {"order_id": "42"}
CHARGE_ARGS = {"order_id": "42", "cents": 1999}
LOOKUP_CALL, CHARGE_CALL, RETRY_CALL = "call_lookup_1", "call_charge_1", "call_charge_2"


# --- no network: a guard, and tracing off ------------------------------------------------------


def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Refuse (and remember) any TCP connection that is not to loopback: the fake model must
    be all there is, and the SDK must not reach OpenAI (for tracing or anything else). For a
    test module's autouse fixture (`yield from loopback_only(monkeypatch)`)."""
    agents.set_tracing_disabled(True)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tried: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def allowed(sock: socket.socket, address: Any) -> bool:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return True
        host = address[0] if isinstance(address, tuple) else address
        return host in ("127.0.0.1", "::1", "localhost")

    def connect(sock: socket.socket, address: Any) -> None:
        if not allowed(sock, address):
            tried.append(address)
            raise OSError(f"test guard: no network beyond loopback ({address!r})")
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        if not allowed(sock, address):
            tried.append(address)
            return 101  # ENETUNREACH
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield tried
    assert tried == [], f"something tried to reach the network: {tried}"


# --- the agent: the real SDK, a local fake model --------------------------------------------


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_final",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


def script() -> list[list[Any]]:
    """The fake model's turns: both tools at once; the charge again (same arguments, other
    key order) after the SDK told it the first charge failed; then the answer."""
    return [
        [
            tool_call("lookup_order", LOOKUP_ARGS, LOOKUP_CALL),
            tool_call("charge_card", CHARGE_ARGS, CHARGE_CALL),
        ],
        [tool_call("charge_card", {"cents": 1999, "order_id": "42"}, RETRY_CALL)],
        [message(ANSWER)],
    ]


class ScriptedToolModel(Model):
    """A local fake model (no hosted model can be reached): the SDK's Model interface,
    answering with the scripted turns and keeping what the SDK sent it."""

    def __init__(self, turns: list[list[Any]]) -> None:
        self.turns = list(turns)
        self.inputs: list[list[Any]] = []
        self.tool_names: list[list[str]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input) if isinstance(input, list) else [input])
        self.tool_names.append(sorted(tool.name for tool in tools))
        if not self.turns:
            raise AssertionError("the model was called more often than scripted")
        return ModelResponse(output=self.turns.pop(0), usage=Usage(requests=1), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("these tests do not stream")
        yield  # an async generator, as the interface wants

    def tool_outputs(self) -> dict[str, str]:
        """call id -> the output the SDK gave the model for it (from the last turn's input)."""
        return {
            item["call_id"]: item["output"]
            for item in self.inputs[-1]
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }


@dataclass
class Shop:
    """The tools' side effects, to see that they really ran."""

    charges: list[dict[str, Any]] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)

    def functions(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        async def lookup_order(order_id: str) -> str:
            """Look an order up.

            Args:
                order_id: The order's number.
            """
            self.lookups.append(order_id)
            return f"order {order_id}: shipped"

        def charge_card(order_id: str, cents: int) -> str:
            """Charge the order's card.

            Args:
                order_id: The order's number.
                cents: The amount, in cents.
            """
            self.charges.append({"order_id": order_id, "cents": cents})
            if len(self.charges) == 1:
                raise RuntimeError(CARD_ERROR)
            return f"charged {cents} cents for order {order_id}"

        return lookup_order, charge_card


def run(tools: list[Tool], *, hooks: Any = None) -> tuple[Any, ScriptedToolModel]:
    model = ScriptedToolModel(script())
    agent = Agent(name="shop-assistant", instructions="Help with orders.", model=model, tools=tools)
    result = Runner.run_sync(
        agent, QUESTION, hooks=hooks, run_config=RunConfig(tracing_disabled=True)
    )
    assert model.turns == [], "the run ended before the script did"
    return result, model


def check_sdk_run(result: Any, model: ScriptedToolModel, shop: Shop) -> None:
    """The run went as it would without receipts: the answer, the SDK's own error message to
    the model for the failed charge, both charges and the lookup really made."""
    assert result.final_output == ANSWER
    assert model.tool_names[0] == ["charge_card", "lookup_order"]
    assert model.tool_outputs() == {
        LOOKUP_CALL: "order 42: shipped",
        CHARGE_CALL: SDK_ERROR_MESSAGE,
        RETRY_CALL: "charged 1999 cents for order 42",
    }
    assert shop.lookups == ["42"]
    assert shop.charges == [CHARGE_ARGS, CHARGE_ARGS]

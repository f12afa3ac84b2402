"""The OpenAI Agents SDK adapter with no site to publish to: a client that raises never breaks
the agent run, and with tracing on the SDK's trace id is on every receipt. The agent (the real
SDK, a local fake model) is openai_agents_helpers'; the tests against a live site are in
test_openai_agents_adapter_live.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from openai_agents_helpers import (
    CHARGE_CALL,
    LOOKUP_CALL,
    QUESTION,
    RETRY_CALL,
    ScriptedToolModel,
    Shop,
    check_sdk_run,
    loopback_only,
    run,
    script,
)
from receiptsite_client import Client, Entry
from receiptsite_client.openai_agents import (
    ReceiptRunHooks,
    receipt_function_tool,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Tracing off, and no connection beyond loopback (openai_agents_helpers.loopback_only)."""
    yield from loopback_only(monkeypatch)




class BrokenClient(Client):
    """A client whose outbox cannot be written: every call raises."""

    def record(self, document: dict[str, Any]) -> Entry:
        raise RuntimeError("outbox disk full")

    def entries(self, workflow_id: str | None = None) -> list[Entry]:
        raise RuntimeError("outbox unreadable")


def test_a_client_that_raises_never_breaks_the_agent_run(
    tmp_path: Path, refused_url: str, workflow_id: str
) -> None:
    client = BrokenClient(refused_url, "rk_unused", tmp_path / "outbox.sqlite3")

    hooks = ReceiptRunHooks(client, workflow_id)
    shop = Shop()
    lookup_order, charge_card = shop.functions()
    result, model = run([function_tool(lookup_order), function_tool(charge_card)], hooks=hooks)
    check_sdk_run(result, model, shop)
    assert len(hooks.errors) == 6  # one start and one end per tool call
    assert all(str(error) == "outbox disk full" for error in hooks.errors)
    assert hooks.entries == [] and hooks.urls == {}

    recorder = receipt_function_tool(client, workflow_id)
    shop = Shop()
    lookup_order, charge_card = shop.functions()
    result, model = run([recorder(lookup_order), recorder(charge_card)])
    check_sdk_run(result, model, shop)
    assert len(recorder.errors) == 6
    assert recorder.entries == [] and recorder.urls == {}


def test_with_tracing_on_the_sdk_trace_id_is_on_every_receipt(
    tmp_path: Path, refused_url: str, workflow_id: str
) -> None:
    """Tracing on, with no trace processor (nothing is exported, the guard would see it):
    the run's trace id is the receipts' trace_id; the run id is still the adapter's own."""
    agents.set_trace_processors([])
    agents.set_tracing_disabled(False)
    try:
        client = Client(refused_url, "rk_unused", tmp_path / "outbox.sqlite3", deadline=0.2)
        hooks = ReceiptRunHooks(client, workflow_id)
        recorder = receipt_function_tool(client, workflow_id)
        shop = Shop()
        lookup_order, charge_card = shop.functions()
        trace_id = "trace_" + "0123456789abcdef" * 2
        model = ScriptedToolModel(script())
        agent = Agent(name="shop-assistant", model=model, tools=[recorder(lookup_order)])
        agent.tools.append(function_tool(charge_card))  # this one is the hooks'
        result = Runner.run_sync(
            agent, QUESTION, hooks=hooks, run_config=RunConfig(trace_id=trace_id)
        )
        check_sdk_run(result, model, shop)
    finally:
        agents.set_tracing_disabled(True)
    entries = client.entries(workflow_id)
    assert len(entries) == 6 and all(e.receipt_status == "pending" for e in entries)
    assert {entry.document["trace_id"] for entry in entries} == {trace_id}
    # One run: the hooks and the wrapper gave it the same run id.
    assert len({entry.document["framework"]["run_id"] for entry in entries}) == 1
    assert {key.tool_call_id for key, _ in hooks.receipts} == {CHARGE_CALL, RETRY_CALL}
    assert {key.tool_call_id for key, _ in recorder.receipts} == {LOOKUP_CALL}

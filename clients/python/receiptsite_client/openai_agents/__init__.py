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

Where things are: ``hooks`` (ReceiptRunHooks), ``tools`` (receipt_function_tool and
ReceiptTools), ``calls`` (one tool call's attempts, documents and receipts, which both share),
``runs`` (the run a call belongs to, its trace id).
"""

from __future__ import annotations

from receiptsite_client.openai_agents.calls import ReceiptKey
from receiptsite_client.openai_agents.hooks import ReceiptRunHooks
from receiptsite_client.openai_agents.tools import ReceiptTools, receipt_function_tool

__all__ = ["ReceiptKey", "ReceiptRunHooks", "ReceiptTools", "receipt_function_tool"]

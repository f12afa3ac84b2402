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

Where things are: ``handler`` (the hooks), ``documents`` (the receipt documents they
become), ``runs`` (the runs seen, their attempts, what is forgotten when).
"""

from __future__ import annotations

from receiptsite_client.langchain.handler import ReceiptCallbackHandler
from receiptsite_client.langchain.runs import ReceiptKey

__all__ = ["ReceiptCallbackHandler", "ReceiptKey"]

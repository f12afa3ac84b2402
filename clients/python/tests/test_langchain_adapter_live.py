"""The LangChain adapter, driven by langchain-core itself against a live receiptsite.

No hosted model can be reached from these tests (no network beyond loopback), so a local fake
chat model stands in: langchain-core's own ``GenericFakeChatModel`` answers with an AIMessage
holding four tool calls, then with the final answer. Everything else is the real framework: real
``@tool`` tools (one returns, one raises, one raises a handled ToolException, one fails once
and is retried by ``RunnableRetry``), a small tool-calling loop in a ``RunnableLambda`` (only
langchain-core, not the ``langchain`` package), and ``config={"callbacks": [handler]}`` so that
LangChain's callback manager fires the handler's hooks. The receipts are then read back from a
real gunicorn (``client_helpers.LiveSite``) over HTTP.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import langchain_core
import pytest
from client_helpers import LiveSite
from langchain_core.tools import tool
from langchain_helpers import ANSWER, QUESTION, expected_keys, run_agent
from receiptsite_client import Client, Entry
from receiptsite_client.langchain import ReceiptCallbackHandler, ReceiptKey

pytestmark = pytest.mark.live


# --- the site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as live:
        yield live


def listed(site: LiveSite, workflow_id: str, **filters: str) -> list[dict[str, Any]]:
    query = "&".join(f"{k}={v}" for k, v in {"workflow_id": workflow_id, **filters}.items())
    answer = site.get(f"/api/receipts?{query}&limit=200", key=site.api_key)
    assert answer.status == 200, answer
    body = answer.json()
    assert body["next_cursor"] is None
    return list(body["receipts"])


def stored(site: LiveSite, receipt_id: str) -> dict[str, Any]:
    answer = site.get(f"/api/receipts/{receipt_id}", key=site.api_key)
    assert answer.status == 200, answer
    return dict(answer.json()["document"])


def check_url_opens(site: LiveSite, url: str, receipt_id: str) -> None:
    assert url == f"{site.url}/run/{receipt_id}"
    page = site.get(urlsplit(url).path)
    assert page.status == 200, page
    assert "text/html" in page.content_type


# --- the tests -----------------------------------------------------------------------------


def test_a_langchain_run_publishes_its_tool_and_completion_receipts(
    site: LiveSite, tmp_path: Path
) -> None:
    client = Client(site.url, site.api_key, str(tmp_path / "outbox.sqlite3"))
    workflow = f"lc-{uuid.uuid4()}"
    handler = ReceiptCallbackHandler(client, workflow)

    answer, root, recorder = run_agent(handler)

    assert answer == ANSWER
    assert handler.errors == []
    keys = expected_keys(root, recorder)
    entries = handler.entries
    assert [entry.phase for entry in entries] == [key.phase for key in keys]
    assert [entry.receipt_status for entry in entries] == ["published"] * 11, [
        (entry.idempotency_key, entry.error) for entry in entries
    ]
    assert all(entry.workflow_id == workflow for entry in entries)
    assert [entry.attempt for entry in entries] == [key.attempt for key in keys]
    # One idempotency key per receipt, none reused.
    assert len({entry.idempotency_key for entry in entries}) == 11

    # The site holds exactly these eleven receipts for the workflow.
    summaries = listed(site, workflow)
    assert sorted(s["id"] for s in summaries) == sorted(str(e.receipt_id) for e in entries)
    assert sorted(s["phase"] for s in summaries) == ["completion"] + ["end"] * 5 + ["start"] * 5
    assert len(listed(site, workflow, phase="completion")) == 1
    assert len(listed(site, workflow, outcome="failed")) == 3

    documents = [stored(site, str(entry.receipt_id)) for entry in entries]
    tool_documents = documents[:-1]
    runs = [run for run in recorder.tools for _ in ("start", "end")]
    for document, run, key in zip(tool_documents, runs, keys, strict=False):
        assert document["workflow_id"] == workflow
        assert document["phase"] == key.phase
        assert document["subject"] == {"type": "tool", "name": run.name}
        assert document["attempt"]["number"] == key.attempt
        framework = document["framework"]
        assert framework["name"] == "langchain"
        assert framework["version"] == langchain_core.__version__
        # LangChain's own ids, as its callback manager reported them to another handler.
        assert framework["run_id"] == str(run.run_id)
        assert framework["parent_run_id"] == str(run.parent_run_id)
        assert framework["tool_call_id"] == run.tool_call_id
        if key.phase == "start":
            assert "outcome" not in document
        else:
            assert document["outcome"] == ("failed" if run.failed else "succeeded")

    by_name = {
        (d["subject"]["name"], d["phase"], d["attempt"]["number"]): d for d in tool_documents
    }
    assert by_name[("get_weather", "start", 1)]["input_summary"] == "{'city': 'Paris'}"
    assert by_name[("get_weather", "end", 1)]["result"] == "Sunny in Paris"
    assert by_name[("charge_card", "end", 1)]["outcome"] == "failed"
    assert "card declined for 40 EUR" in by_name[("charge_card", "end", 1)]["result"]
    assert by_name[("lookup_order", "end", 1)]["outcome"] == "failed"  # a handled ToolException
    assert "no order A1" in by_name[("lookup_order", "end", 1)]["result"]
    # RunnableRetry: the same tool call, a new LangChain run, attempt 2 chained to attempt 1.
    first, second = (run for run in recorder.tools if run.name == "reserve_table")
    assert first.parent_run_id == second.parent_run_id != root  # both under the retry's run
    assert by_name[("reserve_table", "end", 1)]["outcome"] == "failed"
    retried = by_name[("reserve_table", "start", 2)]["attempt"]
    assert retried["prior_attempt_id"] == str(first.run_id)
    assert "booking service unreachable" in retried["retry_reason"]
    assert by_name[("reserve_table", "end", 2)]["outcome"] == "succeeded"
    assert by_name[("reserve_table", "end", 2)]["result"] == "Table for 2 at 20:00"

    # The completion: the outermost run, linking every tool receipt of the run by id.
    completion = documents[-1]
    assert completion["phase"] == "completion"
    assert completion["outcome"] == "succeeded"
    assert completion["subject"] == {"type": "chain", "name": "evening_agent"}
    assert completion["framework"]["run_id"] == str(root)
    assert "parent_run_id" not in completion["framework"]
    assert completion["result"] == ANSWER
    assert completion["input_summary"] == QUESTION
    assert completion["links"]["child_receipt_ids"] == [str(e.receipt_id) for e in entries[:-1]]

    # Every URL, per (run, tool run, phase, attempt): none overwritten, each opens.
    urls = handler.urls
    assert list(urls) == keys
    for key, entry in zip(keys, entries, strict=True):
        check_url_opens(site, urls[key], str(entry.receipt_id))

    verify = site.get(f"/api/receipt/{entries[-1].receipt_id}/verify")
    assert verify.status == 200 and verify.json()["status"] in ("valid", "pending"), verify


def test_the_same_tool_run_seen_again_is_a_new_attempt(site: LiveSite, tmp_path: Path) -> None:
    """A tool run re-invoked under its own run id (outside any chain): attempt 2, own keys."""
    client = Client(site.url, site.api_key, str(tmp_path / "outbox.sqlite3"))
    workflow = f"lc-{uuid.uuid4()}"
    handler = ReceiptCallbackHandler(client, workflow)
    calls = {"n": 0}

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        calls["n"] += 1
        if calls["n"] == 1:
            raise TimeoutError("smtp timed out")
        return f"queued for {to}"

    run_id = uuid.uuid4()
    config: Any = {"callbacks": [handler], "run_id": run_id}
    with pytest.raises(TimeoutError):
        send_email.invoke({"to": "ops@example.org"}, config=config)
    assert send_email.invoke({"to": "ops@example.org"}, config=config) == (
        "queued for ops@example.org"
    )

    assert handler.errors == []
    entries = handler.entries
    assert [(e.phase, e.attempt, e.receipt_status) for e in entries] == [
        ("start", 1, "published"),
        ("end", 1, "published"),
        ("start", 2, "published"),
        ("end", 2, "published"),
    ]
    documents = [stored(site, str(entry.receipt_id)) for entry in entries]
    assert [d["framework"]["run_id"] for d in documents] == [str(run_id)] * 4
    assert documents[1]["outcome"] == "timed_out"
    assert documents[2]["attempt"]["prior_attempt_id"] == str(run_id)
    assert "smtp timed out" in documents[2]["attempt"]["retry_reason"]
    assert documents[3]["outcome"] == "succeeded"
    assert not listed(site, workflow, phase="completion")  # no chain, so no completion
    assert list(handler.urls) == [
        ReceiptKey(str(run_id), str(run_id), phase, attempt)
        for attempt in (1, 2)
        for phase in ("start", "end")
    ]


def test_a_run_with_the_site_down_completes_and_flush_publishes_later(tmp_path: Path) -> None:
    with LiveSite(workers=2) as site:
        # `deadline` bounds how long one record may try to publish, so how long each hook
        # may hold the agent while the site is down.
        deadline = 0.5
        client = Client(site.url, site.api_key, str(tmp_path / "outbox.sqlite3"), deadline=deadline)
        workflow = f"lc-{uuid.uuid4()}"
        handler = ReceiptCallbackHandler(client, workflow)
        site.stop()

        started = time.monotonic()
        answer, root, recorder = run_agent(handler)
        elapsed = time.monotonic() - started

        # The agent's run is untouched by the site being down, and held a bounded time.
        assert answer == ANSWER
        assert elapsed < 11 * deadline + 10
        assert handler.errors == []
        keys = expected_keys(root, recorder)
        assert [e.receipt_status for e in handler.entries] == ["pending"] * 11
        assert [e.receipt_id for e in handler.entries] == [None] * 11
        assert handler.urls == {}

        site._serve()
        flushed: list[Entry] = client.flush()
        assert sorted(e.idempotency_key for e in flushed) == sorted(
            e.idempotency_key for e in handler.entries
        )

        entries = handler.entries
        assert [e.receipt_status for e in entries] == ["published"] * 11
        summaries = listed(site, workflow)
        assert sorted(s["id"] for s in summaries) == sorted(str(e.receipt_id) for e in entries)
        documents = [stored(site, str(entry.receipt_id)) for entry in entries]
        assert [d["phase"] for d in documents] == [key.phase for key in keys]
        assert [d["framework"]["run_id"] for d in documents[:-1]] == [
            str(run.run_id) for run in recorder.tools for _ in ("start", "end")
        ]
        # No tool receipt was published when the completion was recorded: it links none, and
        # says so, naming their keys.
        completion = documents[-1]
        assert completion["framework"]["run_id"] == str(root)
        assert "links" not in completion or not completion["links"].get("child_receipt_ids")
        assert "10 tool receipt(s) of this run were not published" in completion["not_observed"][0]
        assert entries[0].idempotency_key in completion["not_observed"][0]

        urls = handler.urls
        assert list(urls) == keys
        for key, entry in zip(keys, entries, strict=True):
            check_url_opens(site, urls[key], str(entry.receipt_id))

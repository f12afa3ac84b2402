"""The OpenAI Agents SDK adapter, driven by the real ``openai-agents`` package against a live
receiptsite.

No hosted model can be reached from these tests (no network beyond loopback, and no
OPENAI_API_KEY), so a local fake model stands in: ``ScriptedToolModel`` implements the SDK's
own ``agents.models.interface.Model`` and answers, turn by turn, with ``ResponseFunctionToolCall``
items (the call ids below) and then a final text message. Everything else is the real SDK: an
``agents.Agent`` with two function tools (one async, one sync that fails on its first call),
``agents.Runner.run_sync``, the SDK's own failure handling (its default
``failure_error_function`` hands the model an error message, so the fake model calls the
failed tool again with the same arguments) and its ``RunHooks``. Tracing is disabled, and a
guard refuses every connection that is not to loopback while the tests run. The receipts are
then read back from a real gunicorn (``client_helpers.LiveSite``) over HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import agents
import pytest
from agents import function_tool
from client_helpers import LiveSite, site_document, site_receipts
from openai_agents_helpers import (
    CARD_ERROR,
    CHARGE_ARGS,
    CHARGE_CALL,
    LOOKUP_ARGS,
    LOOKUP_CALL,
    RETRY_CALL,
    SDK_ERROR_MESSAGE,
    Shop,
    check_sdk_run,
    loopback_only,
    run,
)
from receiptsite_client import Client, Entry
from receiptsite_client.openai_agents import (
    ReceiptKey,
    ReceiptRunHooks,
    ReceiptTools,
    receipt_function_tool,
)

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Tracing off, and no connection beyond loopback (openai_agents_helpers.loopback_only)."""
    yield from loopback_only(monkeypatch)




# --- what the site must hold -------------------------------------------------------------------


def expected_keys(run_id: str) -> set[ReceiptKey]:
    return {
        ReceiptKey(run_id, call, phase, attempt)
        for call, attempt in ((LOOKUP_CALL, 1), (CHARGE_CALL, 1), (RETRY_CALL, 2))
        for phase in ("start", "end")
    }


def published(receipts: list[tuple[ReceiptKey, Entry]]) -> dict[ReceiptKey, Entry]:
    by_key = dict(receipts)
    assert len(by_key) == len(receipts), "two receipts under one key"
    for key, entry in by_key.items():
        assert entry.receipt_status == "published", (key, entry)
        assert entry.receipt_id and entry.url
    return by_key


def check_run(
    site: LiveSite,
    workflow_id: str,
    receipts: dict[ReceiptKey, Entry],
    urls: dict[ReceiptKey, str],
    *,
    failure_result: str,
    linked: bool = True,
) -> dict[ReceiptKey, dict[str, Any]]:
    """Every receipt of one run, read back from the site, as the adapter must have made it."""
    (run_id,) = {key.run_id for key in receipts}
    assert set(receipts) == expected_keys(run_id)
    assert set(urls) == set(receipts), "a receipt URL is missing"
    docs = {key: site_document(site, entry.receipt_id or "") for key, entry in receipts.items()}

    for key, doc in docs.items():
        entry = receipts[key]
        assert doc["id"] == entry.receipt_id
        assert doc["workflow_id"] == workflow_id
        assert doc["phase"] == key.phase
        assert doc["attempt"]["number"] == key.attempt
        assert doc["idempotency_key"] == f"oa/{run_id}/{key.tool_call_id}/{key.phase}/{key.attempt}"
        assert doc["framework"] == {
            "name": "openai-agents",
            "version": agents.__version__,
            "run_id": run_id,
            "tool_call_id": key.tool_call_id,  # the fake model's call id, through the SDK
        }
        assert doc["subject"]["type"] == "tool"
        assert doc["metadata"] == {"agent": "shop-assistant"}
        # Each kept URL is the receipt's page, and it opens; the receipt verifies.
        assert urls[key] == f"{site.url}/run/{entry.receipt_id}"
        assert site.get(urlsplit(urls[key]).path).status == 200
        verification = site.get(f"/api/receipt/{entry.receipt_id}/verify")
        assert verification.status == 200 and verification.json()["status"] == "valid"
        if key.phase == "start":
            assert "outcome" not in doc
        else:
            start = receipts[key._replace(phase="start")]
            if linked:
                assert doc["links"] == {"parent_receipt_id": start.receipt_id}
            else:  # the start was pending when the end was recorded: no link, said so
                assert "links" not in doc
                assert any(start.idempotency_key in text for text in doc["not_observed"])
            assert doc["duration_ms"] >= 0 and doc["ended_at"] >= doc["started_at"]

    lookup_start = docs[ReceiptKey(run_id, LOOKUP_CALL, "start", 1)]
    assert lookup_start["subject"]["name"] == "lookup_order"
    assert json.loads(lookup_start["input_summary"]) == LOOKUP_ARGS
    lookup_end = docs[ReceiptKey(run_id, LOOKUP_CALL, "end", 1)]
    assert (lookup_end["outcome"], lookup_end["result"]) == ("succeeded", "order 42: shipped")

    charge_start = docs[ReceiptKey(run_id, CHARGE_CALL, "start", 1)]
    charge_end = docs[ReceiptKey(run_id, CHARGE_CALL, "end", 1)]
    assert charge_start["subject"]["name"] == "charge_card"
    assert json.loads(charge_start["input_summary"]) == CHARGE_ARGS
    assert charge_end["outcome"] == "failed"
    assert failure_result in charge_end["result"]

    # The model tried again (a new call id, the same arguments): attempt 2 of the same step.
    retry_start = docs[ReceiptKey(run_id, RETRY_CALL, "start", 2)]
    retry_end = docs[ReceiptKey(run_id, RETRY_CALL, "end", 2)]
    for doc in (retry_start, retry_end):
        assert doc["step_id"] == charge_start["step_id"] == f"charge_card/{CHARGE_CALL}"
        assert doc["attempt"]["prior_attempt_id"] == charge_end["idempotency_key"]
        assert failure_result in doc["attempt"]["retry_reason"]
    assert retry_end["outcome"] == "succeeded"
    assert retry_end["result"] == "charged 1999 cents for order 42"
    assert lookup_start["step_id"] == f"lookup_order/{LOOKUP_CALL}"
    assert lookup_start["attempt"] == {"number": 1} == charge_start["attempt"]
    return docs


# --- the tests -------------------------------------------------------------------------------


def test_run_hooks_publish_a_start_and_an_end_receipt_for_every_tool_call(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(live_site.url, live_site.api_key, outbox_path)
    hooks = ReceiptRunHooks(client, workflow_id)
    runs = []
    for _ in range(2):  # one hooks object, two runs: each run its own id and receipts
        shop = Shop()
        lookup_order, charge_card = shop.functions()
        result, model = run([function_tool(lookup_order), function_tool(charge_card)], hooks=hooks)
        check_sdk_run(result, model, shop)
        runs.append(result)

    assert hooks.errors == []
    receipts = published(hooks.receipts)
    run_ids = sorted({key.run_id for key in receipts})
    assert len(run_ids) == 2, "two runs, two run ids"
    urls = hooks.urls
    assert len(urls) == 12 == len(hooks.entries)
    for run_id in run_ids:
        check_run(
            live_site,
            workflow_id,
            {key: entry for key, entry in receipts.items() if key.run_id == run_id},
            {key: url for key, url in urls.items() if key.run_id == run_id},
            # The hooks see what the model got back: the SDK's default error message.
            failure_result=SDK_ERROR_MESSAGE,
        )
    assert len(site_receipts(live_site, workflow_id)) == 12


def test_receipt_function_tool_records_each_call_itself(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(live_site.url, live_site.api_key, outbox_path)
    shop = Shop()
    lookup_order, charge_card = shop.functions()
    recorder = receipt_function_tool(client, workflow_id)
    assert isinstance(recorder, ReceiptTools)
    lookup_tool, charge_tool = recorder(lookup_order), recorder(charge_card)
    # The SDK sees the same tool as without the wrapper: name, description, schema.
    plain = function_tool(charge_card)
    assert (charge_tool.name, charge_tool.description) == (plain.name, plain.description)
    assert charge_tool.params_json_schema == plain.params_json_schema
    assert charge_tool.receipts is recorder  # type: ignore[attr-defined]

    # Run hooks as well: they leave self-recording tools alone (no second set of receipts).
    hooks = ReceiptRunHooks(client, workflow_id)
    result, model = run([lookup_tool, charge_tool], hooks=hooks)
    check_sdk_run(result, model, shop)
    assert hooks.entries == [] and hooks.errors == []

    assert recorder.errors == []
    receipts = published(recorder.receipts)
    check_run(
        live_site,
        workflow_id,
        receipts,
        recorder.urls,
        # The wrapper sees the exception itself, before the SDK turns it into a message.
        failure_result=f"RuntimeError: {CARD_ERROR}",
    )
    assert len(site_receipts(live_site, workflow_id)) == 6


def test_a_raising_tool_fails_the_run_exactly_as_without_the_wrapper(
    live_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    """With failure_error_function=None the SDK lets the tool's exception end the run: the
    wrapper records the failed end receipt and the same exception reaches the caller."""
    client = Client(live_site.url, live_site.api_key, outbox_path)
    failures = []
    for make in (
        lambda f: function_tool(f, failure_error_function=None),
        lambda f: receipt_function_tool(client, workflow_id, f, failure_error_function=None),
    ):
        shop = Shop()
        lookup_order, charge_card = shop.functions()
        with pytest.raises(Exception) as raised:
            run([make(lookup_order), make(charge_card)])
        failures.append((type(raised.value), str(raised.value), shop.charges))
    assert failures[0] == failures[1]
    assert CARD_ERROR in failures[0][1]

    # When the run is torn down, the SDK cancels the other tool's task; a receipt it was
    # recording then still reaches the outbox and the site, from its worker thread, soon after:
    # wait until every step that started has its end, and nothing is pending (waiting on
    # "nothing pending" alone, the cancelled step's end could be recorded and published after
    # the outbox was read, and be on the site but not in `entries`: seen once in CI).
    deadline = time.monotonic() + 15
    while True:
        entries = client.entries(workflow_id)
        started = {entry.step_id for entry in entries if entry.phase == "start"}
        finished = {entry.step_id for entry in entries if entry.phase == "end"}
        settled = started <= finished and all(
            entry.receipt_status != "pending" for entry in entries
        )
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    ended = {
        entry.document["framework"]["tool_call_id"]: entry.document
        for entry in entries
        if entry.phase == "end"
    }
    assert ended[CHARGE_CALL]["outcome"] == "failed"
    assert ended[CHARGE_CALL]["result"] == f"RuntimeError: {CARD_ERROR}"
    assert all(entry.receipt_status == "published" for entry in entries)
    on_site = {
        site_document(live_site, receipt["id"])["idempotency_key"]
        for receipt in site_receipts(live_site, workflow_id)
    }
    assert on_site == {entry.idempotency_key for entry in entries}
    assert {entry.phase for entry in entries if entry.step_id == f"charge_card/{CHARGE_CALL}"} == {
        "start",
        "end",
    }


def test_with_the_site_stopped_the_run_completes_and_flush_publishes_later(
    own_site: LiveSite, outbox_path: Path, workflow_id: str
) -> None:
    client = Client(own_site.url, own_site.api_key, outbox_path, deadline=0.3)
    own_site.stop()

    hooks = ReceiptRunHooks(client, workflow_id)
    shop = Shop()
    lookup_order, charge_card = shop.functions()
    result, model = run([function_tool(lookup_order), function_tool(charge_card)], hooks=hooks)
    check_sdk_run(result, model, shop)

    recorder = receipt_function_tool(client, workflow_id)
    shop = Shop()
    lookup_order, charge_card = shop.functions()
    result, model = run([recorder(lookup_order), recorder(charge_card)])
    check_sdk_run(result, model, shop)

    # Nothing published, nothing raised, nothing lost: every receipt waits in the outbox.
    assert hooks.errors == [] and recorder.errors == []
    assert hooks.urls == {} and recorder.urls == {}
    waiting = hooks.entries + recorder.entries
    assert len(waiting) == 12
    assert all(entry.receipt_status == "pending" and entry.url is None for entry in waiting)

    own_site._serve()
    flushed = client.flush()
    assert sorted(entry.idempotency_key for entry in flushed) == sorted(
        entry.idempotency_key for entry in waiting
    )
    assert all(entry.receipt_status == "published" for entry in flushed)

    check_run(
        own_site,
        workflow_id,
        published(hooks.receipts),
        hooks.urls,
        failure_result=SDK_ERROR_MESSAGE,
        linked=False,
    )
    check_run(
        own_site,
        workflow_id,
        published(recorder.receipts),
        recorder.urls,
        failure_result=f"RuntimeError: {CARD_ERROR}",
        linked=False,
    )
    assert len(site_receipts(own_site, workflow_id)) == 12

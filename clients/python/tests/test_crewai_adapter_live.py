"""The CrewAI adapter, driven by crewai itself (a real ``Crew`` of real ``Agent``s and
``Task``s run with ``crew.kickoff()``) against a live receiptsite.

No hosted model can be reached from these tests (no network beyond loopback), so a local fake
model stands in: ``FakeLLM``, a subclass of crewai's own ``BaseLLM`` whose ``call()`` returns a
canned ReAct answer ("Final Answer: ...") chosen by the task asking. Everything else is the real
framework: CrewAI's agent executor parses the answer, builds each ``TaskOutput`` and calls the
task callback. CrewAI's telemetry, tracing and version check are switched off by their
environment variables, and a guard refuses (and records) every connection or DNS lookup that
is not loopback, so a test fails if anything tries to leave the machine; each test also runs
under a deadline, so none can hang. The receipts are read back from a real gunicorn
(``client_helpers.LiveSite``) over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import crewai
import pytest
from client_helpers import LiveSite
from crewai_helpers import (
    ANSWERS,
    EXPECTED_OUTPUTS,
    IGNORED_WARNINGS,
    SECRET,
    SUMMARY,
    NetworkGuard,
    akickoff,
    build_crew,
    client_for,
    crewai_offline,
    kickoff,
    outputs,
)
from receiptsite_client import Client, Entry
from receiptsite_client.crewai import ReceiptKey, receipt_task_callback

pytestmark = [pytest.mark.live, *IGNORED_WARNINGS]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[NetworkGuard]:
    """No network beyond loopback, no telemetry, a deadline (crewai_helpers.crewai_offline)."""
    yield from crewai_offline(monkeypatch, tmp_path)




# --- the site -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as live:
        yield live


def stored_document(site: LiveSite, url: str) -> dict[str, Any]:
    """The evidence document behind a receipt's page, read back from the site."""
    path = urlsplit(url).path
    assert path.startswith("/run/"), url
    answer = site.get("/api/receipts/" + path.removeprefix("/run/"), key=site.api_key)
    assert answer.status == 200, answer
    document: dict[str, Any] = answer.json()["document"]
    return document


def site_receipts(site: LiveSite, workflow_id: str) -> list[dict[str, Any]]:
    answer = site.get(f"/api/receipts?workflow_id={workflow_id}&limit=200", key=site.api_key)
    assert answer.status == 200, answer
    receipts: list[dict[str, Any]] = answer.json()["receipts"]
    return receipts


# --- against a live site ----------------------------------------------------------------------


def record_run_start(client: Client, workflow: str) -> Entry:
    """The crew run's own start receipt, published: the task receipts' parent."""
    parent = client.record(
        {
            "workflow_id": workflow,
            "phase": "start",
            "subject": {"type": "agent_run", "name": "bee-crew"},
            "idempotency_key": f"{workflow}/crew/start/1",
        }
    )
    assert parent.receipt_status == "published", parent.error
    return parent


def test_one_completion_receipt_per_task(site: LiveSite, tmp_path: Path) -> None:
    """A crew's two tasks give two `completion` receipts, linked to the run's own receipt,
    with CrewAI's ids, the task's (redacted) output and attempt 1; a second kickoff in the
    same workflow gives attempt 2 of each; every URL is kept and every page opens."""
    workflow = "wf-crewai-live"
    client = client_for(site.url, site.api_key, tmp_path)
    parent = record_run_start(client, workflow)
    callback = receipt_task_callback(
        client, workflow, parent_idempotency_key=parent.idempotency_key
    )
    baseline = kickoff(build_crew().crew)
    the = build_crew(task_callback=callback)

    result = kickoff(the.crew)

    # The crew's output is the agent's own, secret included: the receipt never rewrites it.
    assert outputs(result) == outputs(baseline) == EXPECTED_OUTPUTS
    assert SECRET in result.tasks_output[0].raw
    assert callback.errors == []
    first = {
        ReceiptKey(workflow, "research", "completion", 1),
        ReceiptKey(workflow, SUMMARY, "completion", 1),
    }
    assert set(callback.urls) == first
    documents = {key: stored_document(site, url) for key, url in callback.urls.items()}
    tasks = {"research": the.research, SUMMARY: the.summary}
    for key, doc in documents.items():
        task = tasks[key.task]
        assert doc["phase"] == "completion"
        assert doc["subject"] == {"type": "task", "name": key.task}
        assert doc["step_id"] == key.task
        assert doc["outcome"] == "succeeded"
        assert doc["attempt"] == {"number": 1}
        assert doc["workflow_id"] == workflow
        assert doc["framework"]["name"] == "crewai"
        assert doc["framework"]["version"] == crewai.__version__
        assert doc["framework"]["run_id"] == str(task.id)
        assert doc["metadata"]["crewai.crew_id"] == str(the.crew.id)
        assert doc["links"] == {"parent_receipt_id": parent.receipt_id}
        assert doc["input_summary"] == task.description
        assert doc["idempotency_key"] == callback.entries[key].idempotency_key
        assert isinstance(doc["duration_ms"], int) and doc["duration_ms"] >= 0
        assert doc["started_at"] <= doc["ended_at"]
    research = documents[ReceiptKey(workflow, "research", "completion", 1)]
    assert SECRET not in research["result"] and "[REDACTED]" in research["result"]
    assert documents[ReceiptKey(workflow, SUMMARY, "completion", 1)]["result"] == ANSWERS[SUMMARY]
    # One kickoff: both tasks hang under the same execution id, which is no task's id.
    runs = {doc["framework"]["parent_run_id"] for doc in documents.values()}
    assert len(runs) == 1 and runs.isdisjoint({str(the.research.id), str(the.summary.id)})
    assert {doc["metadata"]["crewai.execution_id"] for doc in documents.values()} == runs

    # The same crew again in the same workflow: attempt 2 of each task, the first kept.
    again = kickoff(the.crew)
    assert outputs(again) == EXPECTED_OUTPUTS
    assert callback.errors == []
    urls = callback.urls
    second = {key._replace(attempt=2) for key in first}
    assert set(urls) == first | second
    assert len(set(urls.values())) == 4
    for key in second:
        doc = stored_document(site, urls[key])
        prior = callback.entries[key._replace(attempt=1)].idempotency_key
        assert doc["attempt"] == {"number": 2, "prior_attempt_id": prior}
        assert doc["framework"]["parent_run_id"] not in runs  # another kickoff
    for url in urls.values():
        assert url.startswith(site.url + "/run/")
        assert site.get(urlsplit(url).path).status == 200
        receipt_id = urlsplit(url).path.removeprefix("/run/")
        verdict = site.get(f"/api/receipt/{receipt_id}/verify").json()
        assert verdict["status"] == "valid", verdict
    listed = site_receipts(site, workflow)
    assert sorted(r["phase"] for r in listed) == ["completion"] * 4 + ["start"]


def test_async_kickoff_publishes_too(site: LiveSite, tmp_path: Path) -> None:
    """`crew.akickoff()` runs the tasks through CrewAI's async path; the callback is called
    the same way and publishes one receipt per task."""
    workflow = "wf-crewai-async"
    client = client_for(site.url, site.api_key, tmp_path)
    callback = receipt_task_callback(client, workflow)
    the = build_crew(task_callback=callback)

    result = akickoff(the.crew)

    assert outputs(result) == EXPECTED_OUTPUTS
    assert callback.errors == []
    assert set(callback.urls) == {
        ReceiptKey(workflow, "research", "completion", 1),
        ReceiptKey(workflow, SUMMARY, "completion", 1),
    }
    docs = [stored_document(site, url) for url in callback.urls.values()]
    assert {d["framework"]["run_id"] for d in docs} == {str(the.research.id), str(the.summary.id)}


def test_chosen_tasks_only(site: LiveSite, tmp_path: Path) -> None:
    """`tasks=` chooses: by name, only the research task has a receipt; by Task object (on
    the task's own `callback`, with the crew's callback elsewhere), only the summary."""
    client = client_for(site.url, site.api_key, tmp_path)
    by_name = receipt_task_callback(client, "wf-crewai-by-name", tasks=["research"])
    result = kickoff(build_crew(task_callback=by_name).crew)
    assert outputs(result) == EXPECTED_OUTPUTS
    assert by_name.errors == []
    assert list(by_name.urls) == [ReceiptKey("wf-crewai-by-name", "research", "completion", 1)]
    assert [r["subject"]["name"] for r in site_receipts(site, "wf-crewai-by-name")] == ["research"]

    the = build_crew()
    by_task = receipt_task_callback(client, "wf-crewai-by-task", tasks=[the.summary])
    the.crew.task_callback = by_task
    result = kickoff(the.crew)
    assert outputs(result) == EXPECTED_OUTPUTS
    assert list(by_task.urls) == [ReceiptKey("wf-crewai-by-task", SUMMARY, "completion", 1)]
    listed = site_receipts(site, "wf-crewai-by-task")
    assert [(r["subject"]["name"], r["phase"]) for r in listed] == [(SUMMARY, "completion")]


def test_a_refused_receipt_is_an_error_kept_never_the_crews(site: LiveSite, tmp_path: Path) -> None:
    """A receipt the site (or the client, before it) refuses, here for a metadata key that
    receipt/v1 does not allow: the crew's output is unchanged, each entry is `failed` and
    each refusal is in `.errors`; no URL is made up."""
    workflow = "wf-crewai-refused"
    client = client_for(site.url, site.api_key, tmp_path)
    callback = receipt_task_callback(client, workflow, metadata={"Not A Key": "x"})

    result = kickoff(build_crew(task_callback=callback).crew)

    assert outputs(result) == EXPECTED_OUTPUTS
    assert [e.receipt_status for e in callback.entries.values()] == ["failed", "failed"]
    assert [error.task for error in callback.errors] == ["research", SUMMARY]
    assert all("refused" in error.message for error in callback.errors)
    assert all(
        error.key is not None and error.key.phase == "completion" for error in callback.errors
    )
    assert callback.urls == {}
    assert site_receipts(site, workflow) == []


def test_site_down_the_crew_completes_and_flush_publishes(tmp_path: Path) -> None:
    """With the site stopped the crew completes unchanged and both receipts wait in the
    outbox (pending, no URL, no error); after a restart `client.flush()` publishes them from
    the stored payload, and the callback's URLs then lead to them."""
    workflow = "wf-crewai-down"
    with LiveSite(workers=2) as site:
        client = client_for(site.url, site.api_key, tmp_path)
        parent = record_run_start(client, workflow)
        callback = receipt_task_callback(
            client, workflow, parent_idempotency_key=parent.idempotency_key
        )
        site.stop()

        the = build_crew(task_callback=callback)
        result = kickoff(the.crew)

        assert outputs(result) == EXPECTED_OUTPUTS
        assert callback.errors == []
        keys = [
            ReceiptKey(workflow, "research", "completion", 1),
            ReceiptKey(workflow, SUMMARY, "completion", 1),
        ]
        assert list(callback.entries) == keys
        assert [e.receipt_status for e in callback.entries.values()] == ["pending", "pending"]
        assert callback.urls == {}

        site._serve()
        flushed = client.flush()

        assert [e.receipt_status for e in flushed] == ["published", "published"]
        urls = callback.urls
        assert list(urls) == keys
        for key in keys:
            assert site.get(urlsplit(urls[key]).path).status == 200
            doc = stored_document(site, urls[key])
            assert doc["links"] == {"parent_receipt_id": parent.receipt_id}
            assert doc["subject"]["name"] == key.task
        assert the.llm.calls == ["research", SUMMARY]  # flush called no model, no tool

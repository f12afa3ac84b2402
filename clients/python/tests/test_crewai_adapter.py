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
(``tests.live.LiveSite``) over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import crewai
import pytest
from client_helpers import CREWAI_OFFLINE
from crewai import Agent, Crew, Process, Task
from crewai.crews.crew_output import CrewOutput
from crewai.events.event_bus import crewai_event_bus
from crewai.llms.base_llm import BaseLLM
from crewai.tasks.task_output import TaskOutput
from receiptsite_client import Client
from receiptsite_client.crewai import ReceiptKey, ReceiptTaskCallback, receipt_task_callback

from tests.live import PYTHON, LiveSite

pytestmark = [
    # CrewAI warns that a stateful callback cannot be checkpointed (these tests do not
    # checkpoint), and about its own deprecated internals.
    pytest.mark.filterwarnings("ignore:.*callbacks cannot be serialized:UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
]

DEADLINE = 240  # seconds one test may take, site start-up included
SECRET = "sk-live0123456789abcdefABCDEF"  # a made-up key the redaction patterns recognise
ANSWERS = {
    "research": f"Bees pollinate crops; the lab's key {SECRET} was in the notes.",
    "Write a short summary of the research notes.": "Summary: bees matter to farming.",
}
SUMMARY = "Write a short summary of the research notes."


# --- no network, no hang --------------------------------------------------------------------


LOOPBACK = {"127.0.0.1", "::1", "localhost", "ip6-localhost"}


def _is_loopback(host: Any) -> bool:
    return host is None or (isinstance(host, str) and (host in LOOPBACK or host.startswith("127.")))


@dataclass
class NetworkGuard:
    """Refuses every non-loopback connection and DNS lookup made in this process (any
    thread), and remembers each one."""

    blocked: list[str] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_connect = socket.socket.connect
        real_connect_ex = socket.socket.connect_ex
        real_getaddrinfo = socket.getaddrinfo

        def check(address: Any) -> None:
            if isinstance(address, tuple) and not _is_loopback(address[0]):
                self.blocked.append(f"connect {address!r}")
                raise OSError(f"the test refuses a connection to {address!r}")

        def connect(sock: socket.socket, address: Any) -> None:
            check(address)
            real_connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            check(address)
            return real_connect_ex(sock, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            name = host.decode() if isinstance(host, bytes) else host
            if not _is_loopback(name):
                self.blocked.append(f"resolve {name!r}")
                raise socket.gaierror(f"the test refuses to resolve {name!r}")
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[NetworkGuard]:
    """CrewAI's telemetry and tracing off, its storage in the test's directory, the network
    guard on, and a deadline (SIGALRM) on the whole test."""
    for name, value in CREWAI_OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai-storage"))
    guard = NetworkGuard()
    guard.install(monkeypatch)

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"the test took more than {DEADLINE} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(DEADLINE)
    try:
        yield guard
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert guard.blocked == [], f"something tried to reach the network: {guard.blocked}"


def test_the_network_guard_refuses_the_outside(offline: NetworkGuard) -> None:
    """The guard these tests rely on: a lookup or a connection beyond loopback is refused
    and remembered (then forgotten, so that this test itself passes)."""
    with pytest.raises(OSError):
        socket.create_connection(("telemetry.crewai.com", 443), timeout=2)
    with socket.socket() as sock, pytest.raises(OSError):
        sock.connect(("192.0.2.1", 443))
    assert offline.blocked == ["resolve 'telemetry.crewai.com'", "connect ('192.0.2.1', 443)"]
    offline.blocked.clear()


# --- the crew: real crewai, a local fake model ------------------------------------------------


class FakeLLM(BaseLLM):
    """A local stand-in for a hosted model: answers each task with its canned text, in the
    ReAct form CrewAI's executor parses. Never opens a connection."""

    calls: list[str] = []

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> str:
        asking = str(getattr(from_task, "name", None) or getattr(from_task, "description", ""))
        self.calls.append(asking)
        answer = ANSWERS.get(asking, f"no canned answer for {asking!r}")
        return f"Thought: I now know the final answer\nFinal Answer: {answer}"

    async def acall(self, *args: Any, **kwargs: Any) -> str:
        return self.call(*args, **kwargs)


@dataclass
class TheCrew:
    crew: Crew
    research: Task
    summary: Task
    llm: FakeLLM


def build_crew(
    *, task_callback: Callable[[TaskOutput], Any] | None = None, research_callback: Any = None
) -> TheCrew:
    """Two agents, two tasks (one named, one known only by its description), sequential."""
    llm = FakeLLM(model="fake-local-model", calls=[])
    researcher = Agent(
        role="Researcher", goal="Find facts about bees", backstory="A field biologist", llm=llm
    )
    writer = Agent(role="Writer", goal="Summarise notes", backstory="A science writer", llm=llm)
    research = Task(
        name="research",
        description="Collect notes on how bees help farming.",
        expected_output="Research notes",
        agent=researcher,
        callback=research_callback,
    )
    summary = Task(description=SUMMARY, expected_output="A one-line summary", agent=writer)
    crew = Crew(
        agents=[researcher, writer],
        tasks=[research, summary],
        process=Process.sequential,
        task_callback=task_callback,
        verbose=False,
    )
    return TheCrew(crew, research, summary, llm)


def kickoff(crew: Crew) -> CrewOutput:
    """`crew.kickoff()`; without streaming that is a CrewOutput."""
    result = crew.kickoff()
    assert isinstance(result, CrewOutput), result
    return result


def akickoff(crew: Crew) -> CrewOutput:
    """`crew.akickoff()`, CrewAI's native async path, run to completion."""
    result = asyncio.run(crew.akickoff())
    assert isinstance(result, CrewOutput), result
    return result


def outputs(result: CrewOutput) -> list[str]:
    return [output.raw for output in result.tasks_output]


EXPECTED_OUTPUTS = [ANSWERS["research"], ANSWERS[SUMMARY]]


# --- the site -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as live:
        yield live


def client_for(site_url: str, api_key: str, tmp_path: Path) -> Client:
    return Client(site_url, api_key, tmp_path / "outbox.sqlite3")


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


# --- constructing subscribes to nothing ------------------------------------------------------


def handler_snapshot() -> dict[str, list[str]]:
    """Every handler on CrewAI's global event bus, by event type."""
    snapshot: dict[str, list[str]] = {}
    for table in (crewai_event_bus._sync_handlers, crewai_event_bus._async_handlers):
        for event_type, handlers in table.items():
            names = [f"{h.__module__}.{getattr(h, '__qualname__', h)}" for h in handlers]
            snapshot.setdefault(event_type.__name__, []).extend(sorted(names))
    return snapshot


def test_importing_and_constructing_subscribes_to_nothing(tmp_path: Path) -> None:
    """In a fresh interpreter: CrewAI's event bus holds the same handlers before the adapter
    is imported and after a callback is constructed, and none of them is the client's."""
    script = textwrap.dedent(
        f"""
        import json, sys
        import crewai
        from crewai.events.event_bus import crewai_event_bus as bus

        def snapshot():
            out = {{}}
            for table in (bus._sync_handlers, bus._async_handlers):
                for kind, handlers in table.items():
                    out.setdefault(kind.__name__, []).extend(
                        sorted(h.__module__ + "." + getattr(h, "__qualname__", "?")
                               for h in handlers))
            return out

        before = snapshot()
        assert "receiptsite_client.crewai" not in sys.modules
        from receiptsite_client import Client
        from receiptsite_client.crewai import receipt_task_callback
        client = Client("http://127.0.0.1:9", "rk_test", {str(tmp_path / "outbox.sqlite3")!r})
        callback = receipt_task_callback(client, "wf-subscribe", tasks=["research"])
        after = snapshot()
        print(json.dumps({{"before": before, "after": after}}))
        """
    )
    env = {**os.environ, **CREWAI_OFFLINE, "CREWAI_STORAGE_DIR": str(tmp_path / "storage")}
    done = subprocess.run(
        [str(PYTHON), "-c", script], capture_output=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert seen["after"] == seen["before"]
    every = [name for names in seen["after"].values() for name in names]
    assert not [name for name in every if name.startswith("receiptsite_client")]


def test_a_callback_no_crew_was_given_records_nothing(tmp_path: Path) -> None:
    """Constructing a callback, then running a crew that was not handed it: CrewAI's event
    bus is unchanged and the outbox stays empty (the callback listens to nothing global)."""
    client = client_for("http://127.0.0.1:9", "rk_test", tmp_path)
    before = handler_snapshot()
    callback = receipt_task_callback(client, "wf-unattached")
    assert handler_snapshot() == before

    result = kickoff(build_crew().crew)

    assert outputs(result) == EXPECTED_OUTPUTS
    assert client.entries() == []
    assert callback.entries == {} and callback.errors == []


# --- receipt failures never touch the crew ---------------------------------------------------


class ExplodingClient:
    """A client whose every call fails, as a broken outbox would."""

    def __init__(self) -> None:
        self.calls = 0

    def record(self, document: dict[str, Any]) -> Any:
        self.calls += 1
        raise RuntimeError("the outbox disk is full")

    def entries(self, workflow_id: str | None = None) -> list[Any]:
        raise RuntimeError("the outbox cannot be read")


def test_receipt_errors_are_recorded_and_never_change_the_result() -> None:
    """The same crew with no callback and with a callback whose client raises: the same
    outputs, no exception out of kickoff, and one recorded error per task."""
    baseline = kickoff(build_crew().crew)
    assert outputs(baseline) == EXPECTED_OUTPUTS

    exploding = ExplodingClient()
    callback = receipt_task_callback(exploding, "wf-exploding")
    the = build_crew(task_callback=callback)
    result = kickoff(the.crew)

    assert outputs(result) == outputs(baseline)
    assert result.raw == baseline.raw == ANSWERS[SUMMARY]
    assert exploding.calls == 2
    assert [error.task for error in callback.errors] == ["research", SUMMARY]
    assert all("the outbox disk is full" in error.message for error in callback.errors)
    assert all(isinstance(error.exception, RuntimeError) for error in callback.errors)
    assert callback.entries == {} and callback.urls == {}
    # The fake model really answered both tasks: the agents ran.
    assert the.llm.calls == ["research", SUMMARY]


def test_the_callback_reads_crewais_own_task_outputs(tmp_path: Path) -> None:
    """Driven by the TaskOutput objects CrewAI built (no site reachable: the entries stay
    pending, which is not an error): the documents in the outbox carry the task's ids."""
    client = client_for("http://127.0.0.1:9", "rk_test", tmp_path)  # nothing listens there
    callback = receipt_task_callback(client, "wf-offline")
    the = build_crew(task_callback=callback)

    result = kickoff(the.crew)

    assert outputs(result) == EXPECTED_OUTPUTS
    assert callback.errors == []
    entries = client.entries("wf-offline")
    assert [e.receipt_status for e in entries] == ["pending", "pending"]
    assert [e.step_id for e in entries] == ["research", SUMMARY]
    documents = [e.document for e in entries]
    assert [d["framework"]["run_id"] for d in documents] == [
        str(the.research.id),
        str(the.summary.id),
    ]
    assert [d["metadata"]["crewai.agent_role"] for d in documents] == ["Researcher", "Writer"]
    assert all(d["metadata"]["crewai.crew_id"] == str(the.crew.id) for d in documents)
    assert callback.urls == {}
    assert set(callback.entries) == {
        ReceiptKey("wf-offline", "research", "completion", 1),
        ReceiptKey("wf-offline", SUMMARY, "completion", 1),
    }


# --- against a live site ----------------------------------------------------------------------


@pytest.mark.live
def test_one_completion_receipt_per_task(site: LiveSite, tmp_path: Path) -> None:
    """A crew's two tasks give two `completion` receipts, linked to the run's own receipt,
    with CrewAI's ids, the task's (redacted) output and attempt 1; a second kickoff in the
    same workflow gives attempt 2 of each; every URL is kept and every page opens."""
    workflow = "wf-crewai-live"
    client = client_for(site.url, site.api_key, tmp_path)
    parent = client.record(
        {
            "workflow_id": workflow,
            "phase": "start",
            "subject": {"type": "agent_run", "name": "bee-crew"},
            "idempotency_key": f"{workflow}/crew/start/1",
        }
    )
    assert parent.receipt_status == "published", parent.error
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


@pytest.mark.live
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


@pytest.mark.live
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


@pytest.mark.live
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


@pytest.mark.live
def test_site_down_the_crew_completes_and_flush_publishes(tmp_path: Path) -> None:
    """With the site stopped the crew completes unchanged and both receipts wait in the
    outbox (pending, no URL, no error); after a restart `client.flush()` publishes them from
    the stored payload, and the callback's URLs then lead to them."""
    workflow = "wf-crewai-down"
    with LiveSite(workers=2) as site:
        client = client_for(site.url, site.api_key, tmp_path)
        parent = client.record(
            {
                "workflow_id": workflow,
                "phase": "start",
                "subject": {"type": "agent_run", "name": "bee-crew"},
                "idempotency_key": f"{workflow}/crew/start/1",
            }
        )
        assert parent.receipt_status == "published", parent.error
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


def test_the_module_is_the_documented_entry_point() -> None:
    """`receipt_task_callback` returns the callable CrewAI accepts as a task callback."""
    callback = receipt_task_callback(ExplodingClient(), "wf-api")
    assert isinstance(callback, ReceiptTaskCallback) and callable(callback)
    task = Task(description="Say hello.", expected_output="A greeting", callback=callback)
    assert task.callback is callback  # CrewAI's validation takes it as it is
    with pytest.raises(ValueError):
        receipt_task_callback(ExplodingClient(), "")
    assert "receiptsite_client.crewai" in sys.modules


def test_crewai_loaded_in_this_session_runs_no_telemetry_exporter() -> None:
    """CrewAI starts an OpenTelemetry exporter thread (to telemetry.crewai.com) when it is first
    imported with telemetry on; conftest.py turns it off before any module imports crewai, so
    that no test is ever failed by the exporter's background call."""
    import threading

    assert "OtelBatchSpanRecordProcessor" not in [t.name for t in threading.enumerate()]

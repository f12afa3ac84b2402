"""The crew the CrewAI adapter's tests run: real crewai (a ``Crew`` of two ``Agent``s and two
``Task``s) with a local fake model (``FakeLLM``, crewai's own ``BaseLLM`` answering in the ReAct
form its executor parses), and ``crewai_offline``: telemetry off, a guard that refuses and records
every connection or DNS lookup beyond loopback, and a deadline on each test."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from client_helpers import CREWAI_OFFLINE
from crewai import Agent, Crew, Process, Task
from crewai.crews.crew_output import CrewOutput
from crewai.llms.base_llm import BaseLLM
from crewai.tasks.task_output import TaskOutput
from receiptsite_client import Client

# For each test module's pytestmark: CrewAI warns that a stateful callback cannot be
# checkpointed (these tests do not checkpoint), and about its own deprecated internals.
IGNORED_WARNINGS = [
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


def crewai_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[NetworkGuard]:
    """CrewAI's telemetry and tracing off, its storage in the test's directory, the network
    guard on, and a deadline (SIGALRM) on the whole test. For a test module's autouse fixture
    (`yield from crewai_offline(monkeypatch, tmp_path)`)."""
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


def client_for(site_url: str, api_key: str, tmp_path: Path) -> Client:
    return Client(site_url, api_key, tmp_path / "outbox.sqlite3")

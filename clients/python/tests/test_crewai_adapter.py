"""The CrewAI adapter with no site to publish to, driven by crewai itself (a real ``Crew``
run with ``crew.kickoff()``, a local fake model: crewai_helpers): constructing a callback
subscribes to nothing, a receipt that cannot be recorded never changes the crew's result, and the
documents in the outbox carry CrewAI's ids. The network guard these tests rely on is checked
first. The tests against a live site are in test_crewai_adapter_live.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_helpers import CREWAI_OFFLINE, NO_SITE, PYTHON
from crewai import Task
from crewai.events.event_bus import crewai_event_bus
from crewai_helpers import (
    ANSWERS,
    EXPECTED_OUTPUTS,
    IGNORED_WARNINGS,
    SUMMARY,
    NetworkGuard,
    build_crew,
    client_for,
    crewai_offline,
    kickoff,
    outputs,
)
from receiptsite_client.crewai import ReceiptKey, ReceiptTaskCallback, receipt_task_callback

pytestmark = [pytest.mark.unit, *IGNORED_WARNINGS]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[NetworkGuard]:
    """No network beyond loopback, no telemetry, a deadline (crewai_helpers.crewai_offline)."""
    yield from crewai_offline(monkeypatch, tmp_path)




def test_the_network_guard_refuses_the_outside(offline: NetworkGuard) -> None:
    """The guard these tests rely on: a lookup or a connection beyond loopback is refused
    and remembered (then forgotten, so that this test itself passes)."""
    with pytest.raises(OSError):
        socket.create_connection(("telemetry.crewai.com", 443), timeout=2)
    with socket.socket() as sock, pytest.raises(OSError):
        sock.connect(("192.0.2.1", 443))
    assert offline.blocked == ["resolve 'telemetry.crewai.com'", "connect ('192.0.2.1', 443)"]
    offline.blocked.clear()


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
        client = Client({NO_SITE!r}, "rk_test", {str(tmp_path / "outbox.sqlite3")!r})
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
    client = client_for(NO_SITE, "rk_test", tmp_path)
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
    client = client_for(NO_SITE, "rk_test", tmp_path)  # nothing listens there
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

"""Fixtures shared by the client's tests: a live site, an address that never answers, one
that refuses; helpers (a valid document, a scripted HTTP server of our own, reading what the
site stored) are in client_helpers.py.

The client's tests never touch Django: they speak HTTP to a real gunicorn (tests/livesite.py).
Keep this folder without an __init__.py: as a package it would be named `tests` and shadow the
site's.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_helpers import CREWAI_OFFLINE, LiveSite

from tests.livesite import end_run, start_run

os.environ.update(CREWAI_OFFLINE)  # before any test module imports crewai (client_helpers)


@pytest.fixture(scope="module")
def live_site() -> Iterator[LiveSite]:
    """One site for a test module's tests that leave it running."""
    with LiveSite(workers=2) as site:
        yield site


@pytest.fixture
def own_site() -> Iterator[LiveSite]:
    """A site of the test's own, for a test that stops and restarts it."""
    with LiveSite(workers=2) as site:
        yield site


@pytest.fixture
def outbox_path(tmp_path: Path) -> Path:
    return tmp_path / "outbox" / "receipts.sqlite3"


@pytest.fixture
def workflow_id() -> str:
    return f"wf-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def stalled_url() -> Iterator[tuple[str, socket.socket]]:
    """An address that accepts connections (the kernel completes them) and never answers:
    a real network stall. Yields the URL and the listening socket."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", listener
    finally:
        listener.close()


@pytest.fixture
def refused_url() -> str:
    """An address where nothing listens: every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def pytest_configure(config: pytest.Config) -> None:
    start_run(config)  # the folder the run's processes share (tests/livesite.py)


def pytest_unconfigure(config: pytest.Config) -> None:
    end_run(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each of the client's test modules says what it costs: `unit` (no site, no database) or
    `live` (a real gunicorn), never both, so that `-m "not live"` is the fast loop."""
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.path)).resolve().parent != here:
            continue  # the site's tests (tests/conftest.py checks them)
        marks = {m.name for m in item.iter_markers()} & {"unit", "live"}
        if len(marks) != 1:
            raise pytest.UsageError(f"{item.nodeid}: a client test module is marked either "
                                    f"unit or live, not {sorted(marks) or 'neither'}")

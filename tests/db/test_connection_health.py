"""A kept PostgreSQL connection is checked before each request's first query without a round trip
while it is sound (receiptsite/lib/postgresql/base.py), and a connection the server closed is
still found unusable before a request uses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

pytestmark = pytest.mark.db


@pytest.fixture
def server(db: None) -> Iterator[Any]:
    """A second connection to the same server, of the test's own, to watch and act on the
    site's connection from outside it."""
    if connection.vendor != "postgresql":
        pytest.skip("the kept connection's check is PostgreSQL's (run with DATABASE_URL)")
    connection.ensure_connection()
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        yield other


def last_statement(other: Any, pid: int) -> str:
    row = other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return str(row[0]) if row else ""


def test_a_sound_connection_is_usable_without_a_round_trip(server: Any) -> None:
    pid = connection.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT 42")
    assert last_statement(server, pid) == "SELECT 42"
    assert connection.is_usable()
    # Django's own check would have asked the server `SELECT 1`.
    assert last_statement(server, pid) == "SELECT 42"


def test_a_connection_the_server_closed_is_found_unusable(server: Any) -> None:
    pid = connection.connection.info.backend_pid
    # Ended by the server, as by a restart (waiting until that backend is gone).
    ended = server.execute("SELECT pg_terminate_backend(%s, 5000)", [pid]).fetchone()
    assert ended == (True,)
    # Django closes a kept connection found unusable before a request uses it, and opens
    # another (tests/live/test_faults.py restarts a server under a live site).
    assert not connection.is_usable()

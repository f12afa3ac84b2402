"""On SQLite a transaction that BEGIN IMMEDIATE opens first waits for the writer's lock of the
site's backend (receiptsite/lib/sqlite/base.py): a threading.Lock among a process's threads,
an flock(2) of `<database>-writer` among processes. Both wake the next writer when they are
freed; SQLite's busy handler sleeps and is not woken.

What these tests hold, on a database file of their own (the suite's test database is in
memory, where the locks are not taken), through the site's own backend:

- a second writer, in this process or in another one, waits on the writer's lock, not on
  SQLite: with SQLite's own busy timeout set to 0 it still succeeds, after the first commits
  (with SQLite's busy handler alone it fails at once with "database is locked");
- the lock is freed by a rollback and by a connection closed in its transaction;
- a child forked while the lock is held closes its copy of the lock file;
- a writer that waits past the `timeout` gets "database is locked", as SQLite would answer,
  and writes nothing; the file's lock its process got after all is freed, so that another
  process still writes.

The other process is a Python of its own, with the site's backend and nothing else of the
site's. The module is skipped on PostgreSQL, where the backend is not used.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connections, transaction

from receiptsite.lib.sqlite import base
from tests.livesite import PYTHON, REPO, is_postgres, suite_database_url

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(
        is_postgres(suite_database_url()), reason="the SQLite backend's writer lock"
    ),
]

ALIAS = "writers"

OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 5,
    "init_command": "PRAGMA journal_mode=WAL;",
}


@pytest.fixture
def writers(tmp_path: Path, django_db_blocker: Any) -> Iterator[Path]:
    """A database alias on a file of its own, with the site's SQLite options, and a table."""
    name = tmp_path / "writers.sqlite3"
    connections.settings[ALIAS] = connections.configure_settings(
        {
            "default": connections.settings["default"],
            ALIAS: {"ENGINE": "receiptsite.lib.sqlite", "NAME": name, "OPTIONS": dict(OPTIONS)},
        }
    )[ALIAS]
    with django_db_blocker.unblock():
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("CREATE TABLE written (who TEXT)")
        try:
            yield name
        finally:
            connections[ALIAS].close()
            del connections[ALIAS]
            del connections.settings[ALIAS]


def written() -> list[str]:
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT who FROM written ORDER BY rowid")
        return [row[0] for row in cursor.fetchall()]


def write(who: str) -> None:
    with transaction.atomic(using=ALIAS), connections[ALIAS].cursor() as cursor:
        cursor.execute("INSERT INTO written (who) VALUES (%s)", [who])


def without_sqlites_wait() -> None:
    """This thread's connection with SQLite's busy handler off: a BEGIN IMMEDIATE that finds
    the file locked fails at once."""
    db = connections[ALIAS]
    db.ensure_connection()
    db.connection.execute("PRAGMA busy_timeout = 0")


def in_thread(work: Any) -> tuple[threading.Thread, list[BaseException]]:
    """`work` run on a thread of its own (its own connection, closed at the end)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:
            errors.append(error)
        finally:
            connections[ALIAS].close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


OTHER_PROCESS = textwrap.dedent(
    """
    import json, sys
    import django
    from django.conf import settings
    name, who, hold, options = sys.argv[1], sys.argv[2], sys.argv[3] == "hold", sys.argv[4]
    settings.configure(DATABASES={"default": {
        "ENGINE": "receiptsite.lib.sqlite", "NAME": name, "OPTIONS": json.loads(options)}})
    django.setup()
    from django.db import connection, transaction
    connection.ensure_connection()
    connection.connection.execute("PRAGMA busy_timeout = 0")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO written (who) VALUES (%s)", [who])
        print("holding", flush=True)
        if hold:
            sys.stdin.readline()
    print("committed", flush=True)
    """
)


def other_process(name: Path, who: str, *, hold: bool, timeout: float = 5) -> subprocess.Popen[str]:
    """A process of its own that writes `who` through the site's backend, with SQLite's busy
    handler off; with `hold`, it keeps its transaction open until a line on its stdin."""
    import json

    process = subprocess.Popen(
        [PYTHON, "-c", OTHER_PROCESS, str(name), who, "hold" if hold else "go",
         json.dumps({**OPTIONS, "timeout": timeout})],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    if hold:
        assert process.stdout is not None
        assert process.stdout.readline() == "holding\n", process.communicate()
    return process


def test_a_second_writer_of_this_process_waits_on_the_lock_not_on_sqlite(writers: Path) -> None:
    entered = threading.Event()

    def second() -> None:
        without_sqlites_wait()
        entered.set()
        write("second")

    with transaction.atomic(using=ALIAS):
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("INSERT INTO written (who) VALUES ('first')")
        thread, errors = in_thread(second)
        assert entered.wait(5)
        thread.join(0.3)
        assert thread.is_alive()  # waiting for the first writer's commit
    thread.join(5)
    assert errors == []
    assert written() == ["first", "second"]


def test_a_writer_of_another_process_waits_on_the_lock_not_on_sqlite(writers: Path) -> None:
    holder = other_process(writers, "other process", hold=True)
    try:
        def this_process() -> None:
            without_sqlites_wait()
            write("this process")

        thread, errors = in_thread(this_process)
        thread.join(0.3)
        assert thread.is_alive()  # waiting for the other process's commit
        out, err = holder.communicate("\n", timeout=10)
        assert out == "committed\n", err
        thread.join(5)
        assert errors == []
        assert written() == ["other process", "this process"]

        # and the other way round: this process holds, another waits
        with transaction.atomic(using=ALIAS):
            write("this process again")
            waiter = other_process(writers, "another process", hold=False)
            with pytest.raises(subprocess.TimeoutExpired):
                waiter.wait(0.3)
        out, err = waiter.communicate(timeout=10)
        assert (waiter.returncode, out) == (0, "holding\ncommitted\n"), err
        assert written()[-2:] == ["this process again", "another process"]
    finally:
        holder.kill()


def test_a_rollback_and_a_close_free_the_lock(writers: Path) -> None:
    lock = base._writer(str(writers)).threads
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=ALIAS):
        write("rolled back")
        assert lock.locked()
        raise ZeroDivisionError
    assert not lock.locked()

    def left_open() -> None:
        transaction.atomic(using=ALIAS).__enter__()
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("INSERT INTO written (who) VALUES ('never committed')")
        held.append(lock.locked())
        # in_thread closes the connection, in its transaction

    held: list[bool] = []
    thread, errors = in_thread(left_open)
    thread.join(5)
    assert errors == [] and held == [True]
    assert not lock.locked()
    # and the file's lock: another process writes without waiting
    process = other_process(writers, "after", hold=False, timeout=0.5)
    out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert written() == ["after"]


def test_a_writer_past_the_timeout_is_refused_and_writes_nothing(writers: Path) -> None:
    connections.settings[ALIAS]["OPTIONS"]["timeout"] = 0.2
    with transaction.atomic(using=ALIAS):
        write("first")
        thread, errors = in_thread(lambda: write("late"))
        thread.join(5)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert isinstance(errors[0], OperationalError)
    assert "database is locked" in str(errors[0])
    assert written() == ["first"]


def test_a_writer_that_waited_too_long_for_another_process_leaves_no_lock(writers: Path) -> None:
    connections.settings[ALIAS]["OPTIONS"]["timeout"] = 0.2
    holder = other_process(writers, "holder", hold=True)
    try:
        thread, errors = in_thread(lambda: write("late"))
        thread.join(5)
        assert len(errors) == 1 and "database is locked" in str(errors[0])
        out, err = holder.communicate("\n", timeout=10)
        assert out == "committed\n", err
        # This process's waiting thread got the file's lock after the writer gave up, and
        # freed it: a third process writes, waiting half a second at most.
        third = other_process(writers, "third", hold=False, timeout=0.5)
        out, err = third.communicate(timeout=10)
        assert third.returncode == 0, err
        assert written() == ["holder", "third"]
    finally:
        holder.kill()


def test_a_forked_child_does_not_keep_the_parents_lock_file(writers: Path) -> None:
    """A child forked while this process holds the file's lock closes its copy of the file
    (os.register_at_fork): were the parent to die, the lock would not outlive it in the child."""
    with transaction.atomic(using=ALIAS):
        write("parent")
        fd = base._writer(str(writers)).fd
        assert fd >= 0
        read, sent = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            child = os.fork()
        if child == 0:  # the child: only async-signal-safe calls, then out
            try:
                os.fstat(fd)
                os.write(sent, b"open")
            except OSError:
                os.write(sent, b"closed")
            os._exit(0)
        os.close(sent)
        answer = os.read(read, 16)
        os.close(read)
        os.waitpid(child, 0)
    assert answer == b"closed"
    assert written() == ["parent"]

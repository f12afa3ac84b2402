"""Django's SQLite backend, where a transaction that BEGIN IMMEDIATE opens first waits for a
writer's lock that wakes it as soon as the writer before it commits, in this process or in
another one.

SQLite has one writer at a time. A BEGIN IMMEDIATE that finds the file locked is retried by
SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50 and then 100 ms
between tries, and is not woken when the lock is freed: a write that waited once waits until
its next try, however short the writer before it was. Under 16 connections a list's one
write (its audit entry, a millisecond) waited up to a few hundred milliseconds, and its p99
was 3 to 5 times its p50.

So writers queue on two locks, both of which wake the next waiter when they are freed:

- the threads of a process, on a threading.Lock (one per database file);
- the processes (gunicorn's workers, a management command), on an exclusive flock(2) of a
  file beside the database (`<name>-writer`), which the kernel frees when the holder commits,
  rolls back, closes or dies. A lock of the threads alone was tried, and starved the other
  worker, whose writers still slept in SQLite's busy handler while this one's took turns: a
  single post's p99 went from 514 ms to 1.9 s.

flock(2) has no timeout, so a process's thread that finds the file locked does not call it:
a thread of the backend's own (one per process and file) waits in flock(2) for it, and the
writer waits for that thread at most the `timeout` SQLite's busy handler has. Past it the
write fails as SQLite's would, with "database is locked", having written nothing; the lock,
when the waiting thread gets it after all, is freed at once.

An in-memory database (the tests') has no other connection to wait for, and a DEFERRED
transaction (or one without a mode) takes no write lock at BEGIN: neither takes these locks.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from typing import Any

from django.db.backends.sqlite3 import base


class _Writer:
    """The writer's lock of one database file, for this process."""

    def __init__(self, name: str) -> None:
        self.threads = threading.Lock()  # this process's writers
        self.path = f"{name}-writer"
        self.fd = -1
        self._turn = threading.Condition()
        self._wanted = False  # a writer waits for the waiting thread to get the file's lock
        self._granted = False
        self._in_flock = False  # the waiting thread is in flock(2), on this process's fd
        self._waiting: threading.Thread | None = None

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not self.threads.acquire(timeout=timeout):
            return False
        try:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            if self._take_now() or self._wait(max(0.0, deadline - time.monotonic())):
                return True
        except BaseException:
            self.threads.release()
            raise
        self.threads.release()
        return False

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.threads.release()

    def _take_now(self) -> bool:
        """The file's lock, if no other process holds it. Not while the waiting thread is in
        flock(2) on the same fd: it would be granted the lock this takes, and free it."""
        with self._turn:
            if self._in_flock:
                return False
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

    def _wait(self, timeout: float) -> bool:
        with self._turn:
            if self._waiting is None:
                self._waiting = threading.Thread(
                    target=self._wait_in_flock, name=f"sqlite writer {self.path}", daemon=True
                )
                self._waiting.start()
            self._wanted, self._granted = True, False
            self._turn.notify_all()
            if self._turn.wait_for(lambda: self._granted, timeout):
                self._granted = False
                return True
            self._wanted = False  # the waiting thread frees the lock when it gets it
            return False

    def _wait_in_flock(self) -> None:
        while True:
            with self._turn:
                self._turn.wait_for(lambda: self._wanted)
                self._in_flock = True
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # the GIL is released while it waits
            with self._turn:
                self._in_flock = False
                if self._wanted:
                    self._wanted, self._granted = False, True
                    self._turn.notify_all()
                    continue  # the writer frees it (release)
            fcntl.flock(self.fd, fcntl.LOCK_UN)  # the writer gave up meanwhile


_writers: dict[str, _Writer] = {}  # by database file
_writers_lock = threading.Lock()


def _writer(name: str) -> _Writer:
    with _writers_lock:
        writer = _writers.get(name)
        if writer is None:
            writer = _writers[name] = _Writer(name)
        return writer


def _forget_writers() -> None:
    """A forked child has neither the parent's waiting threads nor its locks' state. Its copies
    of the parent's files are closed: a lock the parent holds stays the parent's to free, and
    is not kept held by the child after the parent is gone."""
    global _writers_lock
    for writer in _writers.values():
        if writer.fd >= 0:
            os.close(writer.fd)
    _writers.clear()
    _writers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_writers)


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writer: _Writer | None = None  # the writer's lock, while this connection holds it

    def _start_transaction_under_autocommit(self) -> None:
        mode: str | None = getattr(self, "transaction_mode", None)
        if mode in (None, "DEFERRED") or self.is_in_memory_db():
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
            return
        writer = _writer(str(self.settings_dict["NAME"]))
        if not writer.acquire(float(self.settings_dict["OPTIONS"].get("timeout", 5))):
            with self.wrap_database_errors:
                raise sqlite3.OperationalError("database is locked")
        self.writer = writer
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            self._free_writer()
            raise

    def _free_writer(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.release()

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]
        finally:
            self._free_writer()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]
        finally:
            self._free_writer()

    def _close(self) -> None:
        try:
            super()._close()  # type: ignore[misc]
        finally:
            self._free_writer()

"""Whether a transaction that has just ended is the one that commits."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection, transaction


def once_committed(then: Callable[[], None]) -> None:
    """Call `then` once what was just written is committed: now when no transaction is open,
    else once the outermost one commits (never, if it rolls back). Call it after the storing
    block has ended. The outer transaction is a tenant request's, on PostgreSQL
    (receipts/rowsecurity.py), which writes the request's audit entry before it commits. The
    transaction a test case wraps each test in never commits: inside it, as for Django's
    durable blocks, the blocks within count as outermost."""
    blocks = connection.atomic_blocks
    if blocks and not getattr(blocks[0], "_from_testcase", False):
        transaction.on_commit(then)
    else:
        then()

"""Take withdrawn receipts' erased content out of the database's files (withdrawals.scrub):
a withdrawal only erases; this is run after it, from cron (README, "Withdrawal")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from receiptsite.receipts import rowsecurity
from receiptsite.withdrawal import withdrawals


class Command(BaseCommand):
    help = (
        "Scrub the content of withdrawn receipts from the database's files: on PostgreSQL "
        "VACUUM (INDEX_CLEANUP ON) of the receipts table (run it as the role that owns the "
        "tables), on SQLite a checkpoint that copies the write-ahead log into the database "
        "file and empties it. Exits 0 when done, 1 when it could not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--wait",
            type=float,
            default=10.0,
            metavar="SECONDS",
            help="SQLite: how long to wait for readers still using the write-ahead log "
            "(default 10)",
        )

    def handle(self, *args: Any, wait: float = 10.0, **options: Any) -> None:
        # PostgreSQL skips, with a mere warning, a VACUUM of a table the role does not own:
        # as the site role this would say "OK" having scrubbed nothing. Exit 2, first.
        rowsecurity.refuse_hidden_rows(
            "scrubwithdrawn", "it would scrub nothing (PostgreSQL vacuums a table for its owner)"
        )
        try:
            done = withdrawals.scrub(wait)
        except DatabaseError as error:
            raise CommandError(f"could not scrub the withdrawn content: {error}") from error
        self.stdout.write(f"OK: {done}")

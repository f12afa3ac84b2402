"""The check of the withdrawals' record: every withdrawal as it was stated, and in the chain
where it was stated (withdrawal/statements.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from receiptsite.receipts import rowsecurity
from receiptsite.withdrawal import statements


class Command(BaseCommand):
    help = (
        "Verify the withdrawals' signed statements: each statement's bytes, its signature, "
        "its place in the chain, and that the withdrawal and its receipt still say what it "
        "says. Names the first withdrawal that does not check out; exits 0 when the record is "
        "sound, 1 when it is not, 2 when run as a role that row-level security hides rows "
        "from (run it as the tables' owner)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--head",
            metavar="STATEMENT_HASH",
            help="a statement hash noted earlier (a head this command printed): it must still "
            "be in the chain, which shows that no statement after it was cut off the end",
        )

    def handle(self, *args: Any, head: str | None = None, **options: Any) -> None:
        rowsecurity.refuse_hidden_rows("checkwithdrawals")  # the wrong role: exit 2, first
        record = statements.check()
        problems = [str(finding) for finding in record.findings]
        if head is not None and head.strip().lower() not in record.hashes:
            problems.append(
                f"the chain holds no statement with the hash {head}: statements were removed "
                "from its end, or the hash is not one of this site's"
            )
        if problems:
            raise CommandError(
                "the withdrawals' statements do not check out; the first bad one is listed "
                "first:\n- " + "\n- ".join(problems)
            )
        self.stdout.write(f"OK: {record.summary()}")
        if record.by_migration:
            self.stdout.write(
                f"{record.by_migration} of them predate the statements: migration 0015 stated "
                "them as they stood when it ran."
            )

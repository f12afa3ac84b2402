"""The auditors' check of their own record: every review decision as it was signed, and in
the chain where it was signed (review/chain.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from receiptsite.receipts import rowsecurity
from receiptsite.review import chain as decisions


class Command(BaseCommand):
    help = (
        "Verify the record of review decisions: each decision's signed document, its "
        "signature and its place in the chain. Names the first decision that was changed, "
        "removed or reordered; exits 0 when the record is sound, 1 when it is not, 2 when run "
        "as a role that row-level security hides rows from (run it as the tables' owner)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--head",
            metavar="DECISION_HASH",
            help="a decision hash noted earlier (a head this command printed, or the last "
            "row of an export): it must still be in the record, which shows that no decision "
            "after it was cut off the end",
        )

    def handle(self, *args: Any, head: str | None = None, **options: Any) -> None:
        rowsecurity.refuse_hidden_rows("checkdecisions")  # the wrong role: exit 2, first
        record = decisions.check()
        problems = [str(finding) for finding in record.findings]
        if head is not None and not any(
            link.decision_hash == head.strip().lower() for link in record.links.values()
        ):
            problems.append(
                f"the record holds no decision with the hash {head}: decisions were removed "
                "from its end, or the hash is not one of this site's"
            )
        if problems:
            raise CommandError(
                "the record of review decisions does not check out; the first bad decision "
                "is listed first:\n- " + "\n- ".join(problems)
            )
        self.stdout.write(f"OK: {record.summary()}")
        if record.by_migration:
            self.stdout.write(
                f"{record.by_migration} of them predate the chain: migration 0011 chained them "
                "as they stood when it ran."
            )

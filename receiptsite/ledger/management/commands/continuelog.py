"""End the log that lost signed trees, with a signed statement, and continue it under a new
origin: the recovery when a restore lost receipts (README, "Backups and recovery").

The site refuses to sign a tree that does not extend the largest one it signed (the rollback
guard). When the receipts of those trees are really gone, going back to signing the smaller
tree under the same name would contradict what was signed; this command says so instead, as
Certificate Transparency's shards and Rekor's yearly logs end one log and start another. The
statement (integrity/continuation.py) names the ended log, the largest tree it signed, the
stored tree kept and the new origin; it is published in the keys document's `log.ended`, on
`/healthz`, and checked by `receipt-checklog` and `checklog --against` for a checkpoint kept
from the ended log. Run it as the database's owner, once, on one host; the other hosts follow
by themselves (they read the statement from the database).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from receiptsite.integrity import note
from receiptsite.ledger import keyring, log
from receiptsite.problems import Problem
from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import SigningKey


class Command(BaseCommand):
    help = (
        "After a restore that lost receipts (the site refuses to sign: the stored log does not "
        "extend the largest tree it signed): end the log with a signed statement of that tree "
        "and of the stored tree it keeps, and continue under a new origin. Never a silent "
        "reset: the statement is published in the keys document and on /healthz."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--origin",
            help="the new log's origin (default: the old one followed by /2, or the next number)",
        )
        parser.add_argument(
            "--checkpoint",
            action="append",
            default=[],
            metavar="FILE",
            help="a checkpoint this site signed that it may not remember (a monitor's or a "
            "witness's saved copy): the statement accounts for it too; may be repeated",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # The wrong role (the site's may not write the end of a log): exit 2, first.
        rowsecurity.refuse_hidden_rows("continuelog", "it may not write the end of a log")
        signed = [self.checkpoint(path) for path in options["checkpoint"]]
        try:
            keyring.check_usable()
            statement = log.continue_as(options["origin"], signed)
        except (Problem, keyring.CannotSign) as error:
            raise CommandError(error.detail) from None
        except ValueError as error:
            raise CommandError(f"continuelog: {error}") from None
        lost = (
            f"{statement.lost} leaves it had signed are lost"
            if statement.lost
            else "its tree of that size is not the one signed (the log was rewritten)"
        )
        self.stdout.write(
            f"The log {statement.ended} ended: it had signed {statement.signed_size} leaves; "
            f"the stored tree of {statement.kept_size} leaves is kept, and {lost}.\n"
            f"The log continues as {statement.continues_as}, from that tree; the statement is "
            "in the keys document (log.ended). Tell the witnesses and monitors of the new log."
        )

    def checkpoint(self, path: str) -> log.Head:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"--checkpoint {path}: cannot read it ({error})") from None
        text = text if text.endswith("\n") else text + "\n"  # a copy without its last newline
        try:
            origin, _, _ = note.parse_checkpoint(text.partition("\n\n")[0] + "\n")
        except ValueError as error:
            raise CommandError(f"--checkpoint {path}: not a checkpoint ({error})") from None
        keys = [
            note.verifier_key(origin, bytes(key.public_key))
            for key in SigningKey.objects.exclude(status=SigningKey.COMPROMISED)
        ]
        body = note.verify_note(text, keys)
        if body is None:
            raise CommandError(
                f"--checkpoint {path}: not a checkpoint signed by one of this site's keys "
                "that is not compromised"
            )
        origin, size, root = note.parse_checkpoint(body)
        return log.Head(origin=origin, size=size, root=root)

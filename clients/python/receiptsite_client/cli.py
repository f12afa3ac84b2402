"""`receipt-outbox`: publish, list or hand off what an outbox holds.

    RECEIPTSITE_API_KEY=rk_... receipt-outbox flush --outbox receipts.sqlite3 --site URL
    receipt-outbox list --outbox receipts.sqlite3 [--workflow ID]
    receipt-outbox handoff --outbox receipts.sqlite3 --workflow ID

`flush` prints one line per entry it tried (status, idempotency key, then the receipt's link
or the problem) and exits 0 when nothing is left pending in the outbox, 1 otherwise, 2 when it
could not start (no key, no outbox).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from receiptsite_client.client import Client
from receiptsite_client.outbox import PENDING, Entry, Outbox

KEY_VARIABLE = "RECEIPTSITE_API_KEY"


def _line(entry: Entry) -> str:
    where = entry.url if entry.receipt_status == "published" else entry.error or ""
    return f"{entry.receipt_status:<9} {entry.idempotency_key} {where}".rstrip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="receipt-outbox", description="Publish, list or hand off an outbox's receipts."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    flush = commands.add_parser(
        "flush", help=f"publish every pending entry (the API key from ${KEY_VARIABLE})"
    )
    flush.add_argument("--outbox", required=True, type=Path, help="the outbox's SQLite file")
    flush.add_argument("--site", required=True, help="the site's base URL")
    flush.add_argument(
        "--deadline", type=float, default=60.0, help="seconds to keep trying (default 60)"
    )
    listing = commands.add_parser("list", help="one line per entry, oldest first")
    listing.add_argument("--outbox", required=True, type=Path)
    listing.add_argument("--workflow", help="only this workflow's entries")
    handoff = commands.add_parser("handoff", help="a workflow's hand-off blocks")
    handoff.add_argument("--outbox", required=True, type=Path)
    handoff.add_argument("--workflow", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.outbox.is_file():
        print(f"receipt-outbox: no outbox at {args.outbox}", file=sys.stderr)
        return 2
    if args.command == "list":
        for entry in Outbox(args.outbox).entries(args.workflow):
            print(_line(entry))
        return 0
    if args.command == "handoff":
        # Reading needs neither the site nor the key: the blocks come from the outbox alone.
        client = Client("http://localhost", "", args.outbox)
        print(client.handoff(args.workflow), end="")
        return 0
    key = os.environ.get(KEY_VARIABLE, "")
    if not key:
        print(f"receipt-outbox: set {KEY_VARIABLE} to the site's API key", file=sys.stderr)
        return 2
    try:
        client = Client(args.site, key, args.outbox, flush_deadline=args.deadline)
    except ValueError as error:
        print(f"receipt-outbox: {error}", file=sys.stderr)
        return 2
    for entry in client.flush():
        print(_line(entry))
    left = [entry for entry in client.entries() if entry.receipt_status == PENDING]
    if left:
        print(
            f"receipt-outbox: {len(left)} entr{'y' if len(left) == 1 else 'ies'} still pending",
            file=sys.stderr,
        )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())

"""`receipt-verify TARGET [--key KEY] [--policy FILE] [--json]`: the command (argparse, the
plain-words rendering of a Result, the exit status: 0 valid, 1 invalid, 2 could not check).

--policy FILE is a c2sp.org/tlog-policy file (the keys document's `log.witness_policy` is the
site's own). Its `log` lines are trusted keys, for the receipt's signature as for the
checkpoints' (the site signs both with one key), so a policy alone pins the site and a saved
file checked with it is checked for its signer; its witnesses' quorum must have cosigned a
checkpoint that includes the receipt (the `witnesses` check). Given --key too, only keys both
trust count; none in common is "could not check". Without --policy, the witnesses the site
names are reported in a note, not checked."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from receiptsite_client.verify.result import FAIL, INVALID, PASS, UNCHECKED, VALID, Result
from receiptsite_client.verify.targets import DEFAULT_TIMEOUT, verify_target

_WORDS = {PASS: "pass", FAIL: "FAIL", UNCHECKED: "could not check"}


def render(result: Result) -> str:
    lines = []
    if result.receipt_id:
        lines.append(f"Receipt {result.receipt_id}")
    for check in result.checks:
        lines.append(f"{_WORDS[check.result]:>15}  {check.name}: {check.detail}")
    lines.extend(f"Note: {note}" for note in result.notes)
    status = result.status
    if status == VALID:
        lines.append("Verdict: VALID. Every check passed.")
    elif status == INVALID:
        lines.append(f"Verdict: INVALID. Failed: {', '.join(result.failed())}.")
    else:
        unchecked = [c.name for c in result.checks if c.result == UNCHECKED]
        lines.append(
            f"Verdict: COULD NOT CHECK ({', '.join(unchecked) or 'nothing'}); "
            "nothing failed, but not everything could be checked."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="receipt-verify",
        description="Check a receipt (its bytes, hash, signature, inclusion proof, signed "
        "checkpoint and, with --policy, the witnesses' cosignatures) without trusting the "
        "site. Exit 0 valid, 1 invalid, 2 could not check.",
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="a /run/<id> URL, a verify URL, a saved verification JSON or a bundle",
    )
    parser.add_argument(
        "--key",
        metavar="KEY",
        help="a keys document file or a base64url Ed25519 public key to trust; a saved file "
        "without one (or --policy) is not checked for its signer (exit 2). For a URL, the "
        "default is the key the site publishes, which is not independent. A key that begins "
        "with '-' is given as --key=KEY",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="a c2sp.org/tlog-policy file (the keys document's log.witness_policy is the "
        "site's): its log keys are trusted for the receipt and its checkpoints, as a pinned "
        "key is, and its quorum of witnesses must have cosigned a checkpoint that includes the "
        "receipt (the witnesses check; a receipt not witnessed yet is exit 2). With --key as "
        "well, only keys both trust count (none in common: exit 2). Without it, the witnesses "
        "are reported, not checked",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per HTTP request (default %(default)s)",
    )
    args = parser.parse_args(argv)
    result = verify_target(args.target, args.key, args.timeout, args.policy)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False, indent=2))
        for note in result.notes:
            print(f"Note: {note}", file=sys.stderr)
    else:
        print(render(result))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())

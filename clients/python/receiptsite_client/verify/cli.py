"""`receipt-verify TARGET [--key KEY] [--json]`: the command (argparse, the plain-words
rendering of a Result, the exit status: 0 valid, 1 invalid, 2 could not check)."""

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
        description="Check a receipt (its bytes, hash, signature, inclusion proof and signed "
        "checkpoint) without trusting the site. Exit 0 valid, 1 invalid, 2 could "
        "not check.",
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
        "without one is not checked for its signer (exit 2). For a URL, the default is the "
        "key the site publishes, which is not independent. A key that begins with '-' is "
        "given as --key=KEY",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per HTTP request (default %(default)s)",
    )
    args = parser.parse_args(argv)
    result = verify_target(args.target, args.key, args.timeout)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False, indent=2))
        for note in result.notes:
            print(f"Note: {note}", file=sys.stderr)
    else:
        print(render(result))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())

"""The "check it yourself" commands the receipt page offers: checks that run on the reader's
own computer, with tools that are not the site's, so that they are independent of it.

- The hash, for where the reviewer is: each prints the SHA-256 of the receipt's stored bytes
  (lowercase hex) from its verification JSON, with the tools that system has: GNU coreutils
  on Linux; `base64 -D` and `shasum -a 256` on macOS (no `sha256sum`, and older releases'
  `base64` has no `-d`); PowerShell on Windows (`Invoke-RestMethod` reads the JSON,
  `Get-FileHash` hashes the bytes).
- The signature, with OpenSSL 3, against the key the keys document publishes under the
  signature's key id, which the command names (pinned: a key swapped in later under another
  id is not taken); it prints `Signature Verified Successfully`.
- `receipt-verify` (receiptsite-client, from the repository's clients/python), with that key's
  base64url `x` given as `--key=<x>`: an `x` may begin with "-", which a command line would
  read as an option if it stood alone.

tests/live/test_bundle.py runs the hash commands (the macOS one with the tools that are
installed), tests/live/test_check_commands.py the signature's and receipt-verify's, each
exactly as the page shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy

# What each command prints when the receipt checks out (the page says so beside it).
SIGNATURE_PRINTS = "Signature Verified Successfully"
RECEIPT_VERIFY_PRINTS = "Verdict: VALID. Every check passed."
# How to install receipt-verify: it is the repository's own distribution, not published.
INSTALL_COMMAND = "pip install ./clients/python"


@dataclass(frozen=True)
class Command:
    system: str  # "linux", "macos", "windows"
    label: str | Promise
    text: str


def _quoted_for_powershell(url: str) -> str:
    # A single-quoted PowerShell string is literal; a quote inside is doubled.
    return "'" + url.replace("'", "''") + "'"


def _quoted_for_shell(text: str) -> str:
    # A single-quoted POSIX shell word is literal; a quote inside ends it, is escaped, resumes.
    return "'" + text.replace("'", "'\\''") + "'"


def hash_commands(verify_url: str) -> list[Command]:
    return [
        Command(
            "linux",
            gettext_lazy("On Linux (GNU coreutils)"),
            f"curl -s {verify_url} | jq -r .canonical_bytes | base64 -d | sha256sum",
        ),
        Command(
            "macos",
            gettext_lazy("On macOS"),
            f"curl -s {verify_url} | jq -r .canonical_bytes | base64 -D | shasum -a 256",
        ),
        Command(
            "windows",
            gettext_lazy("On Windows (PowerShell)"),
            f"$r = Invoke-RestMethod {_quoted_for_powershell(verify_url)}; "
            "(Get-FileHash -Algorithm SHA256 -InputStream ([IO.MemoryStream]::new("
            "[Convert]::FromBase64String($r.canonical_bytes)))).Hash.ToLower()",
        ),
    ]


def signature_command(verify_url: str, keys_url: str, kid: str) -> str:
    """The bytes and their signature from the verification JSON, the key from the keys
    document by the key id the page names, and OpenSSL 3 to verify (as README's)."""
    select = _quoted_for_shell(f'.keys[] | select(.kid == "{kid}") | .pem')
    return (
        f"curl -s {verify_url} > verify.json\n"
        "jq -r .canonical_bytes verify.json | base64 -d > receipt.json\n"
        "jq -r .signature.value verify.json | base64 -d > receipt.sig\n"
        f"curl -s {keys_url} | jq -r {select} > key.pem\n"
        "openssl pkeyutl -verify -pubin -inkey key.pem -rawin -in receipt.json "
        "-sigfile receipt.sig"
    )


def receipt_verify_command(page_url: str, x: str) -> str:
    """receipt-verify on the receipt's link, trusting only the key `x` (base64url)."""
    return f"receipt-verify {page_url} --key={x}"


def bundle_command(bundle_file: str, x: str) -> str:
    """Checking the downloaded bundle offline, with the key the page names (or one the
    reviewer got elsewhere)."""
    return f"receipt-verify {bundle_file} --key={x}"


def withdrawn_copy_commands(verify_url: str, keys_url: str) -> list[tuple[str | Promise, str]]:
    """How whoever kept a copy of a withdrawn receipt's bytes (`receipt.json`) checks it
    against what the site kept: its SHA-256 is the kept output hash, the kept signature
    verifies over it, and its leaf hash (SHA-256 of 0x00 and the bytes, base64) is the one
    the log keeps. The site's 410 verification answer holds all three."""
    select = _quoted_for_shell(".keys[] | select(.kid == $kid) | .pem")
    return [
        (gettext_lazy("Its fingerprint: this prints the kept output hash."),
         "sha256sum receipt.json"),
        (gettext_lazy("Its signature: this prints “Signature Verified Successfully”."),
         f"curl -s {verify_url} > withdrawn.json\n"
         "jq -r .signature.value withdrawn.json | base64 -d > receipt.sig\n"
         f"curl -s {keys_url} | jq -r --arg kid \"$(jq -r .signature.key_id withdrawn.json)\" "
         f"{select} > key.pem\n"
         "openssl pkeyutl -verify -pubin -inkey key.pem -rawin -in receipt.json "
         "-sigfile receipt.sig"),
        (gettext_lazy("Its place in the log: this prints the kept leaf hash."),
         "(printf '\\000'; cat receipt.json) | openssl dgst -sha256 -binary | base64"),
    ]

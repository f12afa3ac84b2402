"""The "check it yourself" commands the receipt page offers, for where the reviewer is.

Each prints the SHA-256 of the receipt's stored bytes (lowercase hex) from its verification
JSON, with the tools that system has: GNU coreutils on Linux; `base64 -D` and `shasum -a 256`
on macOS (no `sha256sum`, and older releases' `base64` has no `-d`); PowerShell on Windows
(`Invoke-RestMethod` reads the JSON, `Get-FileHash` hashes the bytes). tests/live/test_bundle.py
runs the Linux one and the macOS one's tools where they are installed.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy


@dataclass(frozen=True)
class Command:
    system: str  # "linux", "macos", "windows"
    label: str | Promise
    text: str


def _quoted_for_powershell(url: str) -> str:
    # A single-quoted PowerShell string is literal; a quote inside is doubled.
    return "'" + url.replace("'", "''") + "'"


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


def bundle_command(bundle_file: str) -> str:
    """Checking the downloaded bundle offline, with a key the reviewer got elsewhere."""
    return f"receipt-verify {bundle_file} --key KEY"

"""The conformance vectors (vectors/, listed in vectors/manifest.json) and receipt-verify, the
installed command, run as a user runs it (a subprocess)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from receiptsite_client.verify import BUNDLE_CHECK_NAMES, CHECK_NAMES

REPO = Path(__file__).resolve().parents[3]
VECTORS = REPO / "vectors"
CLI = REPO / ".venv" / "bin" / "receipt-verify"
PYTHON = REPO / ".venv" / "bin" / "python"
MANIFEST: dict[str, Any] = json.loads((VECTORS / "manifest.json").read_text("utf-8"))
EXIT = {"valid": 0, "invalid": 1, "could_not_check": 2}
# The checks made without --policy: `witnesses` is made only with one.
WITHOUT_POLICY = [name for name in CHECK_NAMES if name != "witnesses"]
BUNDLE_WITHOUT_POLICY = [name for name in BUNDLE_CHECK_NAMES if name != "witnesses"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout)


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text("utf-8"))


def fresh_x() -> str:
    raw = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

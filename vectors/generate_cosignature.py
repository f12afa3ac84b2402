"""Write vectors/cosignature.json: witness cosignatures (c2sp.org/tlog-cosignature,
`cosignature/v1`, Ed25519), for testing any implementation byte for byte.

    .venv/bin/python vectors/generate_cosignature.py

Two parts:

- `specification`: the example of the C2SP text itself (tlog-cosignature.md, "Format" and
  "Ed25519 signed message"), copied as data: the cosigned checkpoint, the signed message for
  its timestamp, and the example's cosignature line, whose key id and timestamp an
  implementation must read back. The specification does not give the example's public key,
  so its signature cannot be verified; its message and its layout can.
- `signed`: a cosignature made here with a fixed key (its 32-byte seed is in the file), so that
  the whole line, verifier key and key id are known answers. Ed25519 is deterministic: the file
  is the same on every run, and tests/unit/integrity/test_cosignature.py checks that it is.

Uses the site's integrity code (receiptsite/integrity/cosignature.py); the client's verifier,
which shares no code with it, is tested against the same file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from receiptsite.integrity import cosignature, note  # noqa: E402
from receiptsite.integrity.keys import public_raw  # noqa: E402

OUT = Path(__file__).resolve().parent / "cosignature.json"

# The example of c2sp.org/tlog-cosignature (C2SP/C2SP, tlog-cosignature.md).
SPEC_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_TIMESTAMP = 1679315147
SPEC_MESSAGE = (
    "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)
SPEC_LOG_LINE = (
    "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5"
    "/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8="
)
SPEC_LINE = (
    "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dl"
    "rDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
)

SEED = bytes(range(32))  # a fixed key, for known answers; never a key anyone uses
NAME = "witness.test.example/w1"
BODY = "receipts.example.org/receipts\n5\n" "8+M6Bx3K0vRz1ExMx7sDFkWEaW5sTfz3zxJy5O6Gk4w=\n"
TIMESTAMP = 1796256000  # 2026-12-03T00:00:00Z


def vectors() -> dict[str, Any]:
    key = Ed25519PrivateKey.from_private_bytes(SEED)
    raw = public_raw(key)
    line = cosignature.cosign(BODY, NAME, key, TIMESTAMP)
    return {
        "format": "cosignature-vectors/v1",
        "specification": {
            "source": "https://c2sp.org/tlog-cosignature (tlog-cosignature.md, the example)",
            "checkpoint_body": SPEC_BODY,
            "timestamp": SPEC_TIMESTAMP,
            "message": SPEC_MESSAGE,
            "note": SPEC_BODY + "\n" + SPEC_LOG_LINE + "\n" + SPEC_LINE + "\n",
            "line": SPEC_LINE,
            "name": "witness.example.com/w1",
            "key_id": "8d66cf3f",
        },
        "signed": {
            "private_key_seed": SEED.hex(),
            "public_key": raw.hex(),
            "name": NAME,
            "vkey": cosignature.witness_vkey(NAME, raw),
            "key_id": note.key_id(NAME, raw, cosignature.COSIGNATURE_TYPE).hex(),
            "checkpoint_body": BODY,
            "timestamp": TIMESTAMP,
            "message": cosignature.message(BODY, TIMESTAMP).decode("utf-8"),
            "line": line,
        },
    }


def render() -> str:
    return json.dumps(vectors(), ensure_ascii=False, indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")

"""receipt-verify on offline bundles (`GET /run/<id>/bundle.json`), with no network.

The bundle vectors (vectors/bundles/, listed in vectors/manifest.json under "bundles"), each
checked with its keys pinned, by the installed command and by the library; the tlog-proof
reader against the format's published examples and corrupted variants of them. The site's own
bundle route is driven end to end in tests/live/test_bundle.py. Without a pinned key a saved
bundle is never valid, even one forged whole with a fresh key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from receiptsite_client.verify import b64url, jcs, jwk_thumbprint, leaf_hash, note_key_id
from receiptsite_client.verify.bundle import BUNDLE_CHECK_NAMES, verify_bundle
from receiptsite_client.verify.tlogproof import TlogProof, parse_tlog_proof
from vector_helpers import BUNDLE_WITHOUT_POLICY, EXIT, MANIFEST, VECTORS, load, run

pytestmark = pytest.mark.unit


BUNDLES: list[dict[str, Any]] = MANIFEST["bundles"]


# --- the vectors ---------------------------------------------------------------------------


def test_the_manifest_names_the_bundle_checks() -> None:
    """The vectors are checked without a policy, so with every check but `witnesses`."""
    assert [n for n in MANIFEST["bundle_checks"] if n != "witnesses"] == BUNDLE_WITHOUT_POLICY
    assert BUNDLE_CHECK_NAMES[-3:] == ("checkpoint_signature", "witnesses", "tlog_proof")
    assert {e["expected"] for e in BUNDLES} == {"valid", "invalid"}


@pytest.mark.parametrize("entry", BUNDLES, ids=[e["name"] for e in BUNDLES])
def test_the_command_reaches_each_bundle_verdict(entry: dict[str, Any]) -> None:
    done = run(str(VECTORS / entry["file"]), "--key", str(VECTORS / entry["keys"]), "--json")
    assert done.returncode == EXIT[entry["expected"]], done.stdout + done.stderr
    checks = json.loads(done.stdout)["checks"]
    assert [c["name"] for c in checks] == BUNDLE_WITHOUT_POLICY
    failed = [c["name"] for c in checks if c["result"] == "fail"]
    assert sorted(failed) == sorted(entry["fails"]), entry["changed"]
    assert all(c["result"] == "pass" for c in checks if c["name"] not in failed)


@pytest.mark.parametrize("entry", BUNDLES, ids=[e["name"] for e in BUNDLES])
def test_the_library_reaches_each_bundle_verdict(entry: dict[str, Any]) -> None:
    result = verify_bundle(load(entry["file"]), load(entry["keys"]), None)
    assert result.status == entry["expected"]
    assert sorted(result.failed()) == sorted(entry["fails"]), entry["changed"]


def test_a_pinned_bare_key_checks_a_bundle_it_signed() -> None:
    """`linked` and the final checkpoint are the second key's: that key alone, as a base64url
    x, is enough; the first key is not (nor are the bundle's own keys, once a key is given)."""
    first, second = (k["x"] for k in load("keys.json")["keys"])
    linked = str(VECTORS / "bundles/valid/linked.json")
    assert run(linked, f"--key={second}").returncode == 0
    done = run(linked, f"--key={first}", "--json")
    assert done.returncode == 1
    failed = [c["name"] for c in json.loads(done.stdout)["checks"] if c["result"] == "fail"]
    assert failed == ["signature", "checkpoint_signature", "tlog_proof"]


def test_without_a_key_a_saved_bundle_says_its_signer_was_not_checked() -> None:
    done = run(str(VECTORS / "bundles/valid/plain.json"))
    assert done.returncode == 2, done.stdout
    assert "The signer was not checked" in done.stdout
    assert " tlog_proof: " in done.stdout
    assert "taken from the site" not in done.stdout


def _forged_bundle(forger: Ed25519PrivateKey) -> dict[str, Any]:
    """A bundle made from scratch with the forger's own key: a receipt saying what the forger
    likes, signed by that key, alone in a log whose checkpoint that key signs, and a keys
    document inside naming that key. Everything in it agrees with everything else."""
    raw = forger.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    x = b64url(raw)
    real = load("bundles/valid/plain.json")
    document = json.loads(base64.b64decode(real["verification"]["canonical_bytes"]))
    document["result"] = "All checks passed; nothing to review."
    data = jcs(document).encode("utf-8")
    origin = real["verification"]["log"]["origin"]
    root = b64(leaf_hash(data))
    text = f"{origin}\n1\n{root}\n"
    line = b64(note_key_id(origin, raw) + forger.sign(text.encode("utf-8")))
    checkpoint = f"{text}\n\u2014 {origin} {line}\n"
    verification = {
        **real["verification"],
        "output_hash": hashlib.sha256(data).hexdigest(),
        "canonical_bytes": b64(data),
        "byte_length": len(data),
        "signature": {
            **real["verification"]["signature"],
            "key_id": jwk_thumbprint(raw),
            "value": b64(forger.sign(data)),
        },
        "log": {
            "origin": origin,
            "index": 0,
            "tree_size": 1,
            "root_hash": root,
            "inclusion_proof": [],
            "checkpoint": checkpoint,
        },
    }
    key = {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": jwk_thumbprint(raw), "status": "active"}
    return {
        "bundle": "receipt-bundle/v1",
        "verification": verification,
        "keys": {"keys": [key], "log": {"origin": origin}},
        "tlog_proof": f"c2sp.org/tlog-proof@v1\nindex 0\n\n{checkpoint}",
    }


def test_a_bundle_forged_with_a_fresh_key_is_never_valid_without_a_pinned_key(
    tmp_path: Path,
) -> None:
    forger = Ed25519PrivateKey.generate()
    path = tmp_path / "receipt.bundle.json"
    path.write_text(json.dumps(_forged_bundle(forger)))

    done = run(str(path))
    assert done.returncode == 2, done.stdout
    assert "The signer was not checked" in done.stdout
    assert "VALID" not in done.stdout
    assert "from the site" not in done.stdout
    listed = run(str(path), "--json")
    assert listed.returncode == 2
    results = {c["name"]: c["result"] for c in json.loads(listed.stdout)["checks"]}
    assert results["signature"] == results["checkpoint_signature"] == "could_not_check"
    assert results["tlog_proof"] == "could_not_check"
    assert "signer was not checked" in listed.stderr

    # Pinned, it is checked as ever: the site's keys refuse it; the forger's own key, pinned
    # on purpose, finds it consistent (which is all a forger's key can say).
    assert run(str(path), "--key", str(VECTORS / "keys.json")).returncode == 1
    forger_x = b64url(
        forger.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
    )
    assert run(str(path), f"--key={forger_x}").returncode == 0


def test_agreeing_is_not_enough_the_tlog_proof_must_prove() -> None:
    """`both-proofs-bad`: the tlog proof agrees with the log part, and both are wrong."""
    result = verify_bundle(
        load("bundles/invalid/plain--both-proofs-bad.json"), load("keys.json"), None
    )
    check = result.check("tlog_proof")
    assert check is not None and check.result == "fail"
    assert "does not lead from the receipt's leaf hash" in check.detail
    assert "agree" not in check.detail


def test_a_bundle_of_an_unknown_format_could_not_be_checked(tmp_path: Path) -> None:
    bundle = load("bundles/valid/plain.json")
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps({**bundle, "bundle": "receipt-bundle/v9"}))
    assert run(str(path), "--key", str(VECTORS / "keys.json")).returncode == 2


# --- the tlog-proof reader -----------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


H1 = hashlib.sha256(b"hash1").digest()
H2 = hashlib.sha256(b"hash2").digest()
EXTRA = b"extra information"
# The examples of the format's Go implementation (filippo.io/torchwood), as its TypeScript
# port states them.
PUBLISHED = {
    f"c2sp.org/tlog-proof@v1\nindex 5\n{b64(H1)}\n{b64(H2)}\n\ntest checkpoint\n":
        TlogProof(5, [H1, H2], "test checkpoint\n", None),
    f"c2sp.org/tlog-proof@v1\nextra {b64(EXTRA)}\nindex 10\n{b64(H1)}\n\ncheckpoint data\n":
        TlogProof(10, [H1], "checkpoint data\n", EXTRA),
    "c2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint\n": TlogProof(0, [], "checkpoint\n", None),
}  # fmt: skip


@pytest.mark.parametrize("text", PUBLISHED)
def test_the_reader_reads_the_published_examples(text: str) -> None:
    assert parse_tlog_proof(text) == PUBLISHED[text]


VALID = next(iter(PUBLISHED))
CORRUPTED = {
    "not text": None,
    "not a proof": "not a proof at all",
    "the header alone": "c2sp.org/tlog-proof@v1\n",
    "another version": VALID.replace("@v1", "@v2"),
    "an index that is no number": VALID.replace("index 5", "index five"),
    "an index with a leading zero": VALID.replace("index 5", "index 05"),
    "an index with a plus": VALID.replace("index 5", "index +5"),
    "no index line": VALID.replace("index 5\n", ""),
    "extra that is no base64": VALID.replace("index 5", "extra !!notbase64!!\nindex 5"),
    "a short hash": VALID.replace(b64(H1), b64(H1[:31])),
    "a hash with a stray character": VALID.replace(b64(H1), " " + b64(H1)),
    "no blank line": VALID.replace("\n\n", "\n"),
    "no checkpoint": VALID.split("\n\n")[0] + "\n\n",
    "too many hashes": VALID.replace(f"{b64(H1)}\n", f"{b64(H1)}\n" * 65),
}


@pytest.mark.parametrize("text", CORRUPTED.values(), ids=CORRUPTED.keys())
def test_the_reader_refuses_a_corrupted_text(text: str | None) -> None:
    with pytest.raises(ValueError):
        parse_tlog_proof(text)

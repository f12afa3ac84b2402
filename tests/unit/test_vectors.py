"""The conformance vectors (vectors/) against the site's own integrity functions.

Every vector, checked with receiptsite.integrity alone (canonical.is_canonical, sha256_hex,
keys.verify_signature and jwk_thumbprint, merkle.verify_inclusion, note.verify_note and
parse_checkpoint), fails exactly the checks that vectors/manifest.json names, so the site,
receipt-verify (clients/python/tests/test_verify.py) and the page's own verifier
(tests/browser/test_browser_vectors.py) are held to one set of answers. The manifest must also be
complete: every file in vectors/ listed, every listed file present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from receiptsite.integrity import canonical, keys, merkle, note, tlogproof
from receiptsite.integrity.encoding import b64, b64decode, b64url_decode

pytestmark = pytest.mark.unit

VECTORS = Path(__file__).resolve().parents[2] / "vectors"

CHECK_NAMES = (
    "canonical_form",
    "hash",
    "receipt_id",
    "signature",
    "log_inclusion",
    "checkpoint",
    "checkpoint_signature",
)


def _listed(document: dict[str, Any]) -> list[tuple[bytes, str, str]]:
    """(raw key, kid, status) of each listed key whose kid is its RFC 7638 thumbprint."""
    found = []
    for key in document.get("keys", []):
        raw = b64url_decode(key["x"])
        if keys.jwk_thumbprint(raw) == key.get("kid"):
            found.append((raw, key["kid"], key.get("status", "")))
    return found


def site_failures(verification: dict[str, Any], document: dict[str, Any]) -> set[str]:
    """The checks (CHECK_NAMES) that fail for `verification`, trusting the keys `document`,
    computed with the site's pure integrity functions only."""
    failed: set[str] = set()
    data = b64decode(verification["canonical_bytes"])
    if not canonical.is_canonical(data):
        failed.add("canonical_form")
    if canonical.sha256_hex(data) != verification["output_hash"]:
        failed.add("hash")
    try:
        doc_id = json.loads(data).get("id")
    except ValueError:
        doc_id = None
    if doc_id is None or doc_id != verification["receipt_id"]:
        failed.add("receipt_id")

    listed = _listed(document)
    signature = verification["signature"]
    signer = next((k for k in listed if k[1] == signature["key_id"]), None)
    if (
        signer is None
        or signer[2] == "compromised"
        or not keys.verify_signature(signer[0], data, b64decode(signature["value"]))
    ):
        failed.add("signature")

    log = verification["log"]
    proof = [b64decode(p) for p in log["inclusion_proof"]]
    if not merkle.verify_inclusion(
        merkle.leaf_hash(data), log["index"], log["tree_size"], proof, b64decode(log["root_hash"])
    ):
        failed.add("log_inclusion")

    checkpoint = log["checkpoint"]
    origin = document["log"]["origin"]
    try:
        # The text ends at the last blank line, as note.verify_note reads it.
        cp_origin, size, root = note.parse_checkpoint(checkpoint[: checkpoint.rindex("\n\n") + 1])
        if (cp_origin, size, b64(root)) != (
            log["origin"],
            log["tree_size"],
            log["root_hash"],
        ) or cp_origin != origin:
            failed.add("checkpoint")
    except ValueError:
        failed.add("checkpoint")
    counted = [
        note.verifier_key(origin, raw) for raw, _kid, status in listed if status != "compromised"
    ]
    if note.verify_note(checkpoint, counted) is None:
        failed.add("checkpoint_signature")
    return failed


# An offline bundle (vectors/bundles/) is checked for all of the above on its verification,
# and for its c2sp.org/tlog-proof text.
BUNDLE_CHECK_NAMES = (*CHECK_NAMES, "tlog_proof")


def tlog_proof_holds(bundle: dict[str, Any], document: dict[str, Any]) -> bool:
    """The bundle's tlog proof parses, agrees with the verification's log part, leads from the
    leaf of the bytes to its own checkpoint's root, and that checkpoint is signed by a listed
    key that is not compromised, under the keys document's log origin."""
    verification, log = bundle["verification"], bundle["verification"]["log"]
    try:
        proof = tlogproof.parse_proof(bundle.get("tlog_proof"))  # type: ignore[arg-type]
        origin, size, root = note.parse_checkpoint(
            proof.checkpoint[: proof.checkpoint.rindex("\n\n") + 1]
        )
    except (ValueError, TypeError, AttributeError):
        return False
    agrees = (
        proof.index == log["index"]
        and proof.hashes == [b64decode(p) for p in log["inclusion_proof"]]
        and proof.checkpoint == log["checkpoint"]
    )
    data = b64decode(verification["canonical_bytes"])
    counted = [
        note.verifier_key(document["log"]["origin"], raw)
        for raw, _kid, status in _listed(document)
        if status != "compromised"
    ]
    return (
        agrees
        and origin == document["log"]["origin"]
        and merkle.verify_inclusion(merkle.leaf_hash(data), proof.index, size, proof.hashes, root)
        and note.verify_note(proof.checkpoint, counted) is not None
    )


def site_bundle_failures(bundle: dict[str, Any], document: dict[str, Any]) -> set[str]:
    """The checks (BUNDLE_CHECK_NAMES) that fail for an offline bundle, trusting `document`."""
    failed = site_failures(bundle["verification"], document)
    if not tlog_proof_holds(bundle, document):
        failed.add("tlog_proof")
    return failed


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((VECTORS / "manifest.json").read_text("utf-8"))
    return loaded


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text("utf-8"))


ENTRIES = manifest()["vectors"] if (VECTORS / "manifest.json").exists() else []
BUNDLE_ENTRIES = manifest().get("bundles", []) if (VECTORS / "manifest.json").exists() else []


def test_the_manifest_is_complete() -> None:
    listed = manifest()
    files = {entry["file"] for entry in listed["vectors"]}
    keys_files = {entry["keys"] for entry in listed["vectors"]}
    assert keys_files <= set(listed["keys_files"])
    bundle_files = {entry["file"] for entry in listed["bundles"]}
    on_disk = {str(p.relative_to(VECTORS)) for p in VECTORS.rglob("*.json")}
    # cosignature.json is the witnesses' vectors, with a generator of its own
    # (vectors/generate_cosignature.py; tests/unit/integrity/test_cosignature.py).
    assert on_disk == files | bundle_files | set(listed["keys_files"]) | {
        "manifest.json",
        "cosignature.json",
    }
    assert len(files) == len(listed["vectors"]), "a file is listed twice"
    names = [entry["name"] for entry in listed["vectors"]]
    assert len(set(names)) == len(names)
    assert listed["checks"] == list(CHECK_NAMES)
    for entry in listed["vectors"]:
        assert entry["expected"] in ("valid", "invalid")
        assert set(entry["fails"]) <= set(CHECK_NAMES)
        assert (entry["expected"] == "valid") == (entry["fails"] == [])
        assert (entry["changed"] is None) == (entry["expected"] == "valid")
    # Real variety: redactions, a link, more than one key, and every kind of check broken.
    valid = [load(e["file"]) for e in listed["vectors"] if e["expected"] == "valid"]
    documents = [json.loads(b64decode(v["canonical_bytes"])) for v in valid]
    assert any(d["redactions"] for d in documents)
    assert any(d.get("links") for d in documents)
    assert len({v["signature"]["key_id"] for v in valid}) == 2
    assert {name for e in listed["vectors"] for name in e["fails"]} == set(CHECK_NAMES)
    # The bundles: valid ones and corrupted ones, the tlog proof broken every way alone.
    assert listed["bundle_checks"] == list(BUNDLE_CHECK_NAMES)
    assert len(bundle_files) == len(listed["bundles"])
    for entry in listed["bundles"]:
        assert entry["keys"] in listed["keys_files"]
        assert set(entry["fails"]) <= set(BUNDLE_CHECK_NAMES)
        valid = entry["expected"] == "valid"
        assert valid == (entry["fails"] == []) == (entry["changed"] is None)
    assert sum(e["fails"] == ["tlog_proof"] for e in listed["bundles"]) >= 5
    assert any(e["expected"] == "valid" for e in listed["bundles"])


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_the_site_functions_reach_the_manifest_verdict(entry: dict[str, Any]) -> None:
    failed = site_failures(load(entry["file"]), load(entry["keys"]))
    assert failed == set(entry["fails"]), entry["changed"]
    assert ("valid" if not failed else "invalid") == entry["expected"]


@pytest.mark.parametrize("entry", BUNDLE_ENTRIES, ids=[e["name"] for e in BUNDLE_ENTRIES])
def test_the_site_functions_reach_each_bundle_verdict(entry: dict[str, Any]) -> None:
    failed = site_bundle_failures(load(entry["file"]), load(entry["keys"]))
    assert failed == set(entry["fails"]), entry["changed"]
    assert ("valid" if not failed else "invalid") == entry["expected"]


def test_a_valid_vector_really_is_the_site_verification() -> None:
    """The valid vectors are verification JSONs as the site writes them (its own checks all
    passed when it served them)."""
    for entry in ENTRIES:
        if entry["expected"] == "valid":
            answer = load(entry["file"])
            assert answer["status"] == "valid"
            assert [c["result"] for c in answer["checks"]] == ["pass"] * 5

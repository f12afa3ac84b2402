"""Checking an offline bundle (`GET /run/<id>/bundle.json`) with no network.

    {"bundle": "receipt-bundle/v1", "verification": …, "keys": …, "tlog_proof": "c2sp.org/…"}

The verification is checked as any verification JSON is (checks.verify_verification); the
bundle adds one check, `tlog_proof`: its c2sp.org/tlog-proof text must parse, agree with the
verification's `log` part (the same index, the same proof hashes, the same checkpoint text),
and hold by itself, as standard tlog tooling would check it: the inclusion proof leads from the
receipt's leaf hash to the root of the proof's own checkpoint, and that checkpoint is signed by
a trusted key under the log's name. The keys inside the bundle are the file's own claim: the
caller (targets.verify_target) trusts only a pinned --key for a saved bundle.
"""

from __future__ import annotations

from typing import Any

from receiptsite_client.verify.checks import CHECK_NAMES, check_checkpoint, verify_verification
from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.keys import TrustedKey, keys_to_check_against
from receiptsite_client.verify.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from receiptsite_client.verify.note import parse_checkpoint, parse_note
from receiptsite_client.verify.result import FAIL, PASS, UNCHECKED, Check, Result
from receiptsite_client.verify.tlogproof import TlogProof, parse_tlog_proof

BUNDLE_FORMAT = "receipt-bundle/v1"
BUNDLE_CHECK_NAMES = (*CHECK_NAMES, "tlog_proof")


def verify_bundle(
    bundle: dict[str, Any],
    keys: dict[str, Any] | None,
    pinned_x: str | None,
    *,
    expected_id: str | None = None,
) -> Result:
    """Every check of the bundle's verification, then `tlog_proof`. `keys` and `pinned_x` as
    for verify_verification (the caller decides whether the bundle's own keys are trusted)."""
    verification = bundle.get("verification")
    if not isinstance(verification, dict):
        return Result(checks=[Check("target", UNCHECKED, "The bundle holds no verification.")])
    result = verify_verification(verification, keys, pinned_x, expected_id=expected_id)
    try:
        trusted = keys_to_check_against(keys, pinned_x)
    except ValueError:
        trusted = None  # verify_verification has said why in its notes
    result.checks.append(check_tlog_proof(bundle.get("tlog_proof"), verification, keys, trusted))
    return result


def _leaf(verification: dict[str, Any]) -> bytes:
    """The leaf hash the proof must start from: of the bytes, or a withdrawn receipt's kept
    leaf hash. ValueError if there is none."""
    if verification.get("status") == "withdrawn":
        leaf = b64decode(verification.get("leaf_hash"))
        if len(leaf) != HASH_SIZE:
            raise ValueError("the leaf hash is not 32 bytes")
        return leaf
    return leaf_hash(b64decode(verification.get("canonical_bytes")))


def _disagreements(proof: TlogProof, log: dict[str, Any]) -> list[str]:
    found = []
    if proof.index != log.get("index"):
        found.append(f"its index is {proof.index}, not log.index {log.get('index')}")
    try:
        listed = [b64decode(item) for item in log.get("inclusion_proof") or []]
    except ValueError:
        listed = None
    if listed != proof.hashes:
        found.append("its hashes are not log.inclusion_proof")
    if proof.checkpoint != log.get("checkpoint"):
        found.append("its checkpoint is not log.checkpoint")
    return found


def check_tlog_proof(
    text: object,
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
) -> Check:
    name = "tlog_proof"
    if text is None:
        return Check(name, FAIL, "The bundle carries no tlog_proof.")
    try:
        proof = parse_tlog_proof(text)
    except ValueError as error:
        return Check(name, FAIL, f"The tlog_proof is not a c2sp.org/tlog-proof text: {error}.")
    log = verification.get("log")
    if not isinstance(log, dict):
        return Check(name, FAIL, "The verification has no log part for the tlog proof to match.")
    problems = _disagreements(proof, log)

    # The proof by itself: its checkpoint, its inclusion proof from the receipt's leaf.
    content, signed = check_checkpoint(proof.checkpoint, log, keys, trusted)
    try:
        origin, size, root = parse_checkpoint(parse_note(proof.checkpoint).text)
    except ValueError as error:
        problems.append(f"its checkpoint does not parse ({error})")
    else:
        try:
            leaf = _leaf(verification)
        except ValueError as error:
            problems.append(f"there is no leaf hash to prove ({error})")
        else:
            if not verify_inclusion(leaf, proof.index, size, proof.hashes, root):
                problems.append(
                    f"its inclusion proof does not lead from the receipt's leaf hash at index "
                    f"{proof.index} to the root of its checkpoint (tree size {size})"
                )
    if content.result == FAIL:
        problems.append(content.detail.rstrip("."))
    if signed.result == FAIL:
        problems.append(signed.detail.rstrip("."))
    if problems:
        return Check(name, FAIL, "The tlog proof does not hold: " + "; ".join(problems) + ".")
    if signed.result != PASS:
        return Check(
            name,
            UNCHECKED,
            "The tlog proof agrees with the log proof and its inclusion proof verifies, but "
            "there is no key to check its checkpoint's signature.",
        )
    return Check(
        name,
        PASS,
        f"The c2sp.org/tlog-proof text agrees with the log proof: leaf {proof.index} is in "
        f"the tree of size {size} of log {origin}, whose checkpoint a trusted key signed.",
    )

"""Checking an offline bundle (`GET /run/<id>/bundle.json`) with no network.

    {"bundle": "receipt-bundle/v1", "verification": …, "keys": …, "tlog_proof": "c2sp.org/…"}

The verification is checked as any verification JSON is (checks.verify_verification); the
bundle adds one check, `tlog_proof`: its c2sp.org/tlog-proof text must parse, agree with the
verification's log part (the same index, the same proof hashes, the same checkpoint text), and
hold by itself, as standard tlog tooling would check it: the inclusion proof leads from the
receipt's leaf hash to the root of the proof's own checkpoint, and that checkpoint is signed by
a trusted key under the log's name. The log part it must agree with is `log.witnessed` when
the site names a witnessed checkpoint (index log.index, the witnessed inclusion proof, the
witnessed checkpoint verbatim with its cosignature lines), else `log` itself. With a policy,
the proof's cosignatures are checked too: every policy witness's line verifies, and the quorum
is met (a proof of a checkpoint nobody has witnessed yet is "could not check", as the
`witnesses` check says). The keys inside the bundle are the file's own claim: the caller
(targets.verify_target) trusts only a pinned --key or --policy for a saved bundle.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

from receiptsite_client.verify.checks import (
    CHECK_NAMES,
    check_checkpoint,
    choose_trust,
    log_name,
    verify_verification,
)
from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.keys import TrustedKey
from receiptsite_client.verify.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from receiptsite_client.verify.note import parse_checkpoint, parse_note
from receiptsite_client.verify.policy import Policy
from receiptsite_client.verify.result import FAIL, PASS, UNCHECKED, Check, Result
from receiptsite_client.verify.tlogproof import TlogProof, parse_tlog_proof
from receiptsite_client.verify.witnesses import (
    check_witnesses,
    describe_counted,
    read_cosignatures,
)

BUNDLE_FORMAT = "receipt-bundle/v1"
BUNDLE_CHECK_NAMES = (*CHECK_NAMES, "tlog_proof")


def verify_bundle(
    bundle: dict[str, Any],
    keys: dict[str, Any] | None,
    pinned_x: str | None,
    *,
    expected_id: str | None = None,
    policy: Policy | None = None,
    keys_pinned: bool = False,
) -> Result:
    """Every check of the bundle's verification, then `tlog_proof`. `keys`, `pinned_x`,
    `policy` and `keys_pinned` as for verify_verification (the caller decides whether the
    bundle's own keys are trusted)."""
    verification = bundle.get("verification")
    if not isinstance(verification, dict):
        return Result(checks=[Check("target", UNCHECKED, "The bundle holds no verification.")])
    result = verify_verification(
        verification,
        keys,
        pinned_x,
        expected_id=expected_id,
        policy=policy,
        keys_pinned=keys_pinned,
    )
    # The same choice verify_verification made (its notes say why, if it found none).
    trust = choose_trust(verification, keys, pinned_x, policy=policy, keys_pinned=keys_pinned)
    result.checks.append(
        check_tlog_proof(bundle.get("tlog_proof"), verification, keys, trust.keys, policy)
    )
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


def _against(log: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the tlog proof must agree with, and its name in the words: `log.witnessed` when
    the site names a witnessed checkpoint, else `log`."""
    witnessed = log.get("witnessed")
    if isinstance(witnessed, dict):
        return witnessed, "log.witnessed"
    return log, "log"


def _disagreements(proof: TlogProof, log: dict[str, Any]) -> list[str]:
    against, what = _against(log)
    found = []
    if proof.index != log.get("index"):
        found.append(f"its index is {proof.index}, not log.index {log.get('index')}")
    try:
        listed = [b64decode(item) for item in against.get("inclusion_proof") or []]
    except ValueError:
        listed = None
    if listed != proof.hashes:
        found.append(f"its hashes are not {what}.inclusion_proof")
    if proof.checkpoint != against.get("checkpoint"):
        found.append(f"its checkpoint is not {what}.checkpoint")
    return found


def _tree(log: dict[str, Any], checkpoint: str) -> tuple[dict[str, Any], str]:
    """The tree the proof's checkpoint must stand for: `log`'s, or the witnessed one's (the
    log's origin, the witnessed tree_size and, having no root of its own to compare, the
    root its checkpoint states)."""
    against, what = _against(log)
    if against is log:
        return log, what
    try:
        root = parse_checkpoint(parse_note(checkpoint).text)[2]
    except ValueError:
        root = b""
    tree = {
        "origin": log.get("origin"),
        "tree_size": against.get("tree_size"),
        "root_hash": base64.b64encode(root).decode("ascii"),
    }
    return tree, what


def _cosigned(
    checkpoint: str, log: dict[str, Any], keys: dict[str, Any] | None, policy: Policy
) -> tuple[str | None, str | None]:
    """With a policy: (a problem with the proof's cosignatures, or None; why it could not be
    shown witnessed, or None). A failing line of a policy witness is a problem; a quorum not
    met is a problem when the site says the checkpoint is witnessed, and "not witnessed yet"
    when it says none is."""
    name = log_name(log, keys)
    try:
        note = parse_note(checkpoint)
    except ValueError:
        return None, None  # said already: its checkpoint does not parse
    cosignatures = read_cosignatures(note, name or "", policy)
    if cosignatures.failed:
        return f"the cosignature of {cosignatures.failed[0]} does not verify", None
    counted = cosignatures.counted()
    if policy.met(counted):
        return None, None
    short = (
        f"its checkpoint's cosignatures that verify ({describe_counted(counted)}) do not meet "
        f"the policy's quorum {policy.describe()}"
    )
    if isinstance(log.get("witnessed"), dict):
        return short, None
    return None, short


def check_tlog_proof(
    text: object,
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
    policy: Policy | None = None,
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
    try:
        leaf: bytes | None = _leaf(verification)
    except ValueError as error:
        leaf = None
        problems.append(f"there is no leaf hash to prove ({error})")
    against, what = _against(log)
    if policy is not None and against is not log:
        # A witnessed proof, judged as the `witnesses` check judges log.witnessed: signed,
        # including the leaf, cosigned by the quorum (before a compromise of its signer).
        judged = _judge_witnessed(proof, against, leaf, keys, trusted, policy, log)
        if judged.result == FAIL:
            problems.append(judged.detail.rstrip("."))
        return _verdict(name, problems, judged, None, proof, what)

    # The proof by itself: its checkpoint, its inclusion proof from the receipt's leaf.
    tree, what = _tree(log, proof.checkpoint)
    content, signed = check_checkpoint(proof.checkpoint, tree, keys, trusted, what=what)
    try:
        origin, size, root = parse_checkpoint(parse_note(proof.checkpoint).text)
    except ValueError as error:
        problems.append(f"its checkpoint does not parse ({error})")
    else:
        if leaf is not None and not verify_inclusion(leaf, proof.index, size, proof.hashes, root):
            problems.append(
                f"its inclusion proof does not lead from the receipt's leaf hash at index "
                f"{proof.index} to the root of its checkpoint (tree size {size})"
            )
    if content.result == FAIL:
        problems.append(content.detail.rstrip("."))
    if signed.result == FAIL:
        problems.append(signed.detail.rstrip("."))
    not_witnessed = None
    if policy is not None:
        problem, not_witnessed = _cosigned(proof.checkpoint, log, keys, policy)
        if problem is not None:
            problems.append(problem)
    return _verdict(name, problems, signed, not_witnessed, proof, what)


def _judge_witnessed(
    proof: TlogProof,
    witnessed: dict[str, Any],
    leaf: bytes | None,
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
    policy: Policy,
    log: dict[str, Any],
) -> Check:
    """The proof's own checkpoint, hashes and index judged as log.witnessed is: its tree size
    is its checkpoint's (the site's claim of it is compared by _disagreements)."""
    tree_size: object = witnessed.get("tree_size")
    with contextlib.suppress(ValueError):  # check_witnesses says why
        tree_size = parse_checkpoint(parse_note(proof.checkpoint).text)[1]
    as_log = {
        "index": proof.index,
        "witnessed": {
            "checkpoint": proof.checkpoint,
            "tree_size": tree_size,
            "inclusion_proof": [base64.b64encode(h).decode("ascii") for h in proof.hashes],
            "cosigners": witnessed.get("cosigners"),
        },
    }
    return check_witnesses(as_log, leaf, policy, trusted, log_name(log, keys))


def _verdict(
    name: str,
    problems: list[str],
    signed: Check,
    not_witnessed: str | None,
    proof: TlogProof,
    what: str,
) -> Check:
    if problems:
        return Check(name, FAIL, "The tlog proof does not hold: " + "; ".join(problems) + ".")
    if signed.result != PASS and signed.name == "witnesses":
        return Check(
            name,
            UNCHECKED,
            f"The tlog proof agrees with {what}, but its checkpoint could not be checked: "
            f"{signed.detail[0].lower()}{signed.detail[1:]}",
        )
    if signed.result != PASS:
        return Check(
            name,
            UNCHECKED,
            f"The tlog proof agrees with {what} and its inclusion proof verifies, but there is "
            "no key to check its checkpoint's signature.",
        )
    if not_witnessed is not None:
        return Check(
            name,
            UNCHECKED,
            f"The tlog proof agrees with {what}, its inclusion proof verifies and a trusted "
            f"key signed its checkpoint, but {not_witnessed}: the receipt is not witnessed yet.",
        )
    origin, size = _origin_and_size(proof.checkpoint)
    witnessed = f" {signed.detail}" if signed.name == "witnesses" else ""
    return Check(
        name,
        PASS,
        f"The c2sp.org/tlog-proof text agrees with {what}: leaf {proof.index} is in the tree "
        f"of size {size} of log {origin}, whose checkpoint a trusted key signed.{witnessed}",
    )


def _origin_and_size(checkpoint: str) -> tuple[str, int]:
    origin, size, _root = parse_checkpoint(parse_note(checkpoint).text)
    return origin, size

"""Checking a verification JSON (as `/api/receipt/<id>/verify` serves it) from its bytes: the
canonical form, the hash, the receipt id, the signature, the inclusion proof, the checkpoint
and its signature, and, with a witness policy, the witnesses' cosignatures (witnesses.py), each
recomputed here. The `status` and `checks` the site puts in the JSON are its own claims and are
never read.

Whom to trust (choose_trust): a pinned key (and the keys the keys' history hands over to from
it), or the `log` keys of a tlog policy (each taken as a pinned key is), or, given both, only
the keys both vouch for; else the keys document's listed keys."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.jcs import canonical_form_problem, parse_strict_json
from receiptsite_client.verify.keys import (
    TrustedKey,
    ed25519_verify,
    keys_to_check_against,
    listed_keys,
)
from receiptsite_client.verify.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from receiptsite_client.verify.note import note_key_id, parse_checkpoint, parse_note
from receiptsite_client.verify.policy import Policy, trusted_log_keys
from receiptsite_client.verify.result import FAIL, PASS, UNCHECKED, Check, Result
from receiptsite_client.verify.witnesses import (
    check_witnesses,
    instant,
    witnessed_evidence,
    witnessed_note,
)

CHECK_NAMES = (
    "canonical_form",
    "hash",
    "receipt_id",
    "signature",
    "log_inclusion",
    "checkpoint",
    "checkpoint_signature",
    "witnesses",  # with a witness policy only
)

# How a trusted key came to be trusted, in the words the checks use.
PINNED, LISTED, BY_POLICY, BOTH = "pinned", "listed", "policy", "both"
_WHERE = {
    PINNED: "the pinned key",
    LISTED: "a key the keys document lists",
    BY_POLICY: "a log key of the policy",
    BOTH: "a key that both --key and --policy trust",
}


@dataclass
class Trust:
    """The keys to check signatures against (None: there are none, so those checks could not
    be made), how they came to be trusted, the policy (None: witnesses are only reported), and
    what was said about the choice."""

    keys: list[TrustedKey] | None
    source: str = LISTED
    policy: Policy | None = None
    notes: list[str] = field(default_factory=list)


def _log_origin(verification: object) -> str | None:
    log = verification.get("log") if isinstance(verification, dict) else None
    origin = log.get("origin") if isinstance(log, dict) else None
    return origin if isinstance(origin, str) else None


def choose_trust(
    verification: object,
    keys: dict[str, Any] | None,
    pinned_x: str | None,
    *,
    policy: Policy | None = None,
    keys_pinned: bool = False,
) -> Trust:
    """Which keys vouch for the receipt and its log.

    `pinned_x` (a base64url key) or `keys_pinned` (`keys` is a keys document the user gave)
    pin keys; a policy's `log` lines pin keys too, those for the verification's log origin,
    each followed through the keys' history as a pinned key is. Given both, only keys that
    both vouch for are trusted, and none in common means nothing can be checked: two pins
    that disagree are a mistake to report, not a receipt to fail. A policy with no `log` line
    pins nothing: the keys are chosen as without it."""
    key_given = pinned_x is not None or keys_pinned
    trust = Trust(None, PINNED if pinned_x is not None else LISTED, policy)
    try:
        key_side = keys_to_check_against(keys, pinned_x)
    except ValueError as error:
        trust.notes.append(f"The pinned key is not usable ({error}).")
        return trust
    if key_side is not None and keys is not None:
        trust.notes.extend(f"Ignored: {p}." for p in listed_keys(keys)[1])
    if policy is None or not policy.logs:
        trust.keys = key_side
        return trust
    origin = _log_origin(verification)
    policy_side = trusted_log_keys(policy, keys, origin)
    if not policy_side:
        known = ", ".join(sorted({log.origin for log in policy.logs}))
        trust.notes.append(f"The policy names no log of origin {origin!r} (it names {known}).")
    if not key_given or key_side is None:
        trust.keys, trust.source = policy_side, BY_POLICY
        return trust
    by_kid = {key.kid: key for key in policy_side}
    both = [
        key if by_kid[key.kid].status != "compromised" else by_kid[key.kid]
        for key in key_side
        if key.kid in by_kid
    ]
    if not both:
        trust.notes.append(
            "--key and --policy trust no key in common, so the signatures could not be "
            "checked: give the one you trust, or a key the policy's log lines name."
        )
        return trust
    trust.keys, trust.source = both, BOTH
    return trust


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _log_fields(log: object) -> tuple[int, int, bytes, list[bytes]]:
    if not isinstance(log, dict):
        raise ValueError("the verification gives no log proof")
    index, size = log.get("index"), log.get("tree_size")
    if not (_is_count(index) and _is_count(size)):
        raise ValueError("log.index and log.tree_size must be counts")
    assert isinstance(index, int) and isinstance(size, int)
    root = b64decode(log.get("root_hash"))
    proof_items = log.get("inclusion_proof")
    if not isinstance(proof_items, list):
        raise ValueError("log.inclusion_proof is not a list")
    proof = [b64decode(item) for item in proof_items]
    if len(root) != HASH_SIZE or any(len(p) != HASH_SIZE for p in proof):
        raise ValueError("the root and every proof hash are 32 bytes")
    return index, size, root, proof


def _check_signature(
    data: bytes,
    verification: dict[str, Any],
    trust: Trust,
    keys: dict[str, Any] | None = None,
) -> Check:
    name = "signature"
    trusted = trust.keys
    if trusted is None:
        return Check(
            name,
            UNCHECKED,
            "No key to check the signature against, so the signer was not checked: give one "
            "with --key (a keys document or a base64url Ed25519 key) or --policy (a tlog-policy "
            "file whose log lines name the site's keys).",
        )
    signature = verification.get("signature")
    if not isinstance(signature, dict):
        return Check(name, FAIL, "The verification carries no signature.")
    if signature.get("algorithm") != "Ed25519":
        return Check(
            name, FAIL, f"The signature algorithm is {signature.get('algorithm')!r}, not Ed25519."
        )
    kid = signature.get("key_id")
    try:
        value = b64decode(signature.get("value"))
    except ValueError as error:
        return Check(name, FAIL, f"The signature value is {error}.")
    key = next((k for k in trusted if k.kid == kid), None)
    if key is None:
        known = ", ".join(k.kid for k in trusted) or "none"
        return Check(
            name,
            FAIL,
            f"The receipt was signed by key {kid}, which is not {_WHERE[trust.source]} "
            f"(known: {known}).",
        )
    if key.status == "compromised":
        # The site shows the newest signature that counts (a receipt logged before the
        # compromise is signed again by the new key): this one could be a forgery.
        return Check(
            name,
            FAIL,
            f"The signing key {kid} is {key.compromised_words()}, and this signature is not "
            "one the site could show was made before then: it cannot be told from a forgery.",
        )
    if not ed25519_verify(key.raw, value, data):
        return Check(name, FAIL, f"The Ed25519 signature does not verify under key {kid}.")
    how = {
        PINNED: "the pinned key",
        BY_POLICY: "the policy's log key",
        BOTH: "the key that --key and --policy both trust,",
    }.get(trust.source, f"the listed key ({key.status})")
    verified = f"The Ed25519 signature verifies under {how} {kid}."
    if "evidence" not in signature:
        return Check(name, PASS, verified)
    evidence = signature["evidence"]
    if trust.policy is not None and isinstance(evidence, dict):
        listed = listed_keys(keys)[0] if keys is not None else []
        known_keys = {k.kid: k for k in [*trusted, *listed]}
        result, words = witnessed_evidence(
            leaf_hash(data),
            evidence,
            _log_origin(verification),
            trust.policy,
            list(known_keys.values()),
            keys is not None,
        )
    else:
        problem, words = _evidence_problem(data, evidence, verification, keys, trusted, key.kid)
        result = PASS if problem is None else FAIL
        words = words if problem is None else problem
    if result == PASS:
        return Check(name, PASS, f"{verified} {words}")
    how_bad = "does not hold" if result == FAIL else "could not be checked"
    return Check(
        name,
        result,
        f"{verified} It was appended after a key compromise, but its evidence {how_bad}: {words}.",
    )


def _evidence_problem(
    data: bytes,
    evidence: object,
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
    shown_kid: str,
) -> tuple[str | None, str]:
    """Check a re-signed receipt's `signature.evidence` (docs/verification.md): the checkpoint
    is a signed note for the log's origin, under the log's name, by a listed key other than
    `shown_kid` (the key that signed again); the receipt's leaf is in its tree; and it was
    signed (by the site's own record) before a listed key's `compromised_at` (its own key's,
    when that key is compromised). A problem, or None and the words that say what was shown."""
    if not isinstance(evidence, dict):
        return "it is not an object", ""
    index, size = evidence.get("leaf_index"), evidence.get("tree_size")
    if not (_is_count(index) and _is_count(size)):
        return "leaf_index and tree_size must be counts", ""
    assert isinstance(index, int) and isinstance(size, int)
    try:
        note = parse_note(evidence.get("checkpoint"))
        origin, note_size, root = parse_checkpoint(note.text)
        items = evidence.get("inclusion_proof")
        if not isinstance(items, list):
            raise ValueError("the inclusion proof is not a list")
        proof = [b64decode(item) for item in items]
    except ValueError as error:
        return f"its checkpoint or proof does not read ({error})", ""
    log = verification.get("log")
    keys_log = keys.get("log") if isinstance(keys, dict) else None
    keys_origin = keys_log.get("origin") if isinstance(keys_log, dict) else None
    log_origin = keys_origin if isinstance(keys_origin, str) else None
    if log_origin is None and isinstance(log, dict) and isinstance(log.get("origin"), str):
        log_origin = log["origin"]
    if origin != log_origin:
        return f"its checkpoint is for log {origin!r}, not the log {log_origin!r}", ""
    if note_size != size:
        return f"its checkpoint is of {note_size} leaves, not tree_size {size}", ""
    # The key it is by: a listed key (not the one that signed again, which came after the
    # compromise); if that key is compromised itself, its signature counts only from before.
    listed = listed_keys(keys)[0] if keys is not None else []
    known = {k.kid: k for k in [*listed, *(trusted or [])] if k.kid != shown_kid}
    message = note.text.encode("utf-8")
    signer: TrustedKey | None = None
    for sig_name, key_id, value in note.signatures:
        for key in known.values():
            if (
                signer is None
                and sig_name == origin
                and key_id == note_key_id(origin, key.raw)
                and ed25519_verify(key.raw, value, message)
            ):
                signer = key
    if signer is None:
        return (
            "its checkpoint is not signed, under the log's name, by a listed key other than "
            f"{shown_kid}",
            "",
        )
    included = all(len(p) == HASH_SIZE for p in proof) and verify_inclusion(
        leaf_hash(data), index, size, proof, root
    )
    if not included:
        return f"the proof does not put the receipt's leaf {index} in its checkpoint's tree", ""
    signed_at = instant(evidence.get("signed_at"))
    if signed_at is None:
        return "its signed_at is not an RFC 3339 timestamp", ""
    # The compromise it predates: its own key's, else that of a key marked compromised (the
    # one the receipt was signed by before; after a rotation, not the checkpoint's key).
    compromised = [k for k in known.values() if k.status == "compromised"]
    if signer.status == "compromised":
        compromised = [signer]
    if not compromised:
        return "no listed key is marked compromised, so there is nothing it predates", ""
    for key in compromised:
        since = instant(key.compromised_at)
        if since is not None and signed_at < since:
            witnessed = (
                " The site says witnesses cosigned that checkpoint too; their cosignatures "
                "were not checked, as no --policy was given."
                if evidence.get("signed_at_source") == "witnesses"
                else ""
            )
            return None, (
                f"It was appended after key {key.kid} was compromised, resting on the "
                f"checkpoint of {size} leaves key {signer.kid} signed, by the site's own "
                f"record, at {evidence.get('signed_at')}, before {key.compromised_at}; leaf "
                f"{index} is in it.{witnessed}"
            )
    named = ", ".join(f"key {k.kid} ({k.compromised_words()})" for k in compromised)
    return f"its checkpoint was signed at {evidence.get('signed_at')}, not before {named}", ""


def check_checkpoint(
    note_text: object,
    log: dict[str, Any],
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
    *,
    what: str = "log",
) -> tuple[Check, Check]:
    """The `checkpoint` (content) and `checkpoint_signature` checks of a signed checkpoint
    that is to stand for the tree `log` describes (`what` names it in the words)."""
    try:
        note = parse_note(note_text)
    except ValueError as error:
        bad = f"The checkpoint is not a signed note ({error})."
        return Check("checkpoint", FAIL, bad), Check("checkpoint_signature", FAIL, bad)

    # The content: a checkpoint for this log, of the tree the proof is for.
    claimed_origin = log.get("origin")
    keys_log = keys.get("log") if isinstance(keys, dict) else None
    keys_origin = keys_log.get("origin") if isinstance(keys_log, dict) else None
    try:
        origin, size, root = parse_checkpoint(note.text)
        problems = []
        if origin != claimed_origin:
            problems.append(f"its origin is {origin!r}, not {what}.origin {claimed_origin!r}")
        if isinstance(keys_origin, str) and origin != keys_origin:
            problems.append(
                f"its origin is {origin!r}, not the keys document's log {keys_origin!r}"
            )
        if size != log.get("tree_size"):
            problems.append(f"its size is {size}, not {what}.tree_size {log.get('tree_size')}")
        if base64.b64encode(root).decode("ascii") != log.get("root_hash"):
            problems.append(f"its root hash is not {what}.root_hash")
        content = (
            Check(
                "checkpoint",
                FAIL,
                "The checkpoint does not match the proof: " + "; ".join(problems) + ".",
            )
            if problems
            else Check(
                "checkpoint",
                PASS,
                f"The checkpoint is for log {origin}, tree size "
                f"{size}, with the proof's root hash.",
            )
        )
    except ValueError as error:
        content = Check("checkpoint", FAIL, f"The checkpoint text does not parse ({error}).")

    # The signature: by a trusted key, under the log's name.
    if trusted is None:
        return content, Check(
            "checkpoint_signature",
            UNCHECKED,
            "No key to check the checkpoint's signature against, so its signer was not checked.",
        )
    name = keys_origin if isinstance(keys_origin, str) else claimed_origin
    if not isinstance(name, str):
        return content, Check(
            "checkpoint_signature", FAIL, "The log has no origin to name its key."
        )
    counted = {note_key_id(name, k.raw): k for k in trusted if k.status != "compromised"}
    compromised = {note_key_id(name, k.raw): k for k in trusted if k.status == "compromised"}
    message = note.text.encode("utf-8")
    verified: list[str] = []
    by_compromised: TrustedKey | None = None
    for sig_name, key_id, signature in note.signatures:
        if sig_name != name:
            continue  # another signer's signature (a witness, say): not ours to judge
        if key_id in counted:
            key = counted[key_id]
            if not ed25519_verify(key.raw, signature, message):
                return content, Check(
                    "checkpoint_signature",
                    FAIL,
                    f"The checkpoint's signature by key {key.kid} does not verify.",
                )
            verified.append(key.kid)
        elif key_id in compromised and ed25519_verify(compromised[key_id].raw, signature, message):
            by_compromised = compromised[key_id]
    if verified:
        return content, Check(
            "checkpoint_signature",
            PASS,
            f"The checkpoint is signed by key {verified[0]} under the log's name {name}.",
        )
    if by_compromised is not None:
        return content, Check(
            "checkpoint_signature",
            FAIL,
            f"The checkpoint is signed only by a key marked compromised ({by_compromised.kid}, "
            f"{by_compromised.compromised_words()}). A checkpoint carries no time, so it "
            "cannot be shown to predate the compromise.",
        )
    return content, Check(
        "checkpoint_signature",
        FAIL,
        f"The checkpoint carries no signature by a trusted key under the log's name {name}.",
    )


def verify_verification(
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    pinned_x: str | None,
    *,
    expected_id: str | None = None,
    policy: Policy | None = None,
    keys_pinned: bool = False,
) -> Result:
    """Check a verification JSON (as `/api/receipt/<id>/verify` serves it) from its bytes.

    `keys`: a keys document or None; `pinned_x`: a base64url Ed25519 public key to trust
    alone (then `keys` only contributes `compromised` marks, its history and the log's name).
    `policy`: a tlog policy, whose log keys are trusted as pinned keys are and whose witnesses
    must have cosigned (the `witnesses` check); `keys_pinned`: `keys` is a document the user
    gave, not the site's (it then pins its keys as --key does). With no key at all, the
    signature checks are "could not check". `expected_id`: the id the caller asked for (from
    a URL), which the document's id must equal too.
    """
    result = Result()
    if not isinstance(verification, dict):
        result.checks.append(
            Check("canonical_form", FAIL, "The verification is not a JSON object.")
        )
        return result
    receipt_id = verification.get("receipt_id")
    result.receipt_id = receipt_id if isinstance(receipt_id, str) else None
    trust = choose_trust(verification, keys, pinned_x, policy=policy, keys_pinned=keys_pinned)
    result.notes.extend(trust.notes)
    trusted = trust.keys

    if verification.get("status") == "withdrawn":
        return _verify_withdrawn(verification, keys, trust, result)

    # canonical_form
    data: bytes | None
    try:
        data = b64decode(verification.get("canonical_bytes"))
    except ValueError as error:
        data = None
        result.checks.append(Check("canonical_form", FAIL, f"canonical_bytes is {error}."))
    document: Any = None
    if data is not None:
        problem = canonical_form_problem(data)
        result.checks.append(
            Check("canonical_form", FAIL, f"The bytes are not in RFC 8785 form: {problem}.")
            if problem
            else Check("canonical_form", PASS, "The bytes are UTF-8 JSON in RFC 8785 form.")
        )
        try:
            document = parse_strict_json(data)
        except (ValueError, RecursionError):
            document = None

    no_bytes = "There are no bytes to check."
    if data is None:
        for name in ("hash", "receipt_id", "signature", "log_inclusion"):
            result.checks.append(Check(name, UNCHECKED, no_bytes))
    else:
        # hash
        digest = hashlib.sha256(data).hexdigest()
        stated = verification.get("output_hash")
        result.checks.append(
            Check("hash", PASS, f"SHA-256 of the bytes is {digest}, the stated output hash.")
            if digest == stated
            else Check(
                "hash",
                FAIL,
                f"SHA-256 of the bytes is {digest}, not the stated output hash {stated}.",
            )
        )
        # receipt_id
        doc_id = document.get("id") if isinstance(document, dict) else None
        if not isinstance(document, dict):
            result.checks.append(Check("receipt_id", FAIL, "The bytes hold no document, so no id."))
        elif doc_id != receipt_id:
            result.checks.append(
                Check(
                    "receipt_id",
                    FAIL,
                    f"The document's id is {doc_id}, not the receipt_id {receipt_id}.",
                )
            )
        elif expected_id is not None and doc_id != expected_id.lower():
            result.checks.append(
                Check(
                    "receipt_id",
                    FAIL,
                    f"The document's id is {doc_id}, not the {expected_id} that was asked for.",
                )
            )
        else:
            result.checks.append(Check("receipt_id", PASS, f"The document's id is {doc_id}."))
        # signature
        result.checks.append(_check_signature(data, verification, trust, keys))
        # log_inclusion
        result.checks.append(_check_inclusion(leaf_hash(data), verification.get("log")))

    log = verification.get("log")
    if isinstance(log, dict):
        result.checks.extend(check_checkpoint(log.get("checkpoint"), log, keys, trusted))
        _add_witnesses(result, log, leaf_hash(data) if data is not None else None, keys, trust)
    else:
        for name in ("checkpoint", "checkpoint_signature"):
            result.checks.append(
                Check(name, FAIL, "The verification gives no log proof, so no checkpoint.")
            )
    return result


def log_name(log: dict[str, Any], keys: dict[str, Any] | None) -> str | None:
    """The key name the log signs its checkpoints under: its origin, as the keys document
    states it (else as the verification does)."""
    keys_log = keys.get("log") if isinstance(keys, dict) else None
    keys_origin = keys_log.get("origin") if isinstance(keys_log, dict) else None
    if isinstance(keys_origin, str):
        return keys_origin
    origin = log.get("origin")
    return origin if isinstance(origin, str) else None


def _add_witnesses(
    result: Result,
    log: dict[str, Any],
    leaf: bytes | None,
    keys: dict[str, Any] | None,
    trust: Trust,
) -> None:
    """With a policy, the `witnesses` check; without, what the site says of them, as a note."""
    if trust.policy is None:
        said = witnessed_note(log)
        if said is not None:
            result.notes.append(said)
        return
    result.checks.append(check_witnesses(log, leaf, trust.policy, trust.keys, log_name(log, keys)))


def _check_inclusion(leaf: bytes, log: object) -> Check:
    try:
        index, size, root, proof = _log_fields(log)
    except ValueError as error:
        return Check("log_inclusion", FAIL, f"No usable log proof: {error}.")
    if verify_inclusion(leaf, index, size, proof, root):
        return Check(
            "log_inclusion",
            PASS,
            f"Leaf {index} is in the tree of size {size} whose root is log.root_hash.",
        )
    return Check(
        "log_inclusion",
        FAIL,
        f"The inclusion proof for leaf {index} in a tree of "
        f"size {size} does not lead to log.root_hash.",
    )


def _verify_withdrawn(
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    trust: Trust,
    result: Result,
) -> Result:
    """A withdrawn receipt: its content is erased; its place in the log can be shown, and the
    withdrawal's own signed statement checked."""
    result.checks.append(
        Check(
            "withdrawn",
            FAIL,
            f"The receipt was withdrawn at {verification.get('withdrawn_at')} (reason: "
            f"{verification.get('reason')}); its content is erased, so it is no evidence now.",
        )
    )
    leaf: bytes | None
    try:
        leaf = b64decode(verification.get("leaf_hash"))
        if len(leaf) != HASH_SIZE:
            raise ValueError("not 32 bytes")
    except ValueError as error:
        result.checks.append(Check("log_inclusion", FAIL, f"The leaf hash is {error}."))
        leaf = None
    else:
        result.checks.append(_check_inclusion(leaf, verification.get("log")))
    log = verification.get("log")
    if isinstance(log, dict):
        result.checks.extend(check_checkpoint(log.get("checkpoint"), log, keys, trust.keys))
        _add_witnesses(result, log, leaf, keys, trust)
    result.checks.append(_check_statement(verification, trust))
    return result


# What a withdrawal's statement (withdrawal/v1) must say as the 410 answer does.
_STATED = ("receipt_id", "withdrawn_at", "reason", "leaf_hash")


def _check_statement(verification: dict[str, Any], trust: Trust) -> Check:
    """The withdrawal's signed statement: its bytes have its hash, the site's key signed them,
    and it states the withdrawal the answer describes."""
    name = "withdrawal_statement"
    statement = verification.get("statement")
    if not isinstance(statement, dict):
        return Check(name, FAIL, "The answer carries no signed statement of the withdrawal.")
    try:
        data = b64decode(statement.get("canonical_bytes"))
        stated = json.loads(data)
    except ValueError as error:
        return Check(name, FAIL, f"The statement's bytes are not JSON in base64 ({error}).")
    if not isinstance(stated, dict) or hashlib.sha256(data).hexdigest() != statement.get("hash"):
        return Check(name, FAIL, "The statement's bytes do not have the statement's hash.")
    signed = _check_signature(data, statement, trust)
    if signed.result != PASS:
        return Check(name, signed.result, f"The statement's signature: {signed.detail}")
    differ = [key for key in _STATED if stated.get(key) != verification.get(key)]
    if stated.get("output_hash") != verification.get("output_hash", stated.get("output_hash")):
        differ.append("output_hash")
    if differ:
        return Check(
            name, FAIL, f"The signed statement disagrees with the answer on {', '.join(differ)}."
        )
    return Check(
        name,
        PASS,
        f"The withdrawal is stated and signed by the site ({signed.detail}), hash "
        f"{statement.get('hash')}.",
    )

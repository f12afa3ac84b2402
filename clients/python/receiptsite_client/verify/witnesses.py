"""Witnesses: the cosignatures on a checkpoint, judged against a tlog policy.

With `--policy`, a receipt is checked to be in a checkpoint that the policy's quorum of
witnesses cosigned (the verification's `log.witnessed`: the `witnesses` check), and a
re-signed receipt's key-compromise evidence counts when the witnesses' cosignature times put
its checkpoint before the compromise. Every cosignature line of a policy witness (by its key
name and key id) must verify, or the note is refused (c2sp.org/signed-note); other lines are
not ours to judge. The site's own list of who cosigned (`cosigners`) is a claim, compared with
the lines themselves. Without a policy the witnesses are only reported (witnessed_note).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from receiptsite_client.verify.cosignature import cosignature_timestamp, read_timestamp
from receiptsite_client.verify.encoding import b64decode
from receiptsite_client.verify.keys import TrustedKey, note_signatures
from receiptsite_client.verify.merkle import HASH_SIZE, verify_inclusion
from receiptsite_client.verify.note import Note, parse_checkpoint, parse_note
from receiptsite_client.verify.policy import NONE, Policy
from receiptsite_client.verify.result import FAIL, PASS, UNCHECKED, Check

NOT_WITNESSED = (
    "The receipt is not witnessed yet: the site names no checkpoint that includes it and that "
    "the witnesses' quorum has cosigned (log.witnessed is null). The site submits its latest "
    "checkpoint to each witness every WITNESS_INTERVAL seconds (10 by default), so a new "
    "receipt is witnessed within a few intervals once the witnesses answer: check again then. "
    "A site without witnesses is never witnessed."
)

POLICY_HINT = (
    "give --policy FILE (a c2sp.org/tlog-policy file; the keys document's log.witness_policy "
    "is the site's) to check them"
)


@dataclass(frozen=True)
class Cosignature:
    """One cosignature line: its key name and timestamp, and the policy's name of the witness
    whose line it verified as (None: not a policy witness's, its timestamp unverified)."""

    key_name: str
    timestamp: int | None
    witness: str | None = None


@dataclass(frozen=True)
class Cosignatures:
    lines: tuple[Cosignature, ...]  # every line not under the log's name, in the note's order
    failed: tuple[str, ...]  # the key names of policy witnesses' lines that do not verify

    def counted(self, before: datetime | None = None) -> dict[str, int]:
        """The witnesses (policy names) whose cosignature verified, with its time; only those
        made before `before`, when given."""
        found: dict[str, int] = {}
        for line in self.lines:
            if line.witness is None or line.timestamp is None:
                continue
            moment = moment_of(line.timestamp)
            if before is None or (moment is not None and moment < before):
                found.setdefault(line.witness, line.timestamp)
        return found


def moment_of(timestamp: int | None) -> datetime | None:
    """A POSIX timestamp as a UTC datetime; None beyond what a datetime holds."""
    if timestamp is None:
        return None
    try:
        return datetime.fromtimestamp(timestamp, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def instant(value: object) -> datetime | None:
    """An RFC 3339 timestamp with its offset, or None."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _when(timestamp: int | None) -> str:
    moment = moment_of(timestamp)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else f"time {timestamp}"


def read_cosignatures(note: Note, log_name: str, policy: Policy | None) -> Cosignatures:
    """Every cosignature line of `note` (each line not under the log's key name, nor under
    the origin the note itself names), with those of the policy's witnesses verified."""
    lines: list[Cosignature] = []
    failed: list[str] = []
    own_origin = note.text.partition("\n")[0]
    for name, key_id, signature in note.signatures:
        if name in (log_name, own_origin):
            continue
        witness = None
        for candidate in policy.witnesses_named(name, key_id) if policy else []:
            if cosignature_timestamp(candidate.key, note.text, name, key_id, signature) is None:
                failed.append(name)
            else:
                witness = candidate.name
        lines.append(Cosignature(name, read_timestamp(signature), witness))
    return Cosignatures(tuple(lines), tuple(failed))


def claim_problem(claim: object, cosignatures: Cosignatures) -> str | None:
    """Why the site's `cosigners` list is not the checkpoint's cosignature lines (the same
    names and times, in the same order), or None."""
    if not isinstance(claim, list) or not all(isinstance(item, dict) for item in claim):
        return "its cosigners is not a list of {name, time}"
    stated = [(item.get("name"), instant(item.get("time"))) for item in claim]
    actual = [(line.key_name, moment_of(line.timestamp)) for line in cosignatures.lines]
    if stated == actual:
        return None
    said = ", ".join(f"{item.get('name')} at {item.get('time')}" for item in claim) or "nobody"
    return f"its cosigners ({said}) are not the checkpoint's cosignature lines ({_who(actual)})"


def _who(pairs: Sequence[tuple[str, datetime | None]]) -> str:
    return (
        ", ".join(
            f"{name} at {moment.strftime('%Y-%m-%dT%H:%M:%SZ') if moment else 'no valid time'}"
            for name, moment in pairs
        )
        or "none"
    )


def describe_counted(counted: dict[str, int]) -> str:
    return ", ".join(f"{name} at {_when(ts)}" for name, ts in counted.items()) or "none"


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} is not a count")
    return value


def _hashes(items: object, what: str) -> list[bytes]:
    if not isinstance(items, list):
        raise ValueError(f"{what} is not a list")
    hashes = [b64decode(item) for item in items]
    if any(len(h) != HASH_SIZE for h in hashes):
        raise ValueError(f"a hash of {what} is not 32 bytes")
    return hashes


@dataclass(frozen=True)
class _Signed:
    """The log's signature on a witnessed checkpoint: by `key`, which, when it is marked
    compromised, counts only with cosignatures from before `before`."""

    key: TrustedKey
    before: datetime | None


def _log_signer(note: Note, name: str, trusted: Sequence[TrustedKey]) -> _Signed | str:
    """Who of the trusted keys signed the note under the log's name (a key not compromised
    first), or why none did."""
    verified, failed = note_signatures(note, name, trusted)
    if failed:
        return f"its signature by key {failed[0].kid} does not verify"
    for key in verified:
        if key.status != "compromised":
            return _Signed(key, None)
    for key in verified:
        since = instant(key.compromised_at)
        if since is not None:
            return _Signed(key, since)
    return f"it carries no signature by a trusted key under the log's name {name}"


def check_witnesses(
    log: dict[str, Any],
    leaf: bytes | None,
    policy: Policy,
    trusted: list[TrustedKey] | None,
    name: str | None,
) -> Check:
    """The `witnesses` check: log.witnessed is a checkpoint of this log, signed under its name
    `name` by a trusted key, whose tree holds the receipt's leaf (log.index), whose policy
    witnesses' cosignatures all verify and meet the quorum, and whose cosigners claim is its
    lines. A checkpoint signed only by a key marked compromised counts with the cosignatures
    made before that key's compromised_at alone: they vouch it was made before then."""
    check = "witnesses"
    witnessed = log.get("witnessed")
    if witnessed is None:
        if policy.quorum == NONE:
            return Check(check, PASS, "The policy's quorum is none: it needs no cosignature.")
        return Check(check, UNCHECKED, NOT_WITNESSED)
    if not isinstance(witnessed, dict):
        return Check(check, FAIL, "log.witnessed is neither null nor an object.")
    if leaf is None:
        return Check(check, UNCHECKED, "There are no bytes, so no leaf to look for in it.")
    if trusted is None or name is None:
        return Check(
            check,
            UNCHECKED,
            "No key to check the witnessed checkpoint's log signature against.",
        )
    try:
        index = _count(log.get("index"), "log.index")
        size = _count(witnessed.get("tree_size"), "log.witnessed.tree_size")
        proof = _hashes(witnessed.get("inclusion_proof"), "log.witnessed.inclusion_proof")
        note = parse_note(witnessed.get("checkpoint"))
        origin, note_size, root = parse_checkpoint(note.text)
    except ValueError as error:
        return Check(check, FAIL, f"log.witnessed does not read: {error}.")
    problems = []
    if origin != name:
        problems.append(f"its checkpoint is for log {origin!r}, not {name!r}")
    if note_size != size:
        problems.append(f"its checkpoint is of {note_size} leaves, not tree_size {size}")
    signed = _log_signer(note, name, trusted)
    if isinstance(signed, str):
        problems.append(signed)
    if not verify_inclusion(leaf, index, note_size, proof, root):
        problems.append(f"its inclusion proof does not put leaf {index} in its checkpoint's tree")
    cosignatures = read_cosignatures(note, name, policy)
    if cosignatures.failed:
        problems.append(f"the cosignature of {cosignatures.failed[0]} does not verify")
    claimed = claim_problem(witnessed.get("cosigners"), cosignatures)
    if claimed:
        problems.append(claimed)
    if problems:
        return Check(
            check, FAIL, "The witnessed checkpoint does not hold: " + "; ".join(problems) + "."
        )
    assert isinstance(signed, _Signed)
    counted = cosignatures.counted(signed.before)
    if not policy.met(counted):
        before = (
            f" made before key {signed.key.kid} was compromised ({signed.key.compromised_at}), "
            "the key that signed it"
            if signed.before
            else ""
        )
        return Check(
            check,
            FAIL,
            f"The cosignatures{before} that verify ({describe_counted(counted)}) do not meet the "
            f"policy's quorum {policy.describe()}.",
        )
    return Check(
        check,
        PASS,
        f"The checkpoint of {size} leaves that includes leaf {index}, signed by key "
        f"{signed.key.kid} under the log's name, is cosigned by {describe_counted(counted)}: "
        f"the policy's quorum {policy.describe()} is met.",
    )


def witnessed_note(log: object) -> str | None:
    """Without a policy: what the site says of the witnesses, in words, said to be unchecked
    (None when the verification says nothing of them, as an older site's does not)."""
    if not isinstance(log, dict) or "witnessed" not in log:
        return None
    witnessed = log["witnessed"]
    if not isinstance(witnessed, dict):
        return (
            "The site says no checkpoint that includes this receipt has been cosigned by its "
            f"witnesses' quorum yet. With a policy, that would be checked: {POLICY_HINT}."
        )
    claim = witnessed.get("cosigners")
    said = (
        ", ".join(
            f"{item.get('name')} at {item.get('time')}" for item in claim if isinstance(item, dict)
        )
        if isinstance(claim, list)
        else ""
    ) or "nobody"
    return (
        f"The site says the checkpoint of {witnessed.get('tree_size')} leaves that includes "
        f"this receipt was cosigned by {said}. These cosignatures were not checked, as no "
        f"policy was given: {POLICY_HINT}."
    )


def witnessed_evidence(
    leaf: bytes,
    evidence: dict[str, Any],
    name: str | None,
    policy: Policy,
    known: Sequence[TrustedKey],
    keys_given: bool,
) -> tuple[str, str]:
    """A re-signed receipt's evidence, with a policy: (PASS, the words) when its checkpoint is
    of the log `name`, signed under that name by a log key (the compromised key itself too:
    the witnesses vouch the tree existed before), its tree holds the receipt's leaf, every
    policy witness's cosignature verifies, and those made before the compromised key's
    compromised_at meet the quorum; (FAIL or UNCHECKED, why) otherwise. Evidence resting on
    the site's own record is UNCHECKED: a policy asks for the witnesses' word."""
    if evidence.get("signed_at_source") != "witnesses":
        return UNCHECKED, (
            "its evidence rests on the site's own record of when it signed the checkpoint "
            f"(signed_at_source {evidence.get('signed_at_source')!r}), the site's word alone; "
            "with --policy only a checkpoint the policy's witnesses cosigned before the "
            "compromise counts"
        )
    try:
        index = _count(evidence.get("leaf_index"), "leaf_index")
        size = _count(evidence.get("tree_size"), "tree_size")
        proof = _hashes(evidence.get("inclusion_proof"), "the inclusion proof")
        note = parse_note(evidence.get("checkpoint"))
        origin, note_size, root = parse_checkpoint(note.text)
    except ValueError as error:
        return FAIL, f"its checkpoint or proof does not read ({error})"
    if name is None or origin != name:
        return FAIL, f"its checkpoint is for log {origin!r}, not the log {name!r}"
    if note_size != size:
        return FAIL, f"its checkpoint is of {note_size} leaves, not tree_size {size}"
    if not verify_inclusion(leaf, index, size, proof, root):
        return FAIL, f"the proof does not put the receipt's leaf {index} in its checkpoint's tree"
    cosignatures = read_cosignatures(note, name, policy)
    if cosignatures.failed:
        return FAIL, f"the cosignature of {cosignatures.failed[0]} does not verify"
    claimed = claim_problem(evidence.get("cosigners"), cosignatures)
    if claimed:
        return FAIL, claimed
    verified, failed = note_signatures(note, name, known)
    if failed:
        return FAIL, f"its checkpoint's signature by key {failed[0].kid} does not verify"
    if not verified:
        if not keys_given:
            return UNCHECKED, (
                "its checkpoint is not signed by a log key of the policy, and no keys document "
                "was given to name the key that signed it (and when that key was compromised)"
            )
        return FAIL, "its checkpoint is not signed, under the log's name, by a log key"
    signer = verified[0]
    compromised = (
        [signer]
        if signer.status == "compromised"
        else [key for key in known if key.status == "compromised"]
    )
    if not compromised:
        if not keys_given:
            return UNCHECKED, (
                "which key was compromised, and when, is in the keys document, which was not "
                "given (a bundle carries it; or --key with a keys document)"
            )
        return FAIL, "no listed key is marked compromised, so there is nothing it predates"
    for key in compromised:
        since = instant(key.compromised_at)
        counted = cosignatures.counted(since) if since is not None else {}
        if since is not None and policy.met(counted):
            return PASS, (
                f"It was appended after key {key.kid} was compromised ({key.compromised_at}), "
                f"resting on the checkpoint of {size} leaves key {signer.kid} signed, which "
                f"includes leaf {index} and which the witnesses cosigned before then: "
                f"{describe_counted(counted)}, meeting the policy's quorum {policy.describe()}."
            )
    key = compromised[0]
    since = instant(key.compromised_at)
    counted = cosignatures.counted(since) if since is not None else {}
    return FAIL, (
        f"the cosignatures of its checkpoint made before key {key.kid} was compromised "
        f"({key.compromised_at}) are {describe_counted(counted)}, which do not meet the "
        f"policy's quorum {policy.describe()}"
    )

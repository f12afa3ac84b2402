"""receipt-verify --policy: the `witnesses` check, a policy's log keys as trusted keys, the
offline bundle's tlog proof against the witnessed checkpoint, and key-compromise evidence the
witnesses vouch for. Every site answer here is built by the test (witness_helpers.py), each
valid one with corrupted variants; the command is run as a user runs it for the exit codes."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from receiptsite_client.verify import (
    BUNDLE_CHECK_NAMES,
    CHECK_NAMES,
    Result,
    parse_policy,
    verify_bundle,
    verify_target,
    verify_verification,
)
from test_keychain import History
from vector_helpers import WITHOUT_POLICY, run
from witness_helpers import (
    ORIGIN,
    T0,
    Site,
    Witness,
    b64,
    checkpoint_text,
    cosignature_line,
    flip_in_line,
    jwk,
    kid_of,
    leaf_hash,
    log_line,
    log_vkey,
    mth,
    new_key,
    path,
    stamp,
    x_of,
)

pytestmark = pytest.mark.unit


def results(result: Result) -> dict[str, str]:
    return {check.name: check.result for check in result.checks}


def detail(result: Result, name: str) -> str:
    check = result.check(name)
    assert check is not None, name
    return check.detail


def save(tmp_path: Path, name: str, content: Any) -> str:
    file = tmp_path / name
    file.write_text(content if isinstance(content, str) else json.dumps(content), "utf-8")
    return str(file)


# --- the witnesses check ---------------------------------------------------------------------


def test_with_the_policy_a_witnessed_receipt_is_valid() -> None:
    site = Site()
    policy = parse_policy(site.policy())
    result = verify_verification(site.verification(), None, None, policy=policy)
    assert result.status == "valid", result.as_json()
    assert [c.name for c in result.checks] == list(CHECK_NAMES)
    words = detail(result, "witnesses")
    assert "checkpoint of 5 leaves that includes leaf 2" in words
    assert f"w1 at {stamp(T0)[:19]}Z, w2 at {stamp(T0 + 1)[:19]}Z" in words
    assert "trio (2 of: w1, w2, w3)" in words
    assert "the policy's log key" in detail(result, "signature")


def test_a_saved_file_checked_with_only_the_policy_is_checked_for_its_signer(
    tmp_path: Path,
) -> None:
    """A policy's log lines pin the site (it signs receipts and checkpoints with one key), so
    the saved file is not the "saved file without a key" case."""
    site = Site()
    target = save(tmp_path, "verification.json", site.verification())
    policy = save(tmp_path, "policy.txt", site.policy())
    done = run(target, "--policy", policy, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["name"] for c in json.loads(done.stdout)["checks"]] == list(CHECK_NAMES)
    assert "The signer was not checked" not in done.stderr
    words = run(target, "--policy", policy)
    assert words.returncode == 0
    assert " witnesses: " in words.stdout
    assert words.stdout.splitlines()[-1] == "Verdict: VALID. Every check passed."
    # Without it, the same file cannot say who signed it.
    assert run(target).returncode == 2


def test_without_a_policy_the_witnesses_are_reported_not_checked() -> None:
    site = Site()
    verification = site.verification()
    result = verify_verification(verification, site.keys(), None)
    assert result.status == "valid"
    assert [c.name for c in result.checks] == WITHOUT_POLICY
    [note] = [n for n in result.notes if "cosigned" in n]
    assert "witness1.example/cosign at " + stamp(T0) in note
    assert "witness2.example/cosign" in note
    assert "not checked" in note and "--policy" in note
    # Nothing about them is believed: a broken cosignature changes no verdict without one.
    log = verification["log"]
    log["witnessed"]["checkpoint"] = log["witnessed"]["checkpoint"].replace("\u2014 w", "\u2014 W")
    assert verify_verification(verification, site.keys(), None).status == "valid"


def test_a_receipt_not_witnessed_yet_could_not_be_checked(tmp_path: Path) -> None:
    site = Site()
    verification = site.verification(witnessed=False)
    result = verify_verification(verification, None, None, policy=parse_policy(site.policy()))
    assert result.status == "could_not_check"
    assert results(result)["witnesses"] == "could_not_check"
    assert "not witnessed yet" in detail(result, "witnesses")
    assert "WITNESS_INTERVAL" in detail(result, "witnesses")
    done = run(save(tmp_path, "v.json", verification), "--policy",
               save(tmp_path, "p.txt", site.policy()))  # fmt: skip
    assert done.returncode == 2
    assert "not witnessed yet" in done.stdout
    # Without a policy the site's null is reported, and the verdict does not wait on it.
    plain = verify_verification(verification, site.keys(), None)
    assert plain.status == "valid"
    assert any("no checkpoint that includes this receipt" in n for n in plain.notes)


def test_a_policy_whose_quorum_is_none_needs_no_witnessed_checkpoint() -> None:
    site = Site()
    policy = parse_policy(site.policy(quorum="none"))
    result = verify_verification(site.verification(witnessed=False), None, None, policy=policy)
    assert result.status == "valid"


Corruption = Callable[[Site, dict[str, Any]], None]


def _recosign(site: Site, witnessed: dict[str, Any], cosigners: tuple[int, ...]) -> None:
    witnessed["checkpoint"], witnessed["cosigners"] = site.cosigned(witnessed["tree_size"],
                                                                    cosigners)  # fmt: skip


def _flip_first_cosignature(site: Site, witnessed: dict[str, Any]) -> None:
    lines = witnessed["checkpoint"].splitlines(keepends=True)
    lines[-2] = flip_in_line(lines[-2])
    witnessed["checkpoint"] = "".join(lines)


def _stranger_cosigns(site: Site, witnessed: dict[str, Any]) -> None:
    """w2's line replaced by one of a witness the policy does not know (the claim says so)."""
    _recosign(site, witnessed, (0,))
    stranger = Witness("s", "stranger.example/cosign")
    text = witnessed["checkpoint"].partition("\n\n")[0] + "\n"
    witnessed["checkpoint"] += cosignature_line(text, stranger.key_name, stranger.key, T0 + 1)
    witnessed["cosigners"].append({"name": stranger.key_name, "time": stamp(T0 + 1)})


def _impostor_under_a_witness_name(site: Site, witnessed: dict[str, Any]) -> None:
    """w2's name on a line made by another key: its key id is not w2's, so it is ignored."""
    _recosign(site, witnessed, (0,))
    text = witnessed["checkpoint"].partition("\n\n")[0] + "\n"
    name = site.witnesses[1].key_name
    witnessed["checkpoint"] += cosignature_line(text, name, new_key(), T0 + 1)
    witnessed["cosigners"].append({"name": name, "time": stamp(T0 + 1)})


def _other_origin(site: Site, witnessed: dict[str, Any]) -> None:
    origin = "elsewhere.example/log"
    text = checkpoint_text(5, mth(site.leaves[:5]), origin)
    witnessed["checkpoint"] = f"{text}\n{log_line(text, site.key, origin)}"
    for n, witness in enumerate(site.witnesses[:2]):
        witnessed["checkpoint"] += cosignature_line(text, witness.key_name, witness.key, T0 + n)


def _by_a_stranger_log_key(site: Site, witnessed: dict[str, Any]) -> None:
    witnessed["checkpoint"], witnessed["cosigners"] = site.cosigned(5, signer=new_key())


def _not_including_the_leaf(site: Site, witnessed: dict[str, Any]) -> None:
    _recosign(site, witnessed, (0, 1))
    witnessed["checkpoint"], witnessed["cosigners"] = site.cosigned(2)
    witnessed["tree_size"] = 2
    witnessed["inclusion_proof"] = [b64(h) for h in path(1, site.leaves[:2])]


WITNESSED_CORRUPTIONS: dict[str, Corruption] = {
    "a flipped bit in a cosignature": _flip_first_cosignature,
    "a quorum short by one": lambda site, wd: _recosign(site, wd, (0,)),
    "a cosignature by a key not in the policy": _stranger_cosigns,
    "a line under a witness's name by another key": _impostor_under_a_witness_name,
    "a claim naming a witness that did not cosign": lambda site, wd: wd["cosigners"].append(
        {"name": site.witnesses[2].key_name, "time": stamp(T0 + 2)}
    ),
    "a claim with another time": lambda site, wd: wd["cosigners"][0].update(time=stamp(T0 + 9)),
    "a claim in another order": lambda site, wd: wd["cosigners"].reverse(),
    "a claim that is not a list": lambda site, wd: wd.update(cosigners="w1, w2"),
    "a checkpoint of another log": _other_origin,
    "a checkpoint signed by a key not the log's": _by_a_stranger_log_key,
    "a checkpoint without the log's signature": lambda site, wd: wd.update(
        checkpoint=wd["checkpoint"].replace(
            log_line(wd["checkpoint"].partition("\n\n")[0] + "\n", site.key), ""
        )
    ),
    "an inclusion proof that does not lead to its root": lambda site, wd: wd.update(
        inclusion_proof=[b64(bytes(32))] * len(wd["inclusion_proof"])
    ),
    "a tree_size that is not its checkpoint's": lambda site, wd: wd.update(tree_size=6),
    "a checkpoint that does not include the receipt": _not_including_the_leaf,
    "a checkpoint that is no note": lambda site, wd: wd.update(checkpoint="5\n"),
    "an object of another kind": lambda site, wd: wd.clear(),
}


@pytest.mark.parametrize(
    "corrupt", WITNESSED_CORRUPTIONS.values(), ids=WITNESSED_CORRUPTIONS.keys()
)
def test_a_corrupted_witnessed_checkpoint_fails_the_witnesses_check(corrupt: Corruption) -> None:
    site = Site()
    policy = parse_policy(site.policy())
    verification = site.verification()
    corrupt(site, verification["log"]["witnessed"])
    result = verify_verification(verification, None, None, policy=policy)
    assert result.failed() == ["witnesses"], result.as_json()


def test_a_witnessed_log_that_is_not_an_object_fails() -> None:
    site = Site()
    verification = site.verification()
    verification["log"]["witnessed"] = "yes"
    result = verify_verification(verification, None, None, policy=parse_policy(site.policy()))
    assert result.failed() == ["witnesses"]


def test_the_variants_above_all_come_from_a_witnessed_checkpoint_that_holds() -> None:
    """The uncorrupted checkpoint passes with a quorum of any two, and of all three."""
    site = Site(cosigners=(2, 0, 1))
    for threshold in ("2", "all", "any"):
        site.threshold = threshold
        policy = parse_policy(site.policy())
        assert verify_verification(site.verification(), None, None, policy=policy).status == (
            "valid"
        )


# --- whom to trust: --key, --policy, both -----------------------------------------------


def test_key_and_policy_that_agree_trust_their_common_key(tmp_path: Path) -> None:
    site = Site()
    target = save(tmp_path, "v.json", site.verification())
    policy = save(tmp_path, "p.txt", site.policy())
    assert run(target, f"--key={x_of(site.key)}", "--policy", policy).returncode == 0
    keys = save(tmp_path, "keys.json", site.keys())
    assert run(target, "--key", keys, "--policy", policy).returncode == 0


def test_key_and_policy_that_disagree_could_not_check(tmp_path: Path) -> None:
    site = Site()
    target = save(tmp_path, "v.json", site.verification())
    other = save(tmp_path, "p.txt", site.policy(logs=[log_vkey(new_key())]))
    done = run(target, f"--key={x_of(site.key)}", "--policy", other)
    assert done.returncode == 2, done.stdout
    assert "--key and --policy trust no key in common" in done.stdout


def test_a_policy_naming_another_key_for_the_log_fails_the_signatures() -> None:
    site = Site()
    policy = parse_policy(site.policy(logs=[log_vkey(new_key())]))
    result = verify_verification(site.verification(), None, None, policy=policy)
    assert sorted(result.failed()) == ["checkpoint_signature", "signature", "witnesses"]
    assert "not a log key of the policy" in detail(result, "signature")


def test_a_policy_naming_only_another_log_says_so() -> None:
    site = Site()
    policy = parse_policy(site.policy(logs=[log_vkey(site.key, "other.example/log")]))
    result = verify_verification(site.verification(), None, None, policy=policy)
    assert "signature" in result.failed()
    assert any("names no log of origin 'receipts.example.org/receipts'" in n for n in result.notes)


def test_a_policy_without_log_lines_leaves_the_key_to_key(tmp_path: Path) -> None:
    site = Site()
    target = save(tmp_path, "v.json", site.verification())
    policy = save(tmp_path, "p.txt", site.policy(logs=[]))
    assert run(target, f"--key={x_of(site.key)}", "--policy", policy).returncode == 0
    alone = run(target, "--policy", policy)
    assert alone.returncode == 2
    assert "The signer was not checked" in alone.stdout


def test_an_unreadable_policy_could_not_check(tmp_path: Path) -> None:
    site = Site()
    target = save(tmp_path, "v.json", site.verification())
    broken = save(tmp_path, "p.txt", site.policy().replace("quorum trio", "quorum trio trio"))
    done = run(target, "--policy", broken)
    assert done.returncode == 2
    assert "is not a c2sp.org/tlog-policy file: line 6:" in done.stdout
    assert run(target, "--policy", str(tmp_path / "missing.txt")).returncode == 2


def test_a_policy_key_follows_the_keys_history_to_the_key_it_hands_over_to() -> None:
    """The policy was saved when the old key was active; the site rotated since, its history
    signed over by the old key: the new key's receipt and checkpoints are trusted."""
    history = History()
    old, new = new_key(), new_key()
    history.state(old, "active", [old])
    history.state(new, "active", [new, old])
    history.state(old, "retired", [new, old])
    site = Site(key=new)
    keys = {**history.document(), "log": {"origin": ORIGIN}}
    policy = parse_policy(site.policy(logs=[log_vkey(old)]))
    bundle = {**site.bundle(), "keys": keys}
    result = verify_bundle(bundle, keys, None, policy=policy)
    assert result.status == "valid", result.as_json()
    # Without the history, the old key alone vouches for nothing the new key signed.
    alone = verify_verification(site.verification(), None, None, policy=policy)
    assert "signature" in alone.failed()


# --- the bundle ------------------------------------------------------------------------------


def test_a_bundles_tlog_proof_is_against_the_witnessed_checkpoint(tmp_path: Path) -> None:
    site = Site()
    bundle = site.bundle()
    assert "\u2014 witness1.example/cosign " in bundle["tlog_proof"]
    result = verify_bundle(bundle, None, None, policy=parse_policy(site.policy()))
    assert result.status == "valid", result.as_json()
    assert [c.name for c in result.checks] == list(BUNDLE_CHECK_NAMES)
    assert "log.witnessed" in detail(result, "tlog_proof")
    # Without a policy it is still checked as a proof, against the witnessed checkpoint.
    plain = verify_bundle(bundle, None, x_of(site.key))
    assert plain.status == "valid"
    done = run(save(tmp_path, "b.json", bundle), "--policy", save(tmp_path, "p", site.policy()))
    assert done.returncode == 0, done.stdout


def _proof_against_the_log(site: Site, bundle: dict[str, Any]) -> None:
    log = bundle["verification"]["log"]
    hashes = "".join(f"{h}\n" for h in log["inclusion_proof"])
    bundle["tlog_proof"] = (
        f"c2sp.org/tlog-proof@v1\nindex {log['index']}\n{hashes}\n{log['checkpoint']}"
    )


def _proof_with_a_flipped_cosignature(site: Site, bundle: dict[str, Any]) -> None:
    lines = bundle["tlog_proof"].splitlines(keepends=True)
    lines[-1] = flip_in_line(lines[-1])
    bundle["tlog_proof"] = "".join(lines)


def _proof_short_of_the_quorum(site: Site, bundle: dict[str, Any]) -> None:
    """A proof against a checkpoint only w1 cosigned (not the one the verification names)."""
    witnessed = bundle["verification"]["log"]["witnessed"]
    note, _claim = site.cosigned(5, (0,))
    hashes = "".join(f"{h}\n" for h in witnessed["inclusion_proof"])
    bundle["tlog_proof"] = f"c2sp.org/tlog-proof@v1\nindex 2\n{hashes}\n{note}"


BUNDLE_CORRUPTIONS: dict[str, Callable[[Site, dict[str, Any]], None]] = {
    "a tlog proof against log.checkpoint, not the witnessed one": _proof_against_the_log,
    "a flipped bit in the proof's cosignature": _proof_with_a_flipped_cosignature,
    "a proof against a checkpoint short of the quorum": _proof_short_of_the_quorum,
}


@pytest.mark.parametrize("corrupt", BUNDLE_CORRUPTIONS.values(), ids=BUNDLE_CORRUPTIONS.keys())
def test_a_bundle_whose_tlog_proof_is_against_the_wrong_checkpoint_fails(
    corrupt: Callable[[Site, dict[str, Any]], None],
) -> None:
    site = Site()
    bundle = site.bundle()
    corrupt(site, bundle)
    result = verify_bundle(bundle, None, None, policy=parse_policy(site.policy()))
    assert result.failed() == ["tlog_proof"], result.as_json()


def test_a_bundle_not_witnessed_yet_has_its_proof_against_the_log() -> None:
    site = Site()
    bundle = site.bundle(site.verification(witnessed=False))
    assert "witness1" not in bundle["tlog_proof"]
    assert verify_bundle(bundle, None, x_of(site.key)).status == "valid"
    with_policy = verify_bundle(bundle, None, None, policy=parse_policy(site.policy()))
    assert with_policy.status == "could_not_check"
    assert results(with_policy)["tlog_proof"] == "could_not_check"
    assert "not witnessed yet" in detail(with_policy, "tlog_proof")


# --- key compromise: evidence the witnesses vouch for --------------------------------------

COMPROMISED_AT = T0 + 3600


def _resigned(
    *,
    cosigned_at: int = T0,
    cosigners: tuple[int, ...] = (0, 1),
    source: str = "witnesses",
    evidence_signer: str = "old",
) -> tuple[Site, dict[str, Any], dict[str, Any]]:
    """A receipt logged under the old key, which was compromised at T0 + 1 h; the site signed
    it again with the new key, resting on the checkpoint of 3 leaves the old key signed and
    the witnesses cosigned at `cosigned_at`. The verification's log is the new key's, its
    witnessed checkpoint cosigned later."""
    old = new_key()
    site = Site(size=6, index=2, witnessed_size=6)
    new = site.key
    signer = {"old": old, "new": new, "stranger": new_key()}[evidence_signer]
    note, claim = site.cosigned(3, cosigners, signer=signer, at=cosigned_at)
    verification = site.verification()
    verification["log"]["witnessed"]["checkpoint"], verification["log"]["witnessed"][
        "cosigners"] = site.cosigned(6, at=T0 + 7200)  # fmt: skip
    verification["signature"]["evidence"] = {
        "checkpoint": note,
        "tree_size": 3,
        "leaf_index": 2,
        "inclusion_proof": [b64(h) for h in path(2, site.leaves[:3])],
        "signed_at": "2026-12-03T07:00:00.000000Z",
        "signed_at_source": source,
        **({"cosigners": claim} if source == "witnesses" else {}),
    }
    keys = {
        "keys": [jwk(old, "compromised", compromised_at=stamp(COMPROMISED_AT)), jwk(new)],
        "log": {"origin": ORIGIN},
    }
    return site, verification, keys


def test_evidence_the_witnesses_cosigned_before_the_compromise_holds() -> None:
    site, verification, keys = _resigned()
    result = verify_verification(verification, keys, None, policy=parse_policy(site.policy()))
    assert result.status == "valid", result.as_json()
    words = detail(result, "signature")
    assert "which the witnesses cosigned before then" in words
    assert f"key {kid_of(site.key)}" in words


def test_without_the_policy_evidence_rests_on_the_sites_record_as_before() -> None:
    _site, verification, keys = _resigned(cosigned_at=T0 + 7200)  # cosigned after: not read
    result = verify_verification(verification, keys, None)
    assert result.status == "valid", result.as_json()
    assert "by the site's own record" in detail(result, "signature")
    assert "not checked, as no --policy was given" in detail(result, "signature")


EVIDENCE_CORRUPTIONS: dict[str, dict[str, Any]] = {
    "cosignatures made after compromised_at": {"cosigned_at": COMPROMISED_AT + 60},
    "cosignatures made at compromised_at": {"cosigned_at": COMPROMISED_AT - 1},
    "a quorum short by one": {"cosigners": (0,)},
    "a checkpoint by a key no one lists": {"evidence_signer": "stranger"},
}


@pytest.mark.parametrize("changes", EVIDENCE_CORRUPTIONS.values(), ids=EVIDENCE_CORRUPTIONS.keys())
def test_evidence_the_witnesses_do_not_put_before_the_compromise_fails(
    changes: dict[str, Any],
) -> None:
    site, verification, keys = _resigned(**changes)
    result = verify_verification(verification, keys, None, policy=parse_policy(site.policy()))
    assert result.failed() == ["signature"], result.as_json()
    assert "evidence does not hold" in detail(result, "signature")


def test_evidence_with_a_flipped_cosignature_fails() -> None:
    site, verification, keys = _resigned()
    evidence = verification["signature"]["evidence"]
    lines = evidence["checkpoint"].splitlines(keepends=True)
    lines[-1] = flip_in_line(lines[-1])
    evidence["checkpoint"] = "".join(lines)
    result = verify_verification(verification, keys, None, policy=parse_policy(site.policy()))
    assert result.failed() == ["signature"]
    assert "does not verify" in detail(result, "signature")


def test_evidence_whose_proof_misses_the_leaf_fails() -> None:
    site, verification, keys = _resigned()
    verification["signature"]["evidence"]["inclusion_proof"] = [b64(bytes(32))] * 2
    result = verify_verification(verification, keys, None, policy=parse_policy(site.policy()))
    assert result.failed() == ["signature"]


def test_evidence_whose_claim_is_not_its_lines_fails() -> None:
    site, verification, keys = _resigned()
    verification["signature"]["evidence"]["cosigners"][0]["time"] = stamp(T0 - 86400)
    result = verify_verification(verification, keys, None, policy=parse_policy(site.policy()))
    assert result.failed() == ["signature"]


def test_with_the_policy_evidence_on_the_sites_word_alone_could_not_be_checked() -> None:
    site, verification, keys = _resigned(source="site")
    result = verify_verification(verification, keys, None, policy=parse_policy(site.policy()))
    assert result.status == "could_not_check"
    assert results(result)["signature"] == "could_not_check"
    assert "the site's word alone" in detail(result, "signature")
    # The same evidence without a policy is the site's record, which it was before.
    assert verify_verification(verification, keys, None).status == "valid"


def test_evidence_without_a_keys_document_could_not_be_checked() -> None:
    """A saved verification and a policy, and nothing to say which key was compromised when."""
    site, verification, _keys = _resigned()
    result = verify_verification(verification, None, None, policy=parse_policy(site.policy()))
    assert results(result)["signature"] == "could_not_check"
    assert "keys document" in detail(result, "signature")


def test_evidence_is_checked_by_the_command_from_a_bundle(tmp_path: Path) -> None:
    site, verification, keys = _resigned()
    bundle = {**site.bundle(verification), "keys": keys}
    target = save(tmp_path, "b.json", bundle)
    assert run(target, "--policy", save(tmp_path, "p.txt", site.policy())).returncode == 0
    late_site, late, late_keys = _resigned(cosigned_at=COMPROMISED_AT + 60)
    late_target = save(tmp_path, "late.json", {**late_site.bundle(late), "keys": late_keys})
    done = run(late_target, "--policy", save(tmp_path, "late.txt", late_site.policy()))
    assert done.returncode == 1, done.stdout


def test_verify_target_takes_the_policy_path() -> None:
    """The library's entry point, as the MCP tool and others call it."""
    site = Site()
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        target = save(Path(folder), "v.json", site.verification())
        policy = save(Path(folder), "p.txt", site.policy())
        assert verify_target(target, None, policy=policy).status == "valid"
        assert verify_target(target).status == "could_not_check"


def test_the_leaf_hash_of_the_receipt_is_the_one_the_witnessed_tree_holds() -> None:
    """The builders' own sanity: the witnessed tree holds the receipt's bytes at its index."""
    site = Site()
    raw_bytes = base64.b64decode(site.verification()["canonical_bytes"])
    assert site.leaves[site.index] == leaf_hash(raw_bytes)

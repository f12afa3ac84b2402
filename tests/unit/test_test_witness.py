"""The tests' own witness (tests/witnesses.py) does what c2sp.org/tlog-witness says a witness
does, so that the site's submitter can be tested against it: driven here by a log the test
keeps in memory (tests/witnesses.py's MemoryLog, with a key of its own), over HTTP on
loopback, one witness process per test. The RFC 6962 and signed-note code under it is checked
first against published vectors (Certificate Transparency's reference tree, the signed-note
specification's example), since the witness and the log share it.

No database and no site: these are unit tests that start a small process.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import random
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tests.witnesses import (
    EMPTY_ROOT,
    CosignatureError,
    MemoryLog,
    TestWitness,
    b64,
    consistency_proof,
    http,
    leaf_hash,
    parse_note,
    parse_vkey,
    policy_text,
    sign_note,
    tree_root,
    verify_consistency,
    verify_cosignature,
    verify_note_signature,
)

pytestmark = pytest.mark.unit

NAME = "witness-1.test.example/w"

# Certificate Transparency's reference tree (cpp/merkletree/merkle_tree_test.cc, also in
# transparency-dev/merkle's testonly): eight leaves, the root of every prefix, and proofs.
CT_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
             "606162636465666768696a6b6c6d6e6f"]  # fmt: skip
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_CONSISTENCY = {
    (1, 1): [],
    (1, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (6, 8): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
    (2, 5): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"],
    (6, 7): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}  # fmt: skip


def ct_hashes() -> list[bytes]:
    return [leaf_hash(bytes.fromhex(leaf)) for leaf in CT_LEAVES]


@pytest.fixture
def log() -> MemoryLog:
    return MemoryLog(size=5)


@pytest.fixture
def witness(tmp_path: Path, log: MemoryLog) -> Iterator[TestWitness]:
    with TestWitness(log.vkey, folder=tmp_path / "w1") as started:
        yield started


def cosigned(witness: TestWitness, log: MemoryLog, old: int, size: int | None = None) -> int:
    """Submit the log's checkpoint of `size` from `old`; the cosignature's timestamp."""
    answer = witness.add_checkpoint(log.add_checkpoint_body(old, size))
    assert answer.status == 200, answer
    return witness.verify(answer.text, log.text(size))


def flip(data: bytes, at: int = 0) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


# --- the specifications' arithmetic, against published vectors --------------------------------


def test_the_tree_roots_are_those_of_the_rfc_6962_reference_tree() -> None:
    hashes = ct_hashes()
    assert [tree_root(hashes, 0, n).hex() for n in range(9)] == CT_ROOTS
    assert EMPTY_ROOT.hex() == CT_ROOTS[0]


@pytest.mark.parametrize(("old", "new"), list(CT_CONSISTENCY))
def test_the_consistency_proofs_are_those_of_the_reference_tree_and_verify(
    old: int, new: int
) -> None:
    hashes = ct_hashes()
    proof = consistency_proof(hashes, old, new)
    assert [h.hex() for h in proof] == CT_CONSISTENCY[old, new]
    old_root, new_root = bytes.fromhex(CT_ROOTS[old]), bytes.fromhex(CT_ROOTS[new])
    assert verify_consistency(old, new, old_root, new_root, proof)
    assert not verify_consistency(old, new, new_root if old != new else EMPTY_ROOT, new_root,
                                  proof)


def test_the_verifier_takes_every_proof_of_a_tree_and_no_proof_changed_in_any_way() -> None:
    """The verifier (RFC 9162's iteration) and the prover (RFC 6962's recursion) are two
    derivations: they agree on every pair of sizes, and no altered proof passes."""
    hashes = [leaf_hash(str(i).encode()) for i in range(40)]
    for new in range(1, 41):
        new_root = tree_root(hashes, 0, new)
        for old in range(1, new + 1):
            old_root = tree_root(hashes, 0, old)
            proof = consistency_proof(hashes, old, new)
            assert verify_consistency(old, new, old_root, new_root, proof), (old, new)
            if old == new:
                continue
            wrong = [proof[:-1], [*proof, proof[-1]], proof[::-1] if len(proof) > 1 else [],
                     *([*proof[:i], flip(p, 31), *proof[i + 1 :]] for i, p in enumerate(proof))]
            for bad in wrong:
                assert not verify_consistency(old, new, old_root, new_root, bad), (old, new)
            assert not verify_consistency(old, new, flip(old_root), new_root, proof)
            assert not verify_consistency(old, new, old_root, flip(new_root), proof)


def test_the_signed_note_specifications_example_verifies_under_its_vkey() -> None:
    vkey = parse_vkey("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k")
    note = parse_note(
        "This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfX"
        "ppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
    )
    (signature,) = note.signatures
    assert note.text == "This is an example message.\n"
    assert verify_note_signature(signature, note.text, vkey)
    assert not verify_note_signature(signature, "This is another message.\n", vkey)


# --- add-checkpoint ---------------------------------------------------------------------------


def test_the_first_checkpoint_with_old_0_is_cosigned_and_its_cosignature_verifies(
    witness: TestWitness, log: MemoryLog
) -> None:
    before = int(time.time())
    answer = witness.add_checkpoint(log.add_checkpoint_body(0))
    after = int(time.time())
    assert answer.status == 200, answer
    # One signature line, spelt out from tlog-cosignature rather than read back with the
    # module's own verifier.
    assert answer.text.endswith("\n") and answer.text.count("\n") == 1
    dash, name, encoded = answer.text[:-1].split(" ")
    assert (dash, name) == ("\u2014", NAME)
    raw = base64.b64decode(encoded, validate=True)
    assert len(raw) == 4 + 8 + 64
    public = witness.public
    assert raw[:4] == hashlib.sha256(NAME.encode() + b"\n\x04" + public).digest()[:4]
    timestamp = int.from_bytes(raw[4:12], "big")
    assert 0 < before <= timestamp <= after
    message = f"cosignature/v1\ntime {timestamp}\n{log.origin}\n5\n{b64(log.root())}\n"
    Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message.encode())
    assert witness.vkey == f"{NAME}+{raw[:4].hex()}+{b64(b'\x04' + public)}"
    assert witness.verify(answer.text, log.text()) == timestamp
    held = witness.state()[log.origin]
    assert (held["size"], held["root"]) == (5, b64(log.root()))


def test_a_growing_log_is_cosigned_at_each_size_it_proves_consistent(
    witness: TestWitness, log: MemoryLog
) -> None:
    cosigned(witness, log, 0)
    for grown in (1, 2, 9, 100, 0):  # 0: the same size and root again, cosigned afresh
        old = log.size
        log.append(grown)
        cosigned(witness, log, old)
        assert witness.state()[log.origin]["size"] == log.size
    assert witness.state()[log.origin]["root"] == b64(log.root())


def test_a_wrong_old_size_gets_409_with_the_size_the_witness_holds(
    witness: TestWitness, log: MemoryLog
) -> None:
    cosigned(witness, log, 0)
    log.append(3)
    for old in (0, 3, 6):
        answer = witness.add_checkpoint(log.add_checkpoint_body(old))
        assert answer.status == 409, answer
        assert answer.content_type == "text/x.tlog.size"
        assert answer.body == b"5\n"
    assert witness.state()[log.origin]["size"] == 5


@pytest.mark.parametrize("change", ["flipped", "short", "long", "empty", "another tree's"])
def test_a_consistency_proof_that_does_not_verify_gets_422(
    witness: TestWitness, log: MemoryLog, change: str
) -> None:
    cosigned(witness, log, 0)
    log.append(6)
    proof = log.proof(5)
    bad = {
        "flipped": [proof[0], flip(proof[1], 7), *proof[2:]],
        "short": proof[:-1],
        "long": [*proof, proof[0]],
        "empty": [],
        "another tree's": MemoryLog("other.test.example/log", size=11).proof(5),
    }[change]
    answer = witness.add_checkpoint(log.add_checkpoint_body(5, proof=bad))
    assert answer.status == 422, answer
    assert witness.state()[log.origin]["size"] == 5
    assert witness.add_checkpoint(log.add_checkpoint_body(5)).status == 200


def test_a_checkpoint_of_size_0_must_have_the_empty_trees_root(
    witness: TestWitness, log: MemoryLog
) -> None:
    empty = MemoryLog(log.origin, key=log.key)
    wrong = empty.add_checkpoint_body(0, checkpoint=empty.checkpoint(root=leaf_hash(b"")))
    assert witness.add_checkpoint(wrong).status == 422
    assert witness.state() == {}
    answer = witness.add_checkpoint(empty.add_checkpoint_body(0))
    assert answer.status == 200, answer
    assert witness.state()[empty.origin]["size"] == 0


def test_a_proof_from_old_0_must_be_empty(witness: TestWitness, log: MemoryLog) -> None:
    answer = witness.add_checkpoint(log.add_checkpoint_body(0, proof=log.proof(1)))
    assert answer.status == 422, answer
    assert witness.state() == {}


def test_the_same_size_with_another_root_gets_422(witness: TestWitness, log: MemoryLog) -> None:
    cosigned(witness, log, 0)
    fork = log.checkpoint(root=leaf_hash(b"a fork"))  # signed by the log's own key
    answer = witness.add_checkpoint(log.add_checkpoint_body(5, proof=[], checkpoint=fork))
    assert answer.status == 422, answer
    assert witness.state()[log.origin]["root"] == b64(log.root())


def test_a_checkpoint_without_a_valid_signature_by_a_trusted_key_gets_403(
    witness: TestWitness, log: MemoryLog
) -> None:
    stranger = Ed25519PrivateKey.generate()
    unknown = log.checkpoint(signers=[(log.origin, stranger)])  # same name, another key id
    assert witness.add_checkpoint(log.add_checkpoint_body(0, checkpoint=unknown)).status == 403
    text, line = log.text(), sign_note(log.text(), log.origin, log.key)
    raw = base64.b64decode(line.split(" ")[2])
    forged = text + "\n" + line.replace(b64(raw), b64(flip(raw, 40)))  # its name and id
    assert witness.add_checkpoint(log.add_checkpoint_body(0, checkpoint=forged)).status == 403
    assert witness.state() == {}
    # Signatures of unknown keys are ignored, beside a valid one.
    both = log.checkpoint(signers=[("someone.example/else", stranger), (log.origin, log.key)])
    answer = witness.add_checkpoint(log.add_checkpoint_body(0, checkpoint=both))
    assert answer.status == 200, answer


def test_a_witness_trusts_every_key_it_was_given_for_a_log(tmp_path: Path) -> None:
    log = MemoryLog(size=4)
    rotated = MemoryLog(log.origin, size=4)  # the same log, signing with its next key
    with TestWitness([log.vkey, rotated.vkey], folder=tmp_path / "w") as witness:
        assert witness.add_checkpoint(rotated.add_checkpoint_body(0)).status == 200


def test_a_log_the_witness_does_not_know_gets_404(witness: TestWitness) -> None:
    other = MemoryLog("other.test.example/log", size=3)
    assert witness.add_checkpoint(other.add_checkpoint_body(0)).status == 404
    assert witness.state() == {}


def test_an_old_size_larger_than_the_checkpoints_gets_400(
    witness: TestWitness, log: MemoryLog
) -> None:
    assert witness.add_checkpoint(log.add_checkpoint_body(6, proof=[])).status == 400


def _bodies(log: MemoryLog) -> dict[str, bytes]:
    checkpoint = log.checkpoint()
    text = log.text()
    proof_line = b64(log.root(2)) + "\n"
    return {
        "empty": b"",
        "no blank line": f"old 0\n{text}".encode(),
        "old 01": f"old 01\n\n{checkpoint}".encode(),
        "old -1": f"old -1\n\n{checkpoint}".encode(),
        "Old 0": f"Old 0\n\n{checkpoint}".encode(),
        "old 0, a space": f"old 0 \n\n{checkpoint}".encode(),
        "64 proof lines": f"old 0\n{proof_line * 64}\n{checkpoint}".encode(),
        "not base64": f"old 0\nnot base64!\n\n{checkpoint}".encode(),
        "a short hash": f"old 0\n{b64(bytes(31))}\n\n{checkpoint}".encode(),
        "no signature": f"old 0\n\n{text}\n".encode(),
        "size 05": log.add_checkpoint_body(0, checkpoint=checkpoint.replace("\n5\n", "\n05\n")),
        "a root of 31 bytes": log.add_checkpoint_body(
            0, checkpoint=log.checkpoint(root=bytes(31))),
        "CRLF": f"old 0\n\n{checkpoint}".replace("\n", "\r\n").encode(),
        "not UTF-8": f"old 0\n\n{checkpoint}".encode() + b"\xff",
    }


STEADY = MemoryLog("steady.test.example/log", size=5)


@pytest.fixture(scope="module")
def steady_witness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestWitness]:
    """One witness for the tests that must leave it as they found it (holding nothing)."""
    with TestWitness(STEADY.vkey, folder=tmp_path_factory.mktemp("steady")) as started:
        yield started


@pytest.mark.parametrize("kind", list(_bodies(STEADY)))
def test_a_malformed_body_gets_400(steady_witness: TestWitness, kind: str) -> None:
    answer = steady_witness.add_checkpoint(_bodies(STEADY)[kind])
    assert answer.status == 400, answer
    assert steady_witness.state() == {}


def test_the_witness_answers_nothing_but_its_endpoints(steady_witness: TestWitness) -> None:
    body, url = STEADY.add_checkpoint_body(0), steady_witness.url
    assert http("GET", f"{url}/add-checkpoint").status == 405
    assert http("POST", f"{url}/checkpoint", body).status == 404
    assert http("POST", url.replace("/w1", "/w2") + "/add-checkpoint", body).status == 404
    assert http("GET", url.replace("/w1", "") + "/checkpoint").status == 404
    assert steady_witness.state() == {}


# --- its state --------------------------------------------------------------------------------


def test_what_it_cosigned_survives_a_crash_and_a_restart_on_the_same_port(
    witness: TestWitness, log: MemoryLog
) -> None:
    cosigned(witness, log, 0)
    url = witness.url
    witness.stop(graceful=False)  # SIGKILL, the moment after the answer: nothing flushed later
    assert witness.returncode == -9
    assert witness.state()[log.origin]["size"] == 5
    witness.start()
    assert witness.url == url
    answer = witness.add_checkpoint(log.add_checkpoint_body(0))
    assert (answer.status, answer.body) == (409, b"5\n")
    log.append(3)
    cosigned(witness, log, 5)


def test_a_preloaded_size_answers_the_first_submission_with_409(tmp_path: Path) -> None:
    log = MemoryLog(size=9)
    with TestWitness(log.vkey, preload=(7, log.root(7)), folder=tmp_path / "w") as witness:
        assert witness.monitoring_checkpoint(log.origin).status == 404  # held, never cosigned
        answer = witness.add_checkpoint(log.add_checkpoint_body(0))
        assert (answer.status, answer.content_type, answer.body) == (
            409, "text/x.tlog.size", b"7\n")
        cosigned(witness, log, 7)
        witness.restart()  # the preload does not undo what it cosigned since
        assert witness.state()[log.origin]["size"] == 9


def test_of_simultaneous_submissions_from_the_same_size_only_one_is_cosigned(
    witness: TestWitness, log: MemoryLog
) -> None:
    """The race tlog-witness warns of: checks and updates are one step, so sixteen requests
    that all start from the size it holds cannot all pass."""
    cosigned(witness, log, 0)
    log.append(16)
    bodies = [log.add_checkpoint_body(5, 5 + i) for i in range(1, 17)]
    start = threading.Barrier(len(bodies))
    answers: dict[int, tuple[int, bytes]] = {}

    def submit(i: int) -> None:
        start.wait()
        answer = witness.add_checkpoint(bodies[i])
        answers[5 + i + 1] = (answer.status, answer.body)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [size for size, (status, _) in answers.items() if status == 200]
    assert len(answers) == 16 and len(winners) == 1, answers
    (winner,) = winners
    assert all(body == f"{winner}\n".encode()
               for size, (status, body) in answers.items() if status == 409)
    assert {status for status, _ in answers.values()} == {200, 409}
    assert witness.state()[log.origin]["size"] == winner


def test_concurrent_submissions_never_roll_the_state_back(
    witness: TestWitness, log: MemoryLog
) -> None:
    """Eight submitters race the whole way from 0 to 120 leaves, each learning the size from
    the 409s: the cosigned steps chain into one line (each starts where the one before ended),
    and the state ends at the largest size cosigned."""
    log.append(115)
    steps: list[tuple[int, int]] = []
    unexpected: list[object] = []
    lock = threading.Lock()

    def submitter(seed: int) -> None:
        rng, known = random.Random(seed), 0
        for _ in range(40):
            if known == log.size:
                return
            size = rng.randint(known + 1, log.size)
            answer = witness.add_checkpoint(log.add_checkpoint_body(known, size))
            if answer.status == 200:
                with lock:
                    steps.append((known, size))
                known = size
            elif answer.status == 409:
                known = int(answer.text)
            else:
                unexpected.append(answer)
                return

    threads = [threading.Thread(target=submitter, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not unexpected
    chain = sorted(steps)
    assert chain and chain[0][0] == 0
    assert all(before[1] == after[0] for before, after in itertools.pairwise(chain))
    assert len({old for old, _ in chain}) == len(chain)
    assert witness.state()[log.origin]["size"] == chain[-1][1] == max(s for _, s in chain)


# --- its modes ---------------------------------------------------------------------------------


def test_mode_refuse_answers_403_to_every_checkpoint_and_cosigns_nothing(
    tmp_path: Path, log: MemoryLog
) -> None:
    with TestWitness(log.vkey, mode="refuse", folder=tmp_path / "w") as witness:
        assert witness.add_checkpoint(log.add_checkpoint_body(0)).status == 403
        assert witness.state() == {}
        witness.restart(mode="ok")  # the same witness, agreeable again
        cosigned(witness, log, 0)


def test_mode_unknown_answers_404_to_every_checkpoint(tmp_path: Path, log: MemoryLog) -> None:
    with TestWitness(log.vkey, mode="unknown", folder=tmp_path / "w") as witness:
        assert witness.add_checkpoint(log.add_checkpoint_body(0)).status == 404
        assert witness.state() == {}


def test_mode_slow_answers_after_its_delay_and_cosigns_even_for_a_client_that_left(
    tmp_path: Path, log: MemoryLog
) -> None:
    with TestWitness(log.vkey, mode="slow", delay=1.0, folder=tmp_path / "w") as witness:
        with pytest.raises(OSError, match="timed out"):
            witness.add_checkpoint(log.add_checkpoint_body(0), timeout=0.3)
        deadline = time.monotonic() + 10
        while log.origin not in witness.state() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert witness.state()[log.origin]["size"] == 5  # it went on after the client left
        log.append(3)
        answer = witness.add_checkpoint(log.add_checkpoint_body(5))
        assert answer.status == 200 and answer.elapsed >= 1.0, answer
        witness.verify(answer.text, log.text())


def test_mode_wrong_key_answers_a_cosignature_under_its_name_that_does_not_verify(
    tmp_path: Path, log: MemoryLog
) -> None:
    with TestWitness(log.vkey, mode="wrong-key", folder=tmp_path / "w") as witness:
        answer = witness.add_checkpoint(log.add_checkpoint_body(0))
        assert answer.status == 200, answer
        key_id = base64.b64decode(answer.text.split(" ")[2])[:4]
        assert witness.vkey.split("+")[1] == key_id.hex()  # its advertised key's id
        with pytest.raises(CosignatureError, match="does not verify"):
            witness.verify(answer.text, log.text())


def test_mode_other_key_answers_a_valid_cosignature_by_a_key_nobody_knows(
    tmp_path: Path, log: MemoryLog
) -> None:
    with TestWitness(log.vkey, mode="other-key", folder=tmp_path / "w") as witness:
        answer = witness.add_checkpoint(log.add_checkpoint_body(0))
        assert answer.status == 200, answer
        with pytest.raises(CosignatureError, match="is not by"):
            witness.verify(answer.text, log.text())


def test_a_time_offset_moves_the_cosignatures_timestamp(tmp_path: Path, log: MemoryLog) -> None:
    with TestWitness(log.vkey, time_offset=-3600, folder=tmp_path / "w") as witness:
        now = time.time()
        assert abs(cosigned(witness, log, 0) - (now - 3600)) < 5


def test_a_stopped_witness_is_down_and_refuses_connections(
    witness: TestWitness, log: MemoryLog
) -> None:
    url = witness.url
    witness.stop()
    with pytest.raises(urllib.error.URLError, match="refused"):
        http("POST", f"{url}/add-checkpoint", log.add_checkpoint_body(0), timeout=5)


def test_a_witness_will_not_start_with_a_log_key_that_is_not_a_note_key(
    tmp_path: Path, log: MemoryLog
) -> None:
    cosigner = TestWitness(log.vkey, folder=tmp_path / "other")
    with pytest.raises(RuntimeError, match="signature type 0x04, not 0x01"):
        TestWitness(cosigner.vkey, folder=tmp_path / "w").start()


# --- what it says it did -----------------------------------------------------------------------


def test_the_monitoring_checkpoint_carries_the_logs_signature_and_the_cosignature(
    witness: TestWitness, log: MemoryLog
) -> None:
    assert witness.monitoring_checkpoint(log.origin).status == 404
    timestamp = cosigned(witness, log, 0)
    answer = witness.monitoring_checkpoint(log.origin)
    assert answer.status == 200 and answer.content_type.startswith("text/plain")
    note = parse_note(answer.text)
    assert note.text == log.text()
    by_log, by_witness = note.signatures
    assert verify_note_signature(by_log, note.text, parse_vkey(log.vkey))
    assert verify_cosignature(by_witness.line, note.text, witness.vkey) == timestamp


def test_the_record_and_the_log_lines_say_what_it_received_and_answered(
    witness: TestWitness, log: MemoryLog
) -> None:
    first = log.add_checkpoint_body(0)
    cosigned(witness, log, 0)
    witness.add_checkpoint(first)  # 409 now
    witness.stop()
    assert witness.returncode == 0  # SIGTERM: a clean exit
    requests = witness.requests()
    assert [(r.method, r.path, r.status) for r in requests] == [
        ("POST", "/w1/add-checkpoint", 200), ("POST", "/w1/add-checkpoint", 409)]
    assert requests[0].body == requests[1].body == first
    assert requests[1].response == b"5\n" and requests[1].content_type == "text/x.tlog.size"
    lines = witness.stderr().splitlines()
    assert [line.split(" ")[:4] for line in lines[:2]] == [
        [NAME, "POST", "/w1/add-checkpoint", "200"], [NAME, "POST", "/w1/add-checkpoint", "409"]]
    assert lines[2:] == [f"{NAME} stopped"]


def test_a_forged_cosignature_line_is_refused_by_the_verifier(
    witness: TestWitness, log: MemoryLog
) -> None:
    """The tests' verifier itself catches what a submitter must: a changed checkpoint, a
    changed timestamp."""
    answer = witness.add_checkpoint(log.add_checkpoint_body(0))
    with pytest.raises(CosignatureError):
        witness.verify(answer.text, log.text(4))
    raw = base64.b64decode(answer.text.split(" ")[2])
    later = raw[:4] + (int.from_bytes(raw[4:12], "big") + 1).to_bytes(8, "big") + raw[12:]
    with pytest.raises(CosignatureError):
        witness.verify(answer.text.replace(b64(raw), b64(later)), log.text())
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(witness.public).verify(raw[12:], log.text().encode())


def test_a_policy_names_the_log_and_the_witnesses_with_their_submission_urls(
    tmp_path: Path, log: MemoryLog
) -> None:
    one = TestWitness.numbered(1, log.vkey, folder=tmp_path / "w1")
    two = TestWitness.numbered(2, log.vkey, folder=tmp_path / "w2")
    one.port, two.port = 1001, 1002  # never started: only their URLs are needed
    assert policy_text(log.vkey, [one, two], quorum=1).splitlines() == [
        f"log {log.vkey}",
        f"witness w1 {one.vkey} http://127.0.0.1:1001/w1",
        f"witness w2 {two.vkey} http://127.0.0.1:1002/w2",
        "group witnesses 1 w1 w2",
        "quorum witnesses",
    ]
    assert parse_vkey(two.vkey).name == "witness-2.test.example/w" != one.name

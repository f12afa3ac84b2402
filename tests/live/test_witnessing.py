"""Witnesses, live: a real gunicorn, `manage.py witness` as its own long-running process, and
witnesses of the tests' own (tests/witnesses.py: separate processes on loopback, written from
c2sp.org/tlog-witness with code of their own; no public witness can be reached from here).

What is held: a new receipt is in a checkpoint cosigned by both witnesses of a 2-of-2 policy
within WITNESS_INTERVAL; each witness is asked no more often than that; a witness that is down,
that refuses, or that answers too late is logged and tried again, and never holds up ingest; a
late witness is caught up from the size its 409 names; one `witness` process submits at a time
whatever the number started; a 1-of-2 policy is met with one witness down; and the log's tiles,
read by a reader of the tests' own, give the checkpoint's root.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from receiptsite.integrity import note
from receiptsite.integrity.keys import generate_private_key_pem, load_private_key_pem, public_raw
from tests import tilereader
from tests.livesite import PYTHON, REPO, VENV_BIN, LiveSite, Response
from tests.witnesses import TestWitness, parse_note, policy_text, verify_cosignature

pytestmark = pytest.mark.live
# What does not depend on the database runs once (.ci/run: on SQLite); the submitter's lock,
# its outages and its answers run on both (the lock is PostgreSQL's advisory lock there).
ONCE = pytest.mark.any_database

ORIGIN = "witnessed.test.example/receipts"
INTERVAL = 2  # seconds: WITNESS_INTERVAL of these sites (longer than the submitter's 1 s look)
DEADLINE = 30.0  # seconds for anything that should happen within a few intervals


def wait_for(condition: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline} s: {what}")
        time.sleep(0.1)


@dataclass
class Witnessed:
    """A live site whose checkpoints the `witnesses` cosign, under `quorum`."""

    site: LiveSite
    witnesses: list[TestWitness]
    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_submitter(self, name: str = "witness") -> subprocess.Popen[bytes]:
        """`manage.py witness` for this site, as its own process (stderr: its log lines)."""
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(
            [str(PYTHON), "manage.py", "witness"], cwd=REPO, env=self.site.base_env,
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.processes.append(process)
        return process

    def log(self, name: str = "witness") -> list[dict[str, Any]]:
        path = self.folder / f"{name}.log"
        lines = path.read_text("utf-8", "replace").splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def said(self, words: str, name: str = "witness") -> bool:
        return any(words in entry["message"] for entry in self.log(name))

    def witnessed(self) -> Response:
        return self.site.get("/api/log/witnessed-checkpoint")

    def witnessed_size(self) -> int:
        answer = self.witnessed()
        if answer.status != 200:
            return 0
        return int(answer.text.split("\n")[1])

    def publish(self, key: str) -> dict[str, Any]:
        answer = self.site.post("/api/receipts", body(key))
        assert answer.status == 201, answer
        stored: dict[str, Any] = answer.json()
        return stored

    def stop_submitters(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()


def body(key: str) -> dict[str, Any]:
    return {
        "workflow_id": "wf-witnessed",
        "phase": "end",
        "subject": {"type": "tool", "name": "send_invoice"},
        "outcome": "succeeded",
        "idempotency_key": key,
    }


@contextlib.contextmanager
def witnessed_site(
    tmp: Path, quorum: str, count: int = 2, *, origin: str = ORIGIN, interval: int = INTERVAL
) -> Iterator[Witnessed]:
    """A live site that `count` witnesses of the tests' own cosign, under `quorum` (the
    browser tests' witnessed sites are made here too). Witnesses first (they must trust the
    log's key, which the test makes and names with a fixed origin), then the policy naming
    them, then the site, which reads it at start."""
    key_file = tmp / "site-key.pem"
    key_file.write_bytes(generate_private_key_pem())
    key_file.chmod(0o600)
    raw = public_raw(load_private_key_pem(key_file.read_bytes()))
    log_vkey = note.verifier_key(origin, raw)
    witnesses = [TestWitness.numbered(n, [log_vkey], folder=tmp / f"w{n}") for n in
                 range(1, count + 1)]  # fmt: skip
    try:
        for witness in witnesses:
            witness.start()
        policy = tmp / "policy.txt"
        policy.write_text(policy_text([log_vkey], witnesses, quorum))
        env = {
            "SIGNING_KEY_FILE": str(key_file),
            "LOG_ORIGIN": origin,
            "WITNESS_POLICY_FILE": str(policy),
            "WITNESS_INTERVAL": str(interval),
        }
        with LiveSite(workers=2, env=env) as site:
            witnessed = Witnessed(site, witnesses, tmp)
            try:
                yield witnessed
            finally:
                witnessed.stop_submitters()
    finally:
        for witness in witnesses:
            witness.close()


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Witnessed]:
    """A site whose policy needs both of its two witnesses, with its `witness` running."""
    with witnessed_site(tmp_path_factory.mktemp("both"), "all") as site:
        yield site


@pytest.fixture
def running(both: Witnessed) -> Iterator[Witnessed]:
    """`both` with its submitter running and both witnesses up, as each test starts."""
    for witness in both.witnesses:
        if not witness.running or witness.mode != "ok":
            witness.restart(mode="ok")
    if not any(p.poll() is None for p in both.processes):
        both.start_submitter()
    yield both


def cosigners(text: str) -> list[str]:
    return [name for name, _ in parse_cosignatures(text)]


def parse_cosignatures(text: str) -> list[tuple[str, str]]:
    """(key name, line) of each signature line after the log's own (the first)."""
    lines = text[text.rindex("\n\n") + 2 : -1].split("\n")
    return [(line.split(" ")[1], line) for line in lines[1:]]


def test_a_new_receipt_is_cosigned_by_both_witnesses_within_the_interval(
    running: Witnessed,
) -> None:
    stored = running.publish("within-the-interval")
    published = time.monotonic()
    size = stored["log_index"] + 1
    wait_for(lambda: running.witnessed_size() >= size, "both witnesses cosign the new tree")
    elapsed = time.monotonic() - published
    # The interval, one look at the log (a second) and the two round trips, with room for a
    # loaded machine: on this 2-core machine under the whole suite, 8 s was seen (at the last
    # landed commit too), so the bound is a few intervals, not minutes of retries.
    assert elapsed < 3 * INTERVAL + 6, elapsed
    text = running.witnessed().text
    names = cosigners(text)
    assert sorted(names) == sorted(w.name for w in running.witnesses)
    # Each line verifies with the tests' own cosignature code, under the witness's key.
    body = text[: text.index("\n\n") + 1]
    for witness in running.witnesses:
        line = next(line for name, line in parse_cosignatures(text) if name == witness.name)
        assert verify_cosignature(line, body, witness.vkey) > 0
    verification = running.site.get(f"/api/receipt/{stored['id']}/verify").json()
    assert verification["log"]["witnessed"]["checkpoint"] == text


def test_each_witness_is_asked_no_more_often_than_the_interval(running: Witnessed) -> None:
    witness = running.witnesses[0]
    before = len(witness.requests())
    end = time.monotonic() + 4 * INTERVAL
    n = 0
    while time.monotonic() < end:
        running.publish(f"steady-{n}")
        n += 1
        time.sleep(0.05)
    wait_for(lambda: len(witness.requests()) >= before + 2, "the witness is asked again")
    asked = [r for r in witness.requests()[before:] if r.method == "POST"]
    # A 409's retry goes at once, with the same checkpoint: count rounds, not retries.
    rounds = [r.time for r in asked if r.status != 409]
    gaps = [b - a for a, b in zip(rounds, rounds[1:], strict=False)]
    assert gaps and min(gaps) >= INTERVAL * 0.9, gaps
    # Many receipts, few submissions: one checkpoint a round, not one a receipt.
    assert len(rounds) < n


def test_a_witness_that_is_down_is_retried_and_never_holds_up_ingest(
    running: Witnessed,
) -> None:
    first, second = running.witnesses
    running.publish("before-the-outage")
    wait_for(lambda: running.witnessed_size() == int(running.site.get(
        "/api/log/checkpoint").text.split("\n")[1]), "the tree before the outage is witnessed")
    held = running.witnessed_size()
    second.stop()
    started = time.monotonic()
    stored = running.publish("during-the-outage")
    assert time.monotonic() - started < 2  # ingest waits for no witness
    wait_for(lambda: running.said(f"witness {second.name} did not answer"), "the outage is logged")
    assert running.witnessed_size() == held  # 2 of 2: one is not enough
    second.start()
    wait_for(lambda: running.witnessed_size() > stored["log_index"], "caught up after")
    # It was caught up with a consistency proof from the size it held.
    last = [r for r in second.requests() if r.status == 200][-1]
    assert last.text.startswith(f"old {held}\n")
    assert len(last.text.split("\n\n")[0].split("\n")) > 1  # old line, then proof hashes


@pytest.mark.parametrize(
    ("mode", "words"),
    [("refuse", "refused with 403"), ("unknown", "refused with 404"),
     ("wrong-key", "a cosignature line of its key does not verify")],
)  # fmt: skip
def test_a_witness_that_refuses_is_logged_and_tried_again(
    running: Witnessed, mode: str, words: str
) -> None:
    second = running.witnesses[1]
    second.restart(mode=mode)
    before = len(second.requests())
    stored = running.publish(f"refused-by-{mode}")
    wait_for(lambda: len(second.requests()) >= before + 2, "asked again after the interval")
    assert running.said(words)
    assert running.witnessed_size() <= stored["log_index"]  # nothing stored from it
    second.restart(mode="ok")
    wait_for(lambda: running.witnessed_size() > stored["log_index"], "witnessed once it agrees")


def test_a_witness_that_answers_too_late_is_caught_up_from_the_size_its_409_names(
    running: Witnessed,
) -> None:
    second = running.witnesses[1]
    second.restart(mode="slow", delay=4.0)  # longer than the submitter's 2 s timeout
    before = len(second.requests())
    stored = running.publish("answered-too-late")
    wait_for(lambda: running.said(f"witness {second.name} did not answer"), "the timeout")
    # The witness cosigned and kept the tree after the submitter had given up.
    wait_for(lambda: 200 in [r.status for r in second.requests()[before:]], "it cosigned late")
    late = [r.status for r in second.requests()[before:]].index(200) + before
    second.restart(mode="ok")
    wait_for(lambda: running.witnessed_size() > stored["log_index"], "witnessed after")
    # The submitter did not know what the witness held: its 409 said so, and the submission
    # that followed was from that size.
    after = second.requests()[late + 1 :]
    statuses = [r.status for r in after]
    assert 409 in statuses, statuses
    conflict = statuses.index(409)
    held = after[conflict].response.decode()
    retry = next(r for r in after[conflict + 1 :] if r.status == 200)
    assert retry.text.startswith(f"old {held}"), (held, retry.text)
    assert running.said(f"witness {second.name} holds")


def test_only_one_witness_process_submits_and_another_takes_over(running: Witnessed) -> None:
    spare = running.start_submitter("spare")
    wait_for(lambda: running.said("holds the lock; waiting", "spare"), "the spare waits")
    first = running.processes[0]
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=15)
    stored = running.publish("after-the-takeover")
    wait_for(lambda: running.witnessed_size() > stored["log_index"], "the spare submits",
             deadline=DEADLINE + 10)  # fmt: skip
    assert spare.poll() is None
    assert running.said("cosigned the tree", "spare")


@ONCE
def test_the_tiles_give_the_checkpoints_root_to_a_reader_of_the_tests_own(
    running: Witnessed,
) -> None:
    for n in range(3):
        running.publish(f"tiles-{n}")
    raw = public_raw(load_private_key_pem(Path(running.site.base_env["SIGNING_KEY_FILE"])
                                          .read_bytes()))  # fmt: skip
    read = tilereader.read_log(running.site.url + "/log", public_key=raw, origin=ORIGIN)
    assert read.root == read.checkpoint.root
    assert len(read.leaves) == read.checkpoint.size
    assert all(f.status == 200 for f in read.fetched)
    # The witnessed checkpoint is of the same log: its root is the tiles' root at its size.
    wait_for(lambda: running.witnessed_size() > 0, "something is witnessed")
    text = running.witnessed().text
    witnessed = parse_note(text)
    _origin, size, root = witnessed.text.split("\n")[:3]
    if int(size) <= read.checkpoint.size:
        assert read.root_at(int(size)) == base64.b64decode(root)


@ONCE
def test_witness_once_exits_0_only_once_the_quorum_is_met(tmp_path: Path) -> None:
    with witnessed_site(tmp_path, "any") as site:
        site.publish("once")
        site.witnesses[1].stop()
        done = subprocess.run(
            [str(PYTHON), "manage.py", "witness", "--once"], cwd=REPO, env=site.site.base_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"{site.witnesses[0].name}: cosigned" in done.stdout
        assert f"{site.witnesses[1].name}: not cosigned" in done.stdout
        assert "is witnessed" in done.stdout
        # 1 of 2: one cosignature is the quorum.
        assert cosigners(site.witnessed().text) == [site.witnesses[0].name]
        # With the other one refusing too, nothing new is witnessed: exit 1, and why.
        site.witnesses[0].restart(mode="refuse")
        site.publish("once-more")
        done = subprocess.run(
            [str(PYTHON), "manage.py", "witness", "--once"], cwd=REPO, env=site.site.base_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1
        assert "does not meet the policy's quorum yet" in done.stderr


VERIFY = VENV_BIN / "receipt-verify"


def receipt_verify(*args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([str(VERIFY), *args, "--json"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def checks_of(result: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["result"] for check in result["checks"]}


@ONCE
def test_a_policy_file_and_a_bundle_are_all_a_verifier_needs(
    running: Witnessed, tmp_path: Path
) -> None:
    stored = running.publish("offline-with-the-policy")
    wait_for(lambda: running.witnessed_size() > stored["log_index"], "witnessed")
    bundle = running.site.get(f"/run/{stored['id']}/bundle.json").json()
    saved = tmp_path / "receipt.bundle.json"
    saved.write_text(json.dumps(bundle))
    # The policy as the site publishes it for verifiers (no URLs), kept once.
    policy = tmp_path / "policy.txt"
    policy.write_text(running.site.get("/.well-known/receipt-keys.json").json()["log"][
        "witness_policy"])  # fmt: skip
    status, result = receipt_verify(str(saved), f"--policy={policy}")
    assert status == 0, result
    assert checks_of(result)["witnesses"] == "pass"
    assert set(checks_of(result).values()) == {"pass"}

    # One cosignature changed in the bundle's tlog proof and its witnessed checkpoint.
    name = running.witnesses[1].name
    witnessed = bundle["verification"]["log"]["witnessed"]["checkpoint"]
    line = next(line for n, line in parse_cosignatures(witnessed) if n == name)
    blob = bytearray(base64.b64decode(line.split(" ")[2]))
    blob[-1] ^= 1
    forged = f"— {name} {base64.b64encode(bytes(blob)).decode()}"
    text = json.dumps(bundle).replace(json.dumps(line)[1:-1], json.dumps(forged)[1:-1])
    saved.write_text(text)
    status, result = receipt_verify(str(saved), f"--policy={policy}")
    assert status == 1 and checks_of(result)["witnesses"] == "fail", result

    # Without a policy the witnesses are reported, not required, and the signer unchecked.
    saved.write_text(json.dumps(bundle))
    status, result = receipt_verify(str(saved))
    assert status == 2 and "witnesses" not in checks_of(result)


@ONCE
def test_a_receipt_not_yet_witnessed_is_could_not_check_with_a_policy(
    running: Witnessed, tmp_path: Path
) -> None:
    running.processes[0].send_signal(signal.SIGSTOP)  # the submitter paused: nothing new
    try:
        stored = running.publish("not-yet-witnessed")
        saved = tmp_path / "receipt.bundle.json"
        saved.write_bytes(running.site.get(f"/run/{stored['id']}/bundle.json").body)
    finally:
        running.processes[0].send_signal(signal.SIGCONT)
    policy = tmp_path / "policy.txt"
    policy.write_text(policy_text(running.witnesses[0].log_vkeys, running.witnesses, "all"))
    status, result = receipt_verify(str(saved), f"--policy={policy}")
    assert status == 2, result
    assert checks_of(result)["witnesses"] == "could_not_check"


def log_key_id(text: str) -> str:
    """The key id (hex) of a signed note's first signature line: the log's."""
    line = text[text.rindex("\n\n") + 2 :].split("\n")[0]
    return base64.b64decode(line.split(" ")[2])[:4].hex()


@ONCE
def test_a_compromise_rests_on_the_witnesses_and_a_verifier_with_the_policy_checks_it(
    tmp_path: Path,
) -> None:
    with witnessed_site(tmp_path, "all") as site:
        site.start_submitter()
        before = site.publish("logged-before")
        wait_for(lambda: site.witnessed_size() > before["log_index"], "witnessed")
        time.sleep(1.1)  # the cosignatures' whole seconds before the compromise
        kid = site.site.get("/.well-known/receipt-keys.json").json()["keys"][0]["kid"]
        site.stop_submitters()
        at = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        report = site.site.manage("compromisekey", f"--at={at}", "--", kid)
        assert "that the witness policy's quorum cosigned before then" in report
        verification = site.site.get(f"/api/receipt/{before['id']}/verify").json()
        assert verification["status"] == "valid", verification["checks"]
        evidence = verification["signature"]["evidence"]
        assert evidence["signed_at_source"] == "witnesses"
        assert {c["name"] for c in evidence["cosigners"]} == {w.name for w in site.witnesses}

        # The operator tells the witnesses the key that took over; they cosign its checkpoint.
        keys = site.site.get("/.well-known/receipt-keys.json").json()
        for witness in site.witnesses:
            witness.restart(log_vkeys=keys["log"]["verifier_keys"])
        site.start_submitter()
        active = keys["log"]["verifier_key"].split("+")[1]
        wait_for(lambda: site.witnessed().status == 200
                 and log_key_id(site.witnessed().text) == active,
                 "the new key's checkpoint is witnessed")  # fmt: skip
        bundle = tmp_path / "resigned.bundle.json"
        bundle.write_bytes(site.site.get(f"/run/{before['id']}/bundle.json").body)

        # The policy the verifier kept before the compromise names the leaked key only, which
        # hands over to nothing (anyone holding it could have signed a successor): it cannot
        # tell the new key from a forger's.
        status, result = receipt_verify(str(bundle), f"--policy={tmp_path / 'policy.txt'}")
        assert status != 0, result
        # The policy published after it (from the operator, out of band: here, as the site
        # publishes it) names the key that took over, and the witnesses as before.
        policy = tmp_path / "policy-after.txt"
        policy.write_text(keys["log"]["witness_policy"])
        status, result = receipt_verify(str(bundle), f"--policy={policy}")
        assert status == 0, json.dumps(result, indent=1)
        detail = next(c["detail"] for c in result["checks"] if c["name"] == "signature")
        assert "witness" in detail.lower()


@ONCE
def test_receipt_checklog_checks_the_whole_log_from_its_tiles_and_a_kept_checkpoint(
    running: Witnessed, tmp_path: Path
) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_bytes(running.site.get("/log/checkpoint").body)
    for n in range(3):
        running.publish(f"checklog-{n}")
    keys = tmp_path / "keys.json"
    keys.write_bytes(running.site.get("/.well-known/receipt-keys.json").body)
    command = [str(VENV_BIN / "receipt-checklog"), running.site.url + "/log", f"--key={keys}"]
    done = subprocess.run([*command, f"--against={kept}"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # A kept checkpoint that is not of this log (its root changed) is caught.
    origin, size, root, rest = kept.read_text().split("\n", 3)
    other = bytearray(base64.b64decode(root))
    other[0] ^= 1
    forged = tmp_path / "forged.txt"
    forged.write_text("\n".join([origin, size, base64.b64encode(bytes(other)).decode(), rest]))
    done = subprocess.run([*command, f"--against={forged}"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr

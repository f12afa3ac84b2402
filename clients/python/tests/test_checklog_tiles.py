"""receipt-checklog and the tiles (receiptsite_client/verify/tiles.py and checklog.py,
c2sp.org/tlog-tiles): tile paths and layouts as the specification gives them, and a whole log
checked from tiles served by a small HTTP server of the test's own on 127.0.0.1, made from a
tree the test builds itself; each sound log with corrupted variants (a wrong hash, a partial
tile of the wrong width, a missing tile, a kept checkpoint the tiles contradict...)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from client_helpers import ScriptedServer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from receiptsite_client.verify import Tile, check_log, tile_path, tiles_of, tree_root
from receiptsite_client.verify.checklog import main
from receiptsite_client.verify.tiles import index_path
from vector_helpers import PYTHON
from witness_helpers import (
    ORIGIN,
    T0,
    Witness,
    b64,
    checkpoint_text,
    cosignature_line,
    flip_in_line,
    jwk,
    leaf_hash,
    log_line,
    log_vkey,
    mth,
    new_key,
    stamp,
    x_of,
)

pytestmark = pytest.mark.unit

CLIENT = Path(__file__).resolve().parents[1]


# --- paths and layouts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "encoded"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067"),
     (1000000, "x001/x000/000"), (999999, "x999/999")],
)  # fmt: skip
def test_a_tile_index_is_written_in_three_digit_groups_prefixed_with_x(
    index: int, encoded: str
) -> None:
    assert index_path(index) == encoded


def test_a_tile_path_is_level_index_and_the_width_of_a_partial_tile() -> None:
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(1, 5, 17) == "tile/1/005.p/17"
    assert Tile(2, 0, 1).path == "tile/2/000.p/1"
    assert Tile(0, 3, 256).path == "tile/0/003"
    for level, index, width in ((64, 0, None), (-1, 0, None), (0, -1, None), (0, 0, 0),
                                (0, 0, 256)):  # fmt: skip
        with pytest.raises(ValueError):
            tile_path(level, index, width)


def test_a_tree_of_70000_leaves_has_the_tiles_the_specification_lists() -> None:
    """273 full level 0 tiles, a partial one of width 112, one full level 1 tile, a partial
    one of width 17, and a partial level 2 tile of width 1."""
    tiles = tiles_of(70000)
    full = [t for t in tiles if not t.partial]
    partial = [t for t in tiles if t.partial]
    assert sum(t.level == 0 for t in full) == 273
    assert sum(t.level == 1 for t in full) == 1
    assert [(t.level, t.index, t.width) for t in partial] == [(0, 273, 112), (1, 1, 17), (2, 0, 1)]


def test_a_tree_of_256_leaves_is_a_full_tile_and_a_partial_one_above_it() -> None:
    assert tiles_of(256) == [Tile(0, 0, 256), Tile(1, 0, 1)]
    assert tiles_of(1) == [Tile(0, 0, 1)]
    assert tiles_of(0) == []


def test_the_root_of_a_tree_of_leaves_is_rfc_9162s() -> None:
    leaves = [leaf_hash(bytes([n % 256, n // 256])) for n in range(600)]
    for size in [*range(0, 70), 255, 256, 257, 511, 512, 513, 600]:
        assert tree_root(leaves[:size]) == mth(leaves[:size]), size


# --- a log served as tiles -------------------------------------------------------------------


def _own_index_path(index: int) -> str:
    """The test's own reading of the path rule, to serve tiles by."""
    digits = f"{index:03d}"
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*(f"x{g}" for g in groups[:-1]), groups[-1]])


def tile_files(leaves: list[bytes]) -> dict[str, bytes]:
    """Every tile of the tree of `leaves`, by path, hashed here with the test's own MTH."""
    files: dict[str, bytes] = {}
    size, level = len(leaves), 0
    while size // 256**level:
        span = 256**level
        hashes = [mth(leaves[j * span : (j + 1) * span]) for j in range(size // span)]
        for n in range(0, len(hashes), 256):
            chunk = hashes[n : n + 256]
            suffix = "" if len(chunk) == 256 else f".p/{len(chunk)}"
            files[f"tile/{level}/{_own_index_path(n // 256)}{suffix}"] = b"".join(chunk)
        level += 1
    return files


@dataclass
class TileLog:
    """A log of `size` leaves signed by `key`, served as tiles under /log."""

    size: int
    key: Ed25519PrivateKey = field(default_factory=new_key)
    salt: str = "leaf"

    def __post_init__(self) -> None:
        self.leaves = [leaf_hash(f"{self.salt} {n}".encode()) for n in range(self.size)]
        self.files = tile_files(self.leaves)
        self.files["checkpoint"] = self.checkpoint(self.size).encode()

    def checkpoint(self, size: int, key: Ed25519PrivateKey | None = None) -> str:
        text = checkpoint_text(size, mth(self.leaves[:size]))
        return f"{text}\n{log_line(text, key or self.key)}"

    def serve(self) -> ScriptedServer:
        def answer(seen: Any) -> tuple[int, dict[str, str], bytes]:
            path = seen.path.removeprefix("/log/")
            if path in self.files:
                return 200, {"Content-Type": "application/octet-stream"}, self.files[path]
            return 404, {"Content-Type": "text/plain"}, b"not found"

        return ScriptedServer(then=answer)

    def wrong_hash(self, path: str, position: int) -> None:
        data = bytearray(self.files[path])
        data[position * 32] ^= 1
        self.files[path] = bytes(data)


def checked(log: TileLog, *args: str, **options: Any) -> Any:
    with log.serve() as server:
        found = check_log(f"{server.url}/log", *args, **options)
        # What the server was asked for, kept beside the result for the assertions.
        found.seen = [s.path for s in server.seen]  # type: ignore[attr-defined]
    return found


@pytest.mark.parametrize("size", [0, 1, 255, 256, 785])
def test_a_log_served_as_tiles_is_sound(size: int) -> None:
    log = TileLog(size)
    found = checked(log, x_of(log.key))
    assert found.status == "sound", found.problems
    assert found.exit_code == 0
    assert found.tree_size == size and found.origin == ORIGIN
    assert found.root == mth(log.leaves)
    assert found.tiles_fetched == len(log.files) - 1  # every tile, each once


def test_a_log_of_three_levels_is_sound() -> None:
    log = TileLog(65536 + 2 * 256 + 5)  # level 2 holds one hash
    assert "tile/2/000.p/1" in log.files and "tile/1/000" in log.files
    found = checked(log, x_of(log.key))
    assert found.status == "sound", found.problems
    assert found.tiles_fetched == 258 + 1 + 1 + 1 + 1


def test_the_command_prints_one_line_on_success(capsys: pytest.CaptureFixture[str]) -> None:
    log = TileLog(785)
    with log.serve() as server:
        code = main([f"{server.url}/log/", f"--key={x_of(log.key)}"])
    out = capsys.readouterr().out
    assert code == 0
    assert out == (
        f"Sound: log {ORIGIN}, 785 leaves, root {b64(mth(log.leaves))}, 5 tiles fetched.\n"
    )


def test_the_command_answers_json(capsys: pytest.CaptureFixture[str]) -> None:
    log = TileLog(300)
    with log.serve() as server:
        code = main([f"{server.url}/log", f"--key={x_of(log.key)}", "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert code == 0
    assert answer == {
        "status": "sound", "origin": ORIGIN, "tree_size": 300,
        "root_hash": b64(mth(log.leaves)), "tiles_fetched": 3, "kept_tree_size": None,
        "problems": [], "notes": [],
    }  # fmt: skip


# --- corrupted tiles -------------------------------------------------------------------------


def test_one_wrong_hash_in_a_full_leaf_tile_is_found() -> None:
    log = TileLog(785)
    log.wrong_hash("tile/0/001", 7)
    found = checked(log, x_of(log.key))
    assert found.status == "unsound" and found.exit_code == 1
    assert found.problems[0] == (
        "hash 1 of tile tile/1/000.p/3 is not the root of the full tile tile/0/001 below it"
    )
    assert "is not the checkpoint's root" in found.problems[-1]


def test_one_wrong_hash_in_the_partial_leaf_tile_is_found() -> None:
    log = TileLog(785)
    log.wrong_hash("tile/0/003.p/17", 16)
    found = checked(log, x_of(log.key))
    assert found.problems == [
        "the root of the 785 leaf hashes the tiles hold is not the checkpoint's root"
    ]


def test_one_wrong_hash_in_an_upper_tile_is_found() -> None:
    log = TileLog(785)
    log.wrong_hash("tile/1/000.p/3", 2)
    found = checked(log, x_of(log.key))
    assert found.problems == [
        "hash 2 of tile tile/1/000.p/3 is not the root of the full tile tile/0/002 below it"
    ]


@pytest.mark.parametrize(
    ("path", "data"),
    [("tile/0/003.p/17", lambda d: d[:-32]), ("tile/0/003.p/17", lambda d: d + bytes(32)),
     ("tile/0/000", lambda d: d[:-32]), ("tile/1/000.p/3", lambda d: d + d),
     ("tile/0/002", lambda d: b"")],
    ids=["a partial tile one hash short", "a partial tile one hash wide", "a short full tile",
         "an upper tile twice as wide", "an empty tile"],
)  # fmt: skip
def test_a_tile_of_the_wrong_width_is_found(path: str, data: Any) -> None:
    log = TileLog(785)
    log.files[path] = data(log.files[path])
    found = checked(log, x_of(log.key))
    assert found.status == "unsound"
    assert found.problems[0].startswith(f"the tile {path} is not one: it is ")


def test_a_tile_the_log_does_not_serve_is_a_problem_of_the_log() -> None:
    log = TileLog(785)
    del log.files["tile/0/001"]
    found = checked(log, x_of(log.key))
    assert found.problems == [
        "the log does not serve tile/0/001, which its checkpoint of 785 leaves requires"
    ]


def test_a_partial_tile_replaced_by_its_full_tile_is_read_from_it() -> None:
    """The log grew to 1024 leaves and dropped the partial tile of 785 (the spec allows it):
    the first 17 hashes of the full tile stand for it."""
    log = TileLog(1024)
    log.files.update(tile_files(log.leaves[:785]))
    del log.files["tile/0/003.p/17"]
    log.files["checkpoint"] = log.checkpoint(785).encode()
    found = checked(log, x_of(log.key))
    assert found.status == "sound", found.problems
    assert "/log/tile/0/003" in found.seen
    assert found.tiles_fetched == 6  # five tiles, one of them fetched twice


# --- the checkpoint and the key --------------------------------------------------------------


def test_a_checkpoint_not_signed_by_the_key_fetches_no_tile() -> None:
    log = TileLog(785)
    found = checked(log, x_of(new_key()))
    assert found.status == "unsound"
    assert found.problems[0].startswith("the checkpoint served does not verify: it carries no "
                                        "signature by a trusted key")  # fmt: skip
    assert found.seen == ["/log/checkpoint"]


def test_a_checkpoint_with_a_bad_signature_of_the_key_is_refused() -> None:
    log = TileLog(300)
    text = log.files["checkpoint"].decode()
    lines = text.splitlines(keepends=True)
    lines[-1] = flip_in_line(lines[-1])
    log.files["checkpoint"] = "".join(lines).encode()
    found = checked(log, x_of(log.key))
    assert found.status == "unsound"
    assert "does not verify" in found.problems[0]


def test_a_checkpoint_that_is_no_note_is_refused() -> None:
    log = TileLog(300)
    log.files["checkpoint"] = b"receipts.example.org/receipts\n300\n"
    assert checked(log, x_of(log.key)).status == "unsound"


def test_a_keys_document_is_a_key(tmp_path: Path) -> None:
    log = TileLog(300)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [jwk(log.key)], "log": {"origin": ORIGIN}}))
    assert checked(log, str(keys)).status == "sound"
    keys.write_text(json.dumps({"keys": [jwk(log.key)], "log": {"origin": "other.example"}}))
    assert "not the keys document's log" in checked(log, str(keys)).problems[0]
    compromised = jwk(log.key, "compromised", compromised_at="2026-01-01T00:00:00.000000Z")
    keys.write_text(json.dumps({"keys": [compromised]}))
    found = checked(log, str(keys))
    assert found.status == "unsound"
    assert "marked compromised" in found.problems[0]


def test_the_policys_log_keys_are_keys_and_its_witnesses_cosignatures_are_reported(
    tmp_path: Path,
) -> None:
    log = TileLog(300)
    witness = Witness("w1", "witness1.example/cosign")
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {log_vkey(log.key)}\n{witness.line}\nquorum w1\n")
    assert checked(log, policy=str(policy)).status == "sound"
    text = checkpoint_text(300, mth(log.leaves))
    line = cosignature_line(text, witness.key_name, witness.key, T0)
    log.files["checkpoint"] += line.encode()
    found = checked(log, policy=str(policy))
    assert found.status == "sound", found.problems
    assert found.notes == [
        f"The checkpoint is cosigned by w1 at {stamp(T0)[:19]}Z, which meets the policy's "
        "quorum w1 (not required here)."
    ]
    log.files["checkpoint"] = log.files["checkpoint"].replace(
        line.encode(), flip_in_line(line).encode()
    )
    broken = checked(log, policy=str(policy))
    assert broken.status == "unsound"
    assert "the cosignature of witness1.example/cosign on the checkpoint" in broken.problems[0]
    # A policy for another key is no key for this log's checkpoint.
    policy.write_text(f"log {log_vkey(new_key())}\nquorum none\n")
    assert checked(log, policy=str(policy)).status == "unsound"
    policy.write_text(f"log {log_vkey(log.key, 'other.example/log')}\nquorum none\n")
    assert checked(log, policy=str(policy)).status == "could_not_check"


def test_no_key_could_not_check() -> None:
    log = TileLog(10)
    found = checked(log)
    assert found.status == "could_not_check" and found.exit_code == 2
    assert "no key" in found.problems[0]


def test_an_unreachable_log_could_not_check(refused_url: str) -> None:
    found = check_log(f"{refused_url}/log", x_of(new_key()), timeout=5)
    assert found.status == "could_not_check"
    assert "cannot reach" in found.problems[0]
    assert check_log("file:///etc/log", x_of(new_key())).status == "could_not_check"


def test_a_log_that_errs_on_a_tile_could_not_check() -> None:
    log = TileLog(300)
    with log.serve() as server:
        real = server.then
        assert real is not None
        server.then = lambda seen: (500, {}, b"oops") if "tile/0/000" in seen.path else real(seen)
        found = check_log(f"{server.url}/log", x_of(log.key))
    assert found.status == "could_not_check"
    assert "answered 500" in found.problems[0]


def test_a_log_without_a_checkpoint_could_not_check() -> None:
    log = TileLog(10)
    del log.files["checkpoint"]
    assert checked(log, x_of(log.key)).status == "could_not_check"


# --- a kept checkpoint -----------------------------------------------------------------------


def kept(tmp_path: Path, text: str) -> str:
    path = tmp_path / "kept.checkpoint"
    path.write_text(text, "utf-8")
    return str(path)


@pytest.mark.parametrize("size", [0, 1, 256, 300, 785])
def test_a_log_that_only_grew_since_a_kept_checkpoint_is_sound(tmp_path: Path, size: int) -> None:
    log = TileLog(785)
    found = checked(log, x_of(log.key), against=kept(tmp_path, log.checkpoint(size)))
    assert found.status == "sound", found.problems
    assert found.kept_size == size
    assert found.summary().endswith(f"; it extends the kept checkpoint of {size} leaves.")


def test_a_kept_checkpoint_larger_than_the_log_is_unsound(tmp_path: Path) -> None:
    bigger = TileLog(800)
    log = TileLog(785, key=bigger.key)
    log.leaves = bigger.leaves[:785]
    log.files = {**tile_files(log.leaves), "checkpoint": bigger.checkpoint(785).encode()}
    found = checked(log, x_of(log.key), against=kept(tmp_path, bigger.checkpoint(800)))
    assert found.status == "unsound"
    assert "the log has shrunk" in found.problems[0]


def test_a_kept_checkpoint_the_tiles_contradict_is_unsound(tmp_path: Path) -> None:
    """The log signed a tree of 300 leaves once, and now serves another first 300: a fork."""
    log = TileLog(785)
    fork = TileLog(785, key=log.key, salt="other")
    found = checked(log, x_of(log.key), against=kept(tmp_path, fork.checkpoint(300)))
    assert found.status == "unsound"
    assert found.problems == [
        "the root of the first 300 leaves is not the kept checkpoint's: the log no longer "
        "holds the tree the kept checkpoint saw"
    ]


@pytest.mark.parametrize(
    "make",
    [lambda log: log.checkpoint(300, new_key()),
     lambda log: log.checkpoint(300).replace(ORIGIN, "other.example/log"),
     lambda log: "not a checkpoint\n"],
    ids=["signed by another key", "of another log", "not a checkpoint"],
)  # fmt: skip
def test_a_kept_checkpoint_that_does_not_verify_is_unsound(tmp_path: Path, make: Any) -> None:
    log = TileLog(785)
    found = checked(log, x_of(log.key), against=kept(tmp_path, make(log)))
    assert found.status == "unsound"
    assert found.problems[0].startswith("the kept checkpoint")


def test_a_kept_checkpoint_that_cannot_be_read_could_not_check(tmp_path: Path) -> None:
    log = TileLog(10)
    assert checked(log, x_of(log.key), against=str(tmp_path / "none")).status == ("could_not_check")


# --- the command as installed ------------------------------------------------------------


def test_the_distribution_declares_the_command() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["scripts"]["receipt-checklog"] == (
        "receiptsite_client.verify.checklog:main"
    )


def test_the_command_runs_in_a_process_of_its_own_with_its_exit_codes(tmp_path: Path) -> None:
    log = TileLog(300)
    code = "import sys; from receiptsite_client.verify.checklog import main; sys.exit(main())"
    with log.serve() as server:
        url = f"{server.url}/log"
        sound = subprocess.run([str(PYTHON), "-c", code, url, f"--key={x_of(log.key)}"],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        forked = TileLog(300, key=log.key, salt="other")
        against = kept(tmp_path, forked.checkpoint(200))
        unsound = subprocess.run([str(PYTHON), "-c", code, url, f"--key={x_of(log.key)}",
                                  "--against", against],
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
        nokey = subprocess.run([str(PYTHON), "-c", code, url],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sound.returncode == 0, sound.stdout + sound.stderr
    assert sound.stdout.startswith(f"Sound: log {ORIGIN}, 300 leaves, root ")
    assert unsound.returncode == 1
    assert unsound.stdout.startswith("UNSOUND: the root of the first 200 leaves")
    assert nokey.returncode == 2
    assert nokey.stdout.startswith("COULD NOT CHECK: no key")

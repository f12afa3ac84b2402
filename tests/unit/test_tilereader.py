"""The tests' tile reader (tests/tilereader.py) checks a log from its tiles alone, as
c2sp.org/tlog-tiles lays them out, and names what is wrong when they do not hold together.

The tiles come from a tree the test builds (tests/witnesses.py's MemoryLog), written here by
the specification's formal definition (the n-th tile at level l holds MTH(D[(n·256 + i)·256**l
: (n·256 + i + 1)·256**l]) for i < its width), not by the reader's own arithmetic, and served
by a small http.server on loopback. No database and no site.
"""

from __future__ import annotations

import functools
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.tilereader import (
    FULL_TILE_BYTES,
    Tile,
    TileError,
    index_path,
    read_log,
    root_at,
    tile_root,
    tiles_for,
)
from tests.witnesses import MemoryLog, leaf_hash, raw_public, tree_root

pytestmark = pytest.mark.unit

ORIGIN = "tiles.test.example/log"
BIG = 65_536 + 3  # a full level-1 tile, and a level-2 tile above it


def encoded(index: int) -> str:
    """N as tlog-tiles spells it, by another route than the reader's: the decimal digits,
    padded to a multiple of three, cut in threes, `x` before all but the last."""
    digits = str(index)
    digits = digits.zfill(-(-len(digits) // 3) * 3)
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*("x" + group for group in groups[:-1]), groups[-1]])


def tiles_of(hashes: list[bytes]) -> dict[str, bytes]:
    """Every tile of the tree whose leaf hashes are `hashes`, by path."""
    size, files, level = len(hashes), {}, 0
    while size >= 256**level:
        span = 256**level  # leaves under one hash of this level
        count = size // span  # hashes at this level
        for n in range(-(-count // 256)):
            width = min(256, count - n * 256)
            data = b"".join(
                tree_root(hashes, (n * 256 + i) * span, (n * 256 + i + 1) * span)
                for i in range(width)
            )
            suffix = "" if width == 256 else f".p/{width}"
            files[f"tile/{level}/{encoded(n)}{suffix}"] = data
        level += 1
    return files


@functools.cache
def published(size: int) -> tuple[MemoryLog, dict[str, bytes]]:
    """A log of `size` leaves and what it publishes: its signed checkpoint and its tiles."""
    log = MemoryLog(ORIGIN, size=size, key=LOG_KEY)
    files = {"checkpoint": log.checkpoint().encode(), **tiles_of(log.hashes)}
    return log, files


LOG_KEY = Ed25519PrivateKey.generate()


class TileServer(ThreadingHTTPServer):
    daemon_threads = True
    files: dict[str, bytes]


class _Handler(BaseHTTPRequestHandler):
    server: TileServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.removeprefix("/log/")
        body = self.server.files.get(path) if self.path.startswith("/log/") else None
        if body is None:
            self.send_response(404)
            body = b"not found\n"
            kind = "text/plain"
        else:
            self.send_response(200)
            kind = "text/plain; charset=utf-8" if path == "checkpoint" else (
                "application/octet-stream")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[TileServer]:
    tiles = TileServer(("127.0.0.1", 0), _Handler)
    tiles.files = {}
    thread = threading.Thread(target=tiles.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield tiles
    finally:
        tiles.shutdown()
        thread.join(timeout=10)
        tiles.server_close()


def serve(server: TileServer, size: int, **changes: bytes | None) -> tuple[MemoryLog, str]:
    """Serve the log of `size`, with some files changed (None: removed); its prefix URL."""
    log, files = published(size)
    server.files = dict(files)
    for path, content in changes.items():
        if content is None:
            del server.files[path]
        else:
            server.files[path] = content
    return log, f"http://127.0.0.1:{server.server_address[1]}/log"


def read(server: TileServer, size: int, **changes: bytes | None) -> Any:
    log, url = serve(server, size, **changes)
    return read_log(url, public_key=log.public, origin=ORIGIN, timeout=10)


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x80]) + data[at + 1 :]


# --- the layout -------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 7, 255, 256, 999, 1000, 1234067, 10**9 + 5])
def test_a_tile_index_is_spelt_in_threes_with_x_before_all_but_the_last(index: int) -> None:
    assert index_path(index) == encoded(index)


def test_the_tile_paths_are_those_the_specification_shows() -> None:
    assert index_path(1234067) == "x001/x234/067"
    assert Tile(0, 1234067, 256).path == "tile/0/x001/x234/067"
    assert Tile(2, 3, 17).path == "tile/2/003.p/17"


def test_a_tree_of_70000_is_made_of_the_tiles_the_specification_lists() -> None:
    tiles = tiles_for(70_000)
    assert len([t for t in tiles if t.level == 0 and t.full]) == 273
    assert [t for t in tiles if not (t.level == 0 and t.full)] == [
        Tile(0, 273, 112), Tile(1, 0, 256), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert tiles_for(256) == [Tile(0, 0, 256), Tile(1, 0, 1)]
    assert tiles_for(0) == []


# --- reading a whole log ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, BIG])
def test_the_reader_recomputes_the_root_of_the_tree_from_its_tiles(
    server: TileServer, size: int
) -> None:
    log, files = published(size)
    result = read(server, size)
    assert result.root == result.checkpoint.root == log.root()
    assert result.leaves == log.hashes
    assert (result.checkpoint.origin, result.checkpoint.size) == (ORIGIN, size)
    assert [f.path for f in result.fetched] == ["checkpoint", *(t.path for t in tiles_for(size))]
    assert set(files) == {f.path for f in result.fetched}  # every tile, nothing else
    assert all(f.status == 200 for f in result.fetched)
    assert {f.headers["Content-Type"] for f in result.fetched[1:]} <= {"application/octet-stream"}
    assert all(f.length in (FULL_TILE_BYTES, *range(32, FULL_TILE_BYTES, 32))
               for f in result.fetched[1:])
    for m in {m for m in (0, 1, size // 2, size - 1, size) if 0 <= m <= size}:
        assert result.root_at(m) == log.root(m)


def test_the_roots_are_those_of_the_rfc_6962_reference_tree() -> None:
    """Certificate Transparency's eight-leaf reference tree (merkle_tree_test.cc)."""
    leaves = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
              "606162636465666768696a6b6c6d6e6f"]
    hashes = [leaf_hash(bytes.fromhex(leaf)) for leaf in leaves]
    assert root_at(hashes, 8).hex() == (
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")
    assert root_at(hashes, 7).hex() == (
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c")
    assert root_at(hashes, 0).hex() == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    tile = [leaf_hash(bytes([i])) for i in range(256)]
    assert tile_root(tile) == root_at(tile, 256)  # a full tile's root is its subtree's MTH


def test_a_kept_checkpoint_is_checked_as_a_prefix_of_the_tree(server: TileServer) -> None:
    result = read(server, 257)
    small, _ = published(255)
    result.check_against(255, small.root())
    with pytest.raises(TileError, match="not an extension of the kept checkpoint"):
        result.check_against(255, leaf_hash(b"another history"))
    with pytest.raises(TileError, match="the log shrank"):
        result.check_against(258, small.root())


# --- what it catches --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "path", "message"),
    [
        (257, "tile/0/000", "tile/1/000.p/1: hash 0 is not the root of tile/0/000"),
        (257, "tile/0/001.p/1", "the root recomputed from the 257 leaf hashes is not"),
        (BIG, "tile/0/100", "tile/1/000: hash 100 is not the root of tile/0/100"),
        (BIG, "tile/1/000", "tile/1/000: hash 128 is not the root of tile/0/128"),
        (BIG, "tile/2/000.p/1", "tile/2/000.p/1: hash 0 is not the root of tile/1/000"),
        (BIG, "tile/0/256.p/3", "the root recomputed from the 65539 leaf hashes is not"),
        (255, "tile/0/000.p/255", "the root recomputed"),
    ],
)
def test_a_flipped_byte_in_a_tile_is_caught(
    server: TileServer, size: int, path: str, message: str
) -> None:
    _, files = published(size)
    with pytest.raises(TileError, match=re.escape(message)):
        read(server, size, **{path: flip(files[path], len(files[path]) // 2)})


@pytest.mark.parametrize(
    ("size", "path"), [(257, "tile/0/001.p/1"), (257, "tile/1/000.p/1"), (BIG, "tile/0/255")]
)
def test_a_missing_tile_is_caught(server: TileServer, size: int, path: str) -> None:
    with pytest.raises(TileError, match=f"^{re.escape(path)}: HTTP 404$"):
        read(server, size, **{path: None})


def test_a_partial_tile_of_the_wrong_width_is_caught(server: TileServer) -> None:
    _, files = published(257)
    two = files["tile/0/001.p/1"] * 2
    with pytest.raises(TileError, match="64 bytes, but a partial tile of width 1 is 32 bytes"):
        read(server, 257, **{"tile/0/001.p/1": two})
    # The tile served under another width only: the one the tree needs is missing.
    with pytest.raises(TileError, match=r"tile/0/001\.p/1: HTTP 404"):
        read(server, 257, **{"tile/0/001.p/1": None, "tile/0/001.p/2": two})
    with pytest.raises(TileError, match="8160 bytes, but a full tile is 8192 bytes"):
        read(server, 257, **{"tile/0/000": files["tile/0/000"][:-32]})


def test_a_wrong_hash_in_an_upper_level_is_caught(server: TileServer) -> None:
    _, files = published(BIG)
    level_1 = files["tile/1/000"]
    swapped = level_1[32:64] + level_1[:32] + level_1[64:]  # two right hashes, misplaced
    with pytest.raises(TileError, match=r"tile/1/000: hash 0 is not the root of tile/0/000"):
        read(server, BIG, **{"tile/1/000": swapped})
    with pytest.raises(TileError, match=r"tile/1/000\.p/1: hash 0 is not the root of tile/0/000"):
        read(server, 257, **{"tile/1/000.p/1": leaf_hash(b"not a tile's root")})


def test_a_checkpoint_that_the_tiles_do_not_give_is_caught(server: TileServer) -> None:
    log, _ = published(257)
    other = log.checkpoint(root=log.root(256)).encode()  # validly signed, the wrong root
    with pytest.raises(TileError, match="the root recomputed from the 257 leaf hashes"):
        read(server, 257, checkpoint=other)


def test_a_checkpoint_not_signed_by_the_logs_key_is_refused(server: TileServer) -> None:
    log, url = serve(server, 256)
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(TileError, match=f"no signature by {ORIGIN}"):
        read_log(url, public_key=raw_public(stranger), origin=ORIGIN)
    with pytest.raises(TileError, match="origin 'tiles.test.example/log', expected"):
        read_log(url, public_key=log.public, origin="elsewhere.test.example/log")
    result = read_log(url, vkey=log.vkey)  # the log's vkey does as well as its raw key
    assert result.checkpoint.size == 256
    unverified = read_log(url)  # no key: the caller checks the note it is given
    assert unverified.note == log.checkpoint() and unverified.root == log.root()
    forged = log.checkpoint().replace("\n256\n", "\n255\n").encode()  # the old signature
    with pytest.raises(TileError, match="does not verify"):
        read(server, 256, checkpoint=forged)


def test_a_log_that_does_not_answer_in_time_is_an_error(server: TileServer) -> None:
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(TileError, match="checkpoint: .*timed out"):
            read_log(f"http://127.0.0.1:{port}/log", timeout=0.3)

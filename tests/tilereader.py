"""A reader of a log's tiles (c2sp.org/tlog-tiles), of the tests' own: what a monitor does
with the log's static resources alone, written from the specification, so that a test of the
site's tiles does not check the site against its own code.

    read = read_log("http://127.0.0.1:PORT/log", public_key=raw, origin="receipts.example/log")
    read.root == read.checkpoint.root      # the root recomputed from the level-0 hashes
    read.root_at(kept_size) == kept_root   # consistency with a checkpoint kept from before

It fetches `<prefix>/checkpoint`, parses it (and verifies its Ed25519 signature when given the
log's key), works out which tiles a tree of that size is made of (full tiles and the partial
`.p/<W>` tile of every level), fetches each one, checks its length, checks every hash of the
levels above 0 against the root of the full tile it stands for, and recomputes the tree's root
from the leaf hashes with RFC 6962's MTH. The first thing that does not hold raises TileError,
which names it. Nothing here imports the site; the note and Merkle code is tests/witnesses.py's,
which is written from the specifications too.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tests.witnesses import (
    HASH_SIZE,
    NOTE_ED25519,
    Checkpoint,
    NoteError,
    VerifierKey,
    key_id,
    node_hash,
    parse_checkpoint,
    parse_note,
    parse_vkey,
    tree_root,
    verify_note_signature,
)

TILE_WIDTH = 256  # hashes in a full tile
FULL_TILE_BYTES = TILE_WIDTH * HASH_SIZE  # 8,192
TIMEOUT = 10.0  # seconds, for one fetch


class TileError(Exception):
    """The log's tiles or checkpoint do not hold together; the message names the first thing
    that does not."""


def index_path(index: int) -> str:
    """A tile index as tlog-tiles encodes it: zero-padded 3-digit elements, all but the last
    prefixed with `x` (1234067 → x001/x234/067)."""
    if index < 0:
        raise ValueError(f"a tile index is not negative: {index}")
    elements = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        elements.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(elements))


@dataclass(frozen=True)
class Tile:
    level: int
    index: int
    width: int  # hashes: 256 for a full tile, 1 to 255 for a partial one

    @property
    def full(self) -> bool:
        return self.width == TILE_WIDTH

    @property
    def path(self) -> str:
        """`tile/<L>/<N>[.p/<W>]`, relative to the log's prefix."""
        suffix = "" if self.full else f".p/{self.width}"
        return f"tile/{self.level}/{index_path(self.index)}{suffix}"

    @property
    def size(self) -> int:
        """Its length in bytes."""
        return self.width * HASH_SIZE


def tiles_for(size: int) -> list[Tile]:
    """Every tile a tree of `size` leaves is made of, level 0 first, by index: at level l,
    floor(size / 256**(l+1)) full tiles and a partial one of floor(size / 256**l) mod 256
    hashes when that is not zero (empty tiles do not exist)."""
    if size < 0:
        raise ValueError(f"a tree size is not negative: {size}")
    tiles = []
    level = 0
    while size >= TILE_WIDTH**level:
        hashes = size // TILE_WIDTH**level  # the hashes at this level
        full, width = divmod(hashes, TILE_WIDTH)
        tiles += [Tile(level, index, TILE_WIDTH) for index in range(full)]
        if width:
            tiles.append(Tile(level, full, width))
        level += 1
    return tiles


def tile_root(hashes: Sequence[bytes]) -> bytes:
    """The Merkle Tree Hash a full tile stands for: its 256 hashes are the nodes 8 levels
    below it, combined pairwise."""
    level = list(hashes)
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def split_hashes(tile: Tile, data: bytes) -> list[bytes]:
    if len(data) != tile.size:
        kind = "a full tile" if tile.full else f"a partial tile of width {tile.width}"
        raise TileError(f"{tile.path}: {len(data)} bytes, but {kind} is {tile.size} bytes")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def check_tiles(size: int, contents: Mapping[Tile, bytes]) -> list[bytes]:
    """The leaf hashes of a tree of `size` leaves from its tiles' contents (every tile of
    tiles_for(size)), once each tile's length and each hash above level 0 is checked against
    the full tile below it; TileError at the first that is wrong."""
    hashes = {}
    for tile in tiles_for(size):
        if tile not in contents:
            raise TileError(f"{tile.path}: missing")
        hashes[tile] = split_hashes(tile, contents[tile])
    for tile, entries in hashes.items():
        if tile.level == 0:
            continue
        for i, entry in enumerate(entries):
            below = Tile(tile.level - 1, tile.index * TILE_WIDTH + i, TILE_WIDTH)
            if entry != tile_root(hashes[below]):
                raise TileError(f"{tile.path}: hash {i} is not the root of {below.path}")
    leaves = [leaf for tile, entries in hashes.items() if tile.level == 0 for leaf in entries]
    assert len(leaves) == size
    return leaves


def root_at(leaves: Sequence[bytes], size: int) -> bytes:
    """The root of the tree of the first `size` leaves (size <= len(leaves))."""
    if not 0 <= size <= len(leaves):
        raise ValueError(f"no tree of size {size} in {len(leaves)} leaves")
    return tree_root(leaves, 0, size)


@dataclass(frozen=True)
class Fetched:
    """One resource as it was fetched."""

    path: str  # relative to the prefix: "checkpoint", "tile/0/000.p/3"
    url: str
    status: int
    headers: dict[str, str]
    length: int


@dataclass
class LogRead:
    checkpoint: Checkpoint
    note: str  # the checkpoint as it was served, signatures included
    leaves: list[bytes]  # the leaf hashes (level 0)
    root: bytes  # recomputed from the leaves
    fetched: list[Fetched] = field(default_factory=list)

    def root_at(self, size: int) -> bytes:
        """The root of the tree of `size` <= checkpoint.size, from the fetched leaves."""
        return root_at(self.leaves, size)

    def check_against(self, size: int, root: bytes) -> None:
        """TileError unless a checkpoint kept from before (`size`, `root`) is a prefix of
        this tree."""
        if size > self.checkpoint.size:
            raise TileError(f"the kept checkpoint's size {size} is larger than the log's "
                            f"{self.checkpoint.size}: the log shrank")
        if self.root_at(size) != root:
            raise TileError(f"the tree's first {size} leaves do not have the kept root: "
                            "the log is not an extension of the kept checkpoint")


def _key(public_key: bytes | None, origin: str | None, vkey: str | None) -> VerifierKey | None:
    if vkey is not None:
        return parse_vkey(vkey, NOTE_ED25519)
    if public_key is None:
        return None
    if origin is None:
        raise ValueError("a raw public key needs the origin (its key name) with it")
    return VerifierKey(origin, key_id(origin, NOTE_ED25519, public_key), NOTE_ED25519, public_key)


def verify_checkpoint(note: str, key: VerifierKey) -> Checkpoint:
    """The checkpoint of a signed note whose origin is `key`'s name and which carries a valid
    signature by `key` (type 0x01); other signatures are ignored, as signed-note says."""
    try:
        parsed = parse_note(note)
        checkpoint = parse_checkpoint(parsed.text)
    except NoteError as error:
        raise TileError(f"checkpoint: {error}") from error
    if checkpoint.origin != key.name:
        raise TileError(f"checkpoint: origin {checkpoint.origin!r}, expected {key.name!r}")
    own = [s for s in parsed.signatures if (s.name, s.key_id) == (key.name, key.key_id)]
    if not own:
        raise TileError(f"checkpoint: no signature by {key.name}+{key.key_id.hex()}")
    for signature in own:
        if not verify_note_signature(signature, parsed.text, key):
            raise TileError(f"checkpoint: the signature by {key.name} does not verify")
    return checkpoint


Fetcher = Callable[[str, float], tuple[int, dict[str, str], bytes]]


def urllib_fetch(url: str, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET; an error status is an answer, not an exception."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, dict(answer.headers.items()), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), error.read()


def read_log(
    prefix: str,
    *,
    public_key: bytes | None = None,
    origin: str | None = None,
    vkey: str | None = None,
    timeout: float = TIMEOUT,
    fetch: Fetcher = urllib_fetch,
) -> LogRead:
    """Read and check the whole log under `prefix` (e.g. http://127.0.0.1:PORT/log).

    With `vkey` (the log's type 0x01 verifier key) or `public_key` (32 raw Ed25519 bytes)
    and `origin`, the checkpoint must carry a valid signature by that key and name that
    origin; without them the caller verifies `note` itself. Every fetch is in `fetched`."""
    key = _key(public_key, origin, vkey)
    base = prefix.rstrip("/")
    fetched: list[Fetched] = []

    def get(path: str) -> bytes:
        url = f"{base}/{path}"
        try:
            status, headers, body = fetch(url, timeout)
        except OSError as error:  # refused, reset, timed out
            raise TileError(f"{path}: {error}") from error
        fetched.append(Fetched(path, url, status, headers, len(body)))
        if status != 200:
            raise TileError(f"{path}: HTTP {status}")
        return body

    raw = get("checkpoint")
    try:
        note = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TileError("checkpoint: not UTF-8") from error
    if key is not None:
        checkpoint = verify_checkpoint(note, key)
    else:
        try:
            checkpoint = parse_checkpoint(parse_note(note).text)
        except NoteError as error:
            raise TileError(f"checkpoint: {error}") from error
    contents = {tile: get(tile.path) for tile in tiles_for(checkpoint.size)}
    leaves = check_tiles(checkpoint.size, contents)
    root = tree_root(leaves)
    if root != checkpoint.root:
        raise TileError(f"the root recomputed from the {checkpoint.size} leaf hashes is not "
                        "the checkpoint's")
    return LogRead(checkpoint, note, leaves, root, fetched)

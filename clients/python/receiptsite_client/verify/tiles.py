"""A log's Merkle tree as static hash tiles (c2sp.org/tlog-tiles), read with no other API.

A tile is up to 256 consecutive hashes of one level: at level 0 the leaf hashes, at level L
the roots of the full tiles of level L−1 (each the root of 256**L leaves). Tile N of level L
is served at `<prefix>/tile/<L>/<N>`, N written in 3-digit groups, every group but the last
prefixed with `x` (1234067 is `x001/x234/067`); the rightmost tile of a level, when it holds
fewer than 256 hashes, is the partial tile `…/<N>.p/<W>` of width W. A tree of size s has, at
each level L with s // 256**L > 0, s // 256**(L+1) full tiles and a partial one of width
(s // 256**L) mod 256 when that is not 0.

Pure functions only: which tiles a tree has, their paths, reading a tile's bytes, and checking
that a set of tiles is one tree (checklog.py fetches them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from receiptsite_client.verify.merkle import HASH_SIZE, tree_root

TILE_WIDTH = 256
FULL_TILE_BYTES = TILE_WIDTH * HASH_SIZE
MAX_LEVEL = 63


@dataclass(frozen=True)
class Tile:
    level: int
    index: int
    width: int  # TILE_WIDTH for a full tile

    @property
    def partial(self) -> bool:
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        return tile_path(self.level, self.index, self.width if self.partial else None)

    @property
    def full(self) -> Tile:
        """The full tile this partial tile will become (the spec's fallback when a log has
        replaced a partial tile by its full one)."""
        return Tile(self.level, self.index, TILE_WIDTH)


def index_path(index: int) -> str:
    """c2sp.org/tlog-tiles: zero-padded 3-digit groups, all but the last prefixed with `x`."""
    if index < 0:
        raise ValueError("a tile index is not negative")
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def tile_path(level: int, index: int, width: int | None = None) -> str:
    """`tile/<L>/<N>` or, for a partial tile, `tile/<L>/<N>.p/<W>`."""
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"a tile level is 0 to {MAX_LEVEL}")
    suffix = ""
    if width is not None:
        if not 1 <= width < TILE_WIDTH:
            raise ValueError("a partial tile is 1 to 255 hashes wide")
        suffix = f".p/{width}"
    return f"tile/{level}/{index_path(index)}{suffix}"


def hashes_at(size: int, level: int) -> int:
    """How many hashes level `level` of a tree of `size` leaves has: one per perfect subtree
    of 256**level leaves."""
    return size // TILE_WIDTH**level


def tiles_of(size: int) -> list[Tile]:
    """Every tile of a tree of `size` leaves, level by level, left to right."""
    tiles: list[Tile] = []
    level = 0
    while level <= MAX_LEVEL and hashes_at(size, level):
        count = hashes_at(size, level)
        tiles.extend(Tile(level, n, TILE_WIDTH) for n in range(count // TILE_WIDTH))
        if count % TILE_WIDTH:
            tiles.append(Tile(level, count // TILE_WIDTH, count % TILE_WIDTH))
        level += 1
    return tiles


def read_tile(data: bytes, width: int) -> list[bytes]:
    """A tile's hashes; ValueError if it is not `width` hashes."""
    if len(data) != width * HASH_SIZE:
        raise ValueError(f"it is {len(data)} bytes, not {width} hashes ({width * HASH_SIZE} bytes)")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def levels_of(size: int, tiles: Mapping[Tile, Sequence[bytes]]) -> list[list[bytes]]:
    """Each level's hashes, its tiles' hashes in order (every tile of tiles_of(size) must be
    in `tiles`)."""
    levels: list[list[bytes]] = []
    for tile in tiles_of(size):
        while len(levels) <= tile.level:
            levels.append([])
        levels[tile.level].extend(tiles[tile])
    return levels


def tile_problems(levels: Sequence[Sequence[bytes]]) -> list[str]:
    """Where an upper level's hash is not the root of the full tile below it (hash j of level
    L is the root of hashes 256j to 256j+255 of level L−1), first one first."""
    problems = []
    for level in range(1, len(levels)):
        below, here = levels[level - 1], levels[level]
        for j, stated in enumerate(here):
            if stated != tree_root(below[j * TILE_WIDTH : (j + 1) * TILE_WIDTH]):
                problems.append(
                    f"hash {j % TILE_WIDTH} of tile {tile_holding(level, j, len(here)).path} "
                    f"is not the root of the full tile {tile_path(level - 1, j)} below it"
                )
    return problems


def tile_holding(level: int, position: int, count: int) -> Tile:
    """The tile of a level of `count` hashes that holds hash number `position`."""
    index = position // TILE_WIDTH
    width = min(TILE_WIDTH, count - index * TILE_WIDTH)
    return Tile(level, index, width)

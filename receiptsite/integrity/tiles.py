"""The log as static tiles (c2sp.org/tlog-tiles): which hash tiles a tree has, and their paths.

A tile at level L, index N holds up to 256 consecutive hashes of the tree at height 8·L: the
i-th is MTH(D[(N·256 + i)·256^L : (N·256 + i + 1)·256^L]), the hash of a complete subtree of
256^L leaves. In the stored-node scheme of integrity/merkle.py that is node (8·L, N·256 + i),
so a tile is read straight from the stored nodes. A full tile has 256 hashes (8,192 bytes); the
rightmost tiles of a tree may be partial, `<N>.p/<W>` with 1 ≤ W ≤ 255 hashes.

Paths: `tile/<L>/<N>[.p/<W>]`, where N is written in zero-padded 3-digit elements, all but the
last prefixed with `x` (1234067 is `x001/x234/067`).
"""

from __future__ import annotations

import re

WIDTH = 256
HEIGHT = 8  # tree levels per tile level: 256 = 2**8
HASH_SIZE = 32
MAX_LEVEL = 63
_ELEMENT = re.compile(r"[0-9]{3}")
_WIDTH = re.compile(r"[1-9][0-9]{0,2}")
_LEVEL = re.compile(r"0|[1-9][0-9]?")


def index_path(index: int) -> str:
    """N in the spec's path encoding: 1234067 -> 'x001/x234/067', 5 -> '005'."""
    if index < 0:
        raise ValueError("a tile index is not negative")
    elements = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        elements.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(elements))


def tile_path(level: int, index: int, width: int = WIDTH) -> str:
    """`tile/<L>/<N>` for a full tile, `tile/<L>/<N>.p/<W>` for a partial one."""
    if not 0 <= level <= MAX_LEVEL or not 1 <= width <= WIDTH:
        raise ValueError("a tile has a level 0..63 and 1..256 hashes")
    partial = f".p/{width}" if width < WIDTH else ""
    return f"tile/{level}/{index_path(index)}{partial}"


def parse_index(text: str) -> int:
    """The index of its path encoding; ValueError for any other spelling of a number (no
    element but the last without its `x`, every element three digits)."""
    elements = text.split("/")
    *upper, last = elements
    if not _ELEMENT.fullmatch(last) or not all(
        e.startswith("x") and _ELEMENT.fullmatch(e[1:]) for e in upper
    ):
        raise ValueError(f"{text!r} is not a tile index (e.g. x001/x234/067)")
    # One canonical path per tile: a leading element of x000 would be a second spelling.
    if upper and upper[0] == "x000":
        raise ValueError(f"{text!r} is not a tile index: no leading x000 element")
    index = 0
    for element in elements:
        index = index * 1000 + int(element.lstrip("x"))
    return index


def parse_level(text: str) -> int:
    if not _LEVEL.fullmatch(text) or int(text) > MAX_LEVEL:
        raise ValueError(f"{text!r} is not a tile level (0 to 63, no leading zeros)")
    return int(text)


def parse_width(text: str) -> int:
    if not _WIDTH.fullmatch(text) or int(text) >= WIDTH:
        raise ValueError(f"{text!r} is not a partial tile's width (1 to 255)")
    return int(text)


def hashes_at(size: int, level: int) -> int:
    """How many hashes the tree of `size` leaves has at tile level `level`: its complete
    subtrees of 256**level leaves."""
    return size // WIDTH**level


def width(size: int, level: int, index: int) -> int:
    """The width of tile (level, index) in the tree of `size` leaves: 256 when it is full, 1 to
    255 when it is that tree's partial tile, 0 when the tree has no such tile."""
    available = hashes_at(size, level) - index * WIDTH
    return max(0, min(WIDTH, available))


def exists(size: int, level: int, index: int, tile_width: int) -> bool:
    """Whether the tree of `size` leaves (or an earlier tree: every earlier size was signed
    too) has tile (level, index) with `tile_width` hashes: its nodes are all stored."""
    return 1 <= tile_width <= width(size, level, index)


def nodes(level: int, index: int, tile_width: int) -> tuple[int, int, int]:
    """The stored nodes a tile holds: (tree level, first node index, count)."""
    return level * HEIGHT, index * WIDTH, tile_width


def tiles(size: int) -> list[tuple[int, int, int]]:
    """Every tile (level, index, width) of the tree of `size` leaves, level by level: what a
    monitor fetches to check the whole tree."""
    found = []
    level = 0
    while hashes_at(size, level):
        count = hashes_at(size, level)
        for index in range((count + WIDTH - 1) // WIDTH):
            found.append((level, index, width(size, level, index)))
        level += 1
    return found

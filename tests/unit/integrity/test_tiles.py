"""Tile arithmetic and paths (c2sp.org/tlog-tiles), against the spec's own examples."""

from __future__ import annotations

import pytest

from receiptsite.integrity import tiles

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")],
)
def test_an_index_has_one_path_and_reads_back(index: int, path: str) -> None:
    assert tiles.index_path(index) == path
    assert tiles.parse_index(path) == index


@pytest.mark.parametrize(
    "path", ["5", "0005", "x001", "001/234", "x001/x234/67", "x000/005", "x001/x234/0678", ""]
)
def test_any_other_spelling_of_an_index_is_refused(path: str) -> None:
    with pytest.raises(ValueError):
        tiles.parse_index(path)


def test_the_tile_path_of_a_full_and_a_partial_tile() -> None:
    assert tiles.tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tiles.tile_path(2, 0, 1) == "tile/2/000.p/1"


@pytest.mark.parametrize("text", ["00", "064", "64", "-1", "1.0", ""])
def test_a_level_outside_0_to_63_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        tiles.parse_level(text)


@pytest.mark.parametrize("text", ["0", "256", "012", "x", ""])
def test_a_partial_width_outside_1_to_255_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        tiles.parse_width(text)


def test_a_tree_of_70000_has_the_specifications_tiles() -> None:
    # "273 full level 0 tiles, one partial level 0 tile of width 112, one full level 1 tile,
    # one partial level 1 tile of width 17, and one partial level 2 tile of width 1."
    found = tiles.tiles(70_000)
    level0 = [t for t in found if t[0] == 0]
    assert len([t for t in level0 if t[2] == 256]) == 273
    assert [t for t in level0 if t[2] < 256] == [(0, 273, 112)]
    assert [t for t in found if t[0] == 1] == [(1, 0, 256), (1, 1, 17)]
    assert [t for t in found if t[0] == 2] == [(2, 0, 1)]
    assert len(found) == 277


def test_a_tree_of_256_is_a_full_level_0_tile_and_a_partial_level_1_tile() -> None:
    assert tiles.tiles(256) == [(0, 0, 256), (1, 0, 1)]
    assert tiles.tiles(0) == []


@pytest.mark.parametrize(
    ("size", "tile", "served"),
    [
        (300, (0, 0, 256), True),
        (300, (0, 1, 44), True),
        (300, (0, 1, 43), True),  # an earlier tree's partial tile: its nodes are stored
        (300, (0, 1, 45), False),  # a later tree's
        (300, (0, 1, 256), False),
        (300, (0, 2, 1), False),
        (300, (1, 0, 1), True),
        (300, (1, 0, 2), False),
        (65_536, (1, 0, 256), True),
    ],
)
def test_a_tile_is_served_once_its_nodes_are_stored(
    size: int, tile: tuple[int, int, int], served: bool
) -> None:
    assert tiles.exists(size, *tile) is served


def test_a_tiles_hashes_are_the_stored_nodes_of_its_level() -> None:
    assert tiles.nodes(0, 3, 10) == (0, 768, 10)
    assert tiles.nodes(1, 2, 256) == (8, 512, 256)

"""The log's static read API (c2sp.org/tlog-tiles): its hash tiles, read from the stored
nodes (integrity/tiles.py says which nodes a tile is), and the URL converters of their paths.

Only hash tiles: entry bundles would republish the content of withdrawn receipts (the log
keeps a withdrawn receipt's leaf hash, never its bytes), so there are none (docs/log.md). A
tile is served once the latest checkpoint has it: the full tiles of its tree, and any partial
tile of it or of an earlier tree, each of which was signed too. A tile's bytes never change.
"""

from __future__ import annotations

from django.db import connection

from receiptsite.integrity import tiles
from receiptsite.receipts.models import LogNode

_NODE = LogNode._meta.db_table
_RANGE = f"SELECT hash FROM {_NODE} WHERE key >= %s AND key < %s ORDER BY key"


def tile(size: int, level: int, index: int, width: int) -> bytes | None:
    """The tile (level, index) of `width` hashes in the tree of `size` leaves (the latest
    signed checkpoint's), or None when that tree has no such tile. One query."""
    if not tiles.exists(size, level, index, width):
        return None
    node_level, first, count = tiles.nodes(level, index, width)
    start = LogNode.node_key(node_level, first)
    with connection.cursor() as cursor:
        cursor.execute(_RANGE, [start, start + count])
        hashes = [bytes(row[0]) for row in cursor.fetchall()]
    if len(hashes) != count:
        return None  # cannot happen while the log's tables are append-only
    return b"".join(hashes)


class LevelConverter:
    """`<tile_level:level>`: 0 to 63, no leading zeros."""

    regex = "[0-9]{1,2}"

    def to_python(self, value: str) -> int:
        return tiles.parse_level(value)

    def to_url(self, value: int) -> str:
        return str(value)


class IndexConverter:
    """`<tile_index:index>`: N in the spec's path encoding (`x001/x234/067`); any other
    spelling of a number does not match."""

    regex = "(?:x[0-9]{3}/)*[0-9]{3}"

    def to_python(self, value: str) -> int:
        return tiles.parse_index(value)

    def to_url(self, value: int) -> str:
        return tiles.index_path(value)


class WidthConverter:
    """`<tile_width:width>`: a partial tile's width, 1 to 255."""

    regex = "[0-9]{1,3}"

    def to_python(self, value: str) -> int:
        return tiles.parse_width(value)

    def to_url(self, value: int) -> str:
        return str(value)

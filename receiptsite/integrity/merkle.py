"""The RFC 9162 §2.1 Merkle tree of the transparency log, computed from stored subtrees.

A database stores only the hashes of complete ("perfect") aligned subtrees, each addressed as
(level, index): node (level, i) covers leaves [i * 2**level, (i + 1) * 2**level). A node, once
stored, never changes, which suits an append-only table. Every hash the RFC needs (the root of
any size, each element of an inclusion or consistency proof) is the MTH of a leaf range that
splits into O(log n) such nodes, so proofs for any past tree size need O(log n) reads.

`get` callables take (level, index) and return the stored 32-byte hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

Node = tuple[int, int]
Getter = Callable[[int, int], bytes]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    # The 0x00 / 0x01 prefixes keep a leaf from ever being passed off as an interior node.
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2): where RFC 9162's MTH splits."""
    return 1 << ((n - 1).bit_length() - 1)


def root_from_leaves(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH straight from the definition; O(n), for tests and for a monitor replaying a log."""
    n = len(leaf_hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaf_hashes[0]
    k = _split(n)
    return node_hash(root_from_leaves(leaf_hashes[:k]), root_from_leaves(leaf_hashes[k:]))


# --- Ranges and stored nodes -------------------------------------------------------------


def perfect_subtrees(start: int, end: int) -> list[Node]:
    """The aligned complete subtrees making up [start, end), left to right.

    This is how MTH splits the range only when `start` is a multiple of the smallest power of
    two >= end - start (always true for start == 0, and for the right-edge ranges that proofs
    use); other ranges are refused rather than silently hashed to a different value.
    """
    width = end - start
    if start < 0 or width < 0 or start % (1 << max(width - 1, 0).bit_length()):
        raise ValueError(f"[{start}, {end}) is not a range the RFC 9162 recursion produces")
    nodes = []
    while start < end:
        # Alignment is preserved at every step, so the largest power of two that fits is
        # always an aligned subtree, and it is also where MTH would split.
        level = (end - start).bit_length() - 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def range_hash(start: int, end: int, get: Getter) -> bytes:
    """MTH of the leaves [start, end) from stored nodes; the empty range hashes to EMPTY_ROOT."""
    nodes = perfect_subtrees(start, end)
    if not nodes:
        return EMPTY_ROOT
    # MTH nests to the right (each split's right part is the smaller one), so fold from there.
    # bytes(): a database driver may return memoryview, which must not leak into proofs.
    acc = bytes(get(*nodes[-1]))
    for node in reversed(nodes[:-1]):
        acc = node_hash(bytes(get(*node)), acc)
    return acc


def _nodes_of(ranges: Iterable[tuple[int, int]]) -> list[Node]:
    return [node for start, end in ranges for node in perfect_subtrees(start, end)]


# --- Appending ---------------------------------------------------------------------------


def nodes_for_append(size: int) -> list[Node]:
    """The frontier: the stored nodes that appending leaf number `size` reads."""
    return perfect_subtrees(0, size)


def append(
    size: int, new_leaf_hash: bytes, frontier: Mapping[Node, bytes]
) -> tuple[dict[Node, bytes], bytes]:
    """Add leaf number `size`; return the nodes to store and the root of the size + 1 tree.

    `frontier` maps each of nodes_for_append(size) to its hash (KeyError if one is missing).
    """
    new = {(0, size): new_leaf_hash}
    level, index, acc = 0, size, new_leaf_hash
    # A right child (odd index) completes its parent; its left sibling is already in the
    # frontier, because a completed left subtree is exactly what the frontier holds.
    while index & 1:
        acc = node_hash(frontier[(level, index - 1)], acc)
        level, index = level + 1, index >> 1
        new[(level, index)] = acc
    nodes = {**frontier, **new}
    return new, range_hash(0, size + 1, lambda lv, ix: nodes[(lv, ix)])


# --- Inclusion proofs (RFC 9162 §2.1.3) --------------------------------------------------


def _inclusion_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """PATH(index, D[start:end]) as leaf ranges, bottom-up; only the first range returned
    from the top level can be imperfect, which is what keeps proofs O(log n) reads."""
    if end - start == 1:
        return []
    mid = start + _split(end - start)
    if index < mid:
        return [*_inclusion_ranges(index, start, mid), (mid, end)]
    return [*_inclusion_ranges(index, mid, end), (start, mid)]


def _check_inclusion_args(index: int, size: int) -> None:
    if not 0 <= index < size:
        raise ValueError(f"no leaf {index} in a tree of size {size}")


def inclusion_proof_nodes(index: int, size: int) -> list[Node]:
    _check_inclusion_args(index, size)
    return _nodes_of(_inclusion_ranges(index, 0, size))


def inclusion_proof(index: int, size: int, get: Getter) -> list[bytes]:
    _check_inclusion_args(index, size)
    return [range_hash(s, e, get) for s, e in _inclusion_ranges(index, 0, size)]


def _is_count(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _as_hash(h: object) -> bytes | None:
    # Accept any bytes-like value (a BinaryField read back from PostgreSQL is a memoryview)
    # so that a stored root compares equal instead of silently failing verification.
    if isinstance(h, bytes | bytearray | memoryview) and len(h) == HASH_SIZE:
        return bytes(h)
    return None


def _hashes(proof: object) -> list[bytes] | None:
    """The proof as a list of 32-byte hashes, or None if it is anything else."""
    if isinstance(proof, str | bytes | bytearray) or not isinstance(proof, Sequence):
        return None
    items = [_as_hash(h) for h in proof]
    hashes = [h for h in items if h is not None]
    return hashes if len(hashes) == len(items) else None


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2. `leaf` is the leaf *hash* (leaf_hash of the entry's bytes)."""
    path, r, want = _hashes(proof), _as_hash(leaf), _as_hash(root)
    if path is None or r is None or want is None:
        return False
    if not (_is_count(index) and _is_count(size)) or index >= size:
        return False
    fn, sn = index, size - 1
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            # On the right edge a node can lack a right sibling; skip those levels.
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == want


# --- Consistency proofs (RFC 9162 §2.1.4) ------------------------------------------------


def _consistency_ranges(
    first: int, start: int, end: int, first_is_subtree: bool
) -> list[tuple[int, int]]:
    """SUBPROOF(first - start, D[start:end], b) as leaf ranges, bottom-up."""
    if first == end:
        # The old tree's root is itself a node here; a verifier that knows it (b true: it is
        # the old root) needs nothing, otherwise it is sent.
        return [] if first_is_subtree else [(start, end)]
    mid = start + _split(end - start)
    if first <= mid:
        return [*_consistency_ranges(first, start, mid, first_is_subtree), (mid, end)]
    return [*_consistency_ranges(first, mid, end, False), (start, mid)]


def _check_consistency_args(first: int, second: int) -> None:
    if not 1 <= first <= second:
        raise ValueError(f"no consistency proof from size {first} to size {second}")


def consistency_proof_nodes(first: int, second: int) -> list[Node]:
    _check_consistency_args(first, second)
    if first == second:
        return []
    return _nodes_of(_consistency_ranges(first, 0, second, True))


def consistency_proof(first: int, second: int, get: Getter) -> list[bytes]:
    _check_consistency_args(first, second)
    if first == second:
        return []
    return [range_hash(s, e, get) for s, e in _consistency_ranges(first, 0, second, True)]


def verify_consistency(
    first: int,
    second: int,
    proof: Sequence[bytes],
    first_root: bytes,
    second_root: bytes,
) -> bool:
    """RFC 9162 §2.1.4.2, plus the two trivial cases the RFC algorithm does not cover: equal
    sizes (empty proof, equal roots) and first == 0 (the empty tree precedes every tree)."""
    path, root1, root2 = _hashes(proof), _as_hash(first_root), _as_hash(second_root)
    if path is None or root1 is None or root2 is None:
        return False
    if not (_is_count(first) and _is_count(second)) or first > second:
        return False
    if first == second:
        return not path and root1 == root2
    if first == 0:
        return not path and root1 == EMPTY_ROOT
    if not path:
        return False
    if first & (first - 1) == 0:
        # A power-of-two old tree is a node of the new one; the proof leaves it out.
        path = [root1, *path]
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == root1 and sr == root2


# --- An in-memory store ------------------------------------------------------------------


class MemoryTree:
    """The stored-node scheme with a dict for a table: for tests, benchmarks and monitors."""

    def __init__(self) -> None:
        self.nodes: dict[Node, bytes] = {}
        self.size = 0

    def append(self, data: bytes) -> int:
        """Append one entry's bytes; return its leaf index."""
        frontier = {node: self.nodes[node] for node in nodes_for_append(self.size)}
        new, _root = append(self.size, leaf_hash(data), frontier)
        self.nodes.update(new)
        self.size += 1
        return self.size - 1

    def get(self, level: int, index: int) -> bytes:
        return self.nodes[(level, index)]

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ValueError(f"no tree of size {size}; the log has {self.size} leaves")
        return range_hash(0, size, self.get)

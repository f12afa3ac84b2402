"""RFC 9162 Merkle trees: the leaf hash of a receipt's bytes, the inclusion proof that puts
that leaf in a tree of a given size and root, and the root of a tree from its leaf hashes."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2; `leaf` is the leaf hash."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = _node(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """MTH (RFC 9162 §2.1.1) of a tree whose leaf hashes are `leaves`, in one pass: the
    largest perfect subtrees are built left to right, then folded from the right, which is
    how MTH splits a tree at the largest power of two below its size."""
    if not leaves:
        return EMPTY_ROOT
    stack: list[tuple[int, bytes]] = []  # (height, root) of perfect subtrees, left to right
    for leaf in leaves:
        height, node = 0, leaf
        while stack and stack[-1][0] == height:
            node = _node(stack.pop()[1], node)
            height += 1
        stack.append((height, node))
    root = stack.pop()[1]
    while stack:
        root = _node(stack.pop()[1], root)
    return root

"""The Merkle log against published vectors and against a from-the-RFC reference.

The reference functions below are written straight from RFC 9162 §2.1 over lists of entries,
sharing no code with the module, so agreement means the stored-node path is right.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Iterator

import pytest

from receiptsite.integrity.merkle import (
    EMPTY_ROOT,
    MemoryTree,
    append,
    consistency_proof,
    consistency_proof_nodes,
    inclusion_proof,
    inclusion_proof_nodes,
    leaf_hash,
    node_hash,
    nodes_for_append,
    perfect_subtrees,
    range_hash,
    root_from_leaves,
    verify_consistency,
    verify_inclusion,
)

pytestmark = pytest.mark.unit

MAX_SIZE = 70

# --- Reference implementation (RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1) ----------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [ref_mth(d)]
    k = _k(len(d))
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    return ref_subproof(m, d, True)


# The same recursions over sizes only: the sequence of operations a verifier performs. Two
# (index, size) or (first, second) pairs with the same shape run the identical computation,
# so a proof made for one verifies for the other whenever the roots are the same; that is
# inherent to RFC 9162 (the size is bound by the signed checkpoint, not by the proof).


def path_shape(m: int, n: int) -> tuple[str, ...]:
    if n == 1:
        return ()
    k = _k(n)
    return path_shape(m, k) + ("R",) if m < k else path_shape(m - k, n - k) + ("L",)


def subproof_shape(m: int, n: int, b: bool = True) -> tuple[str, ...]:
    if m == n:
        return ("old root",) if b else ("seed",)
    k = _k(n)
    if m <= k:
        return subproof_shape(m, k, b) + ("R",)
    return subproof_shape(m - k, n - k, False) + ("L",)


# --- Fixtures -----------------------------------------------------------------------------

ENTRIES = [f"receipt {i}".encode() for i in range(MAX_SIZE)]


@pytest.fixture(scope="module")
def tree() -> MemoryTree:
    t = MemoryTree()
    for entry in ENTRIES:
        t.append(entry)
    return t


def flip(h: bytes, bit: int) -> bytes:
    b = bytearray(h)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


# --- Published vectors --------------------------------------------------------------------
# From the certificate-transparency / transparency-dev/merkle reference tests
# (proof/verify_test.go): an 8-entry tree, roots of every prefix, and some proofs.

CT_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (leaf index, tree size, path); the Go source numbers leaves from 1.
CT_INCLUSION = [
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CT_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]


@pytest.fixture(scope="module")
def ct_tree() -> MemoryTree:
    t = MemoryTree()
    for entry in CT_LEAVES:
        t.append(entry)
    return t


def test_the_published_roots_of_every_prefix_match(ct_tree: MemoryTree) -> None:
    for size, want in enumerate(CT_ROOTS, start=1):
        assert ct_tree.root(size).hex() == want
        assert root_from_leaves([leaf_hash(e) for e in CT_LEAVES[:size]]).hex() == want


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION)
def test_the_published_inclusion_proofs_match(
    ct_tree: MemoryTree, index: int, size: int, path: list[str]
) -> None:
    proof = inclusion_proof(index, size, ct_tree.get)
    assert [p.hex() for p in proof] == path
    root = bytes.fromhex(CT_ROOTS[size - 1])
    assert verify_inclusion(leaf_hash(CT_LEAVES[index]), index, size, proof, root)


@pytest.mark.parametrize(("first", "second", "path"), CT_CONSISTENCY)
def test_the_published_consistency_proofs_match(
    ct_tree: MemoryTree, first: int, second: int, path: list[str]
) -> None:
    proof = consistency_proof(first, second, ct_tree.get)
    assert [p.hex() for p in proof] == path
    roots = bytes.fromhex(CT_ROOTS[first - 1]), bytes.fromhex(CT_ROOTS[second - 1])
    assert verify_consistency(first, second, proof, *roots)


def test_the_empty_tree_has_the_hash_of_the_empty_string() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert MemoryTree().root() == EMPTY_ROOT == root_from_leaves([])


# --- Stored nodes -------------------------------------------------------------------------


def test_perfect_subtrees_follow_the_binary_form_of_the_size() -> None:
    assert perfect_subtrees(0, 0) == []
    assert perfect_subtrees(0, 7) == [(2, 0), (1, 2), (0, 6)]
    assert perfect_subtrees(0, 8) == [(3, 0)]
    assert perfect_subtrees(8, 13) == [(2, 2), (0, 12)]
    for size in range(MAX_SIZE + 1):
        nodes = perfect_subtrees(0, size)
        assert len(nodes) == size.bit_count()
        assert sum(1 << level for level, _ in nodes) == size


@pytest.mark.parametrize(("start", "end"), [(1, 4), (2, 5), (3, 3 - 1), (-1, 0), (4, 9)])
def test_perfect_subtrees_refuse_ranges_that_mth_does_not_split_that_way(
    start: int, end: int
) -> None:
    with pytest.raises(ValueError):
        perfect_subtrees(start, end)


def test_the_tree_stores_exactly_the_complete_subtrees(tree: MemoryTree) -> None:
    want = {(level, i) for level in range(MAX_SIZE.bit_length()) for i in range(MAX_SIZE >> level)}
    assert set(tree.nodes) == want
    for level, i in want:
        d = ENTRIES[i << level : (i + 1) << level]
        assert tree.get(level, i) == ref_mth(d)


def test_append_stores_the_leaf_and_each_completed_parent_and_returns_the_new_root() -> None:
    t = MemoryTree()
    for size, entry in enumerate(ENTRIES[:40]):
        frontier = {node: t.nodes[node] for node in nodes_for_append(size)}
        new, root = append(size, leaf_hash(entry), frontier)
        trailing_ones = (size ^ (size + 1)).bit_length() - 1
        assert set(new) == {(level, size >> level) for level in range(trailing_ones + 1)}
        assert root == ref_mth(ENTRIES[: size + 1])
        t.append(entry)
        assert t.root() == root


def test_append_needs_only_the_frontier() -> None:
    t = MemoryTree()
    for entry in ENTRIES:
        t.append(entry)
        for size in range(t.size + 1):
            assert range_hash(0, size, t.get) == ref_mth(ENTRIES[:size])


# --- Every proof up to MAX_SIZE, stored-node path against the reference -------------------


def test_every_inclusion_proof_matches_the_reference_and_verifies(tree: MemoryTree) -> None:
    for size in range(1, MAX_SIZE + 1):
        root = tree.root(size)
        assert root == ref_mth(ENTRIES[:size])
        for index in range(size):
            proof = inclusion_proof(index, size, tree.get)
            assert proof == ref_path(index, ENTRIES[:size]), (index, size)
            assert verify_inclusion(leaf_hash(ENTRIES[index]), index, size, proof, root)


def test_every_consistency_proof_matches_the_reference_and_verifies(tree: MemoryTree) -> None:
    roots = [tree.root(size) for size in range(MAX_SIZE + 1)]
    for first, second in itertools.combinations_with_replacement(range(1, MAX_SIZE + 1), 2):
        proof = consistency_proof(first, second, tree.get)
        assert proof == ref_proof(first, ENTRIES[:second]), (first, second)
        assert verify_consistency(first, second, proof, roots[first], roots[second])


def _counting(tree: MemoryTree) -> tuple[Callable[[int, int], bytes], list[tuple[int, int]]]:
    seen: list[tuple[int, int]] = []

    def get(level: int, index: int) -> bytes:
        seen.append((level, index))
        return tree.get(level, index)

    return get, seen


def test_proofs_read_exactly_the_nodes_they_announce(tree: MemoryTree) -> None:
    for size in range(1, MAX_SIZE + 1):
        for other in range(size):
            get, seen = _counting(tree)
            inclusion_proof(other, size, get)
            assert sorted(seen) == sorted(inclusion_proof_nodes(other, size))
            get, seen = _counting(tree)
            consistency_proof(other + 1, size, get)
            assert sorted(seen) == sorted(consistency_proof_nodes(other + 1, size))


@pytest.mark.parametrize("size", [2**20, 2**40 + 12345, 2**62 - 1])
def test_proofs_need_only_logarithmically_many_nodes(size: int) -> None:
    bound = 2 * size.bit_length()
    rng = random.Random(size)
    for _ in range(200):
        index = rng.randrange(size)
        assert len(inclusion_proof_nodes(index, size)) <= bound
        assert len(consistency_proof_nodes(index + 1, size)) <= bound
    assert len(nodes_for_append(size)) <= size.bit_length()


def test_proofs_refuse_impossible_sizes(tree: MemoryTree) -> None:
    for index, size in [(0, 0), (5, 5), (-1, 3)]:
        with pytest.raises(ValueError):
            inclusion_proof(index, size, tree.get)
    for first, second in [(0, 5), (6, 5), (-1, 2)]:
        with pytest.raises(ValueError):
            consistency_proof(first, second, tree.get)
    assert consistency_proof(7, 7, tree.get) == []
    with pytest.raises(ValueError):
        tree.root(MAX_SIZE + 1)


# --- Corrupted proofs ---------------------------------------------------------------------

# Every pair up to size 16, and a fixed sample of larger ones up to MAX_SIZE.
_rng = random.Random(9162)
INCLUSION_CASES = [(i, n) for n in range(1, 17) for i in range(n)] + [
    (_rng.randrange(n), n) for n in range(17, MAX_SIZE + 1) for _ in range(4)
]
CONSISTENCY_CASES = [(m, n) for n in range(1, 17) for m in range(1, n + 1)] + [
    (_rng.randrange(1, n + 1), n) for n in range(17, MAX_SIZE + 1) for _ in range(4)
]
FOREIGN = hashlib.sha256(b"not in the log").digest()


def flipped_proofs(proof: list[bytes], size: int) -> Iterator[list[bytes]]:
    """Every bit of every element for small trees; for larger ones one bit per element,
    at a different position each time."""
    for pos, h in enumerate(proof):
        bits = range(256) if size <= 8 else [(pos * 37 + size) % 256]
        for bit in bits:
            yield [*proof[:pos], flip(h, bit), *proof[pos + 1 :]]


def edited_proofs(proof: list[bytes], root: bytes) -> Iterator[list[bytes]]:
    for pos in range(len(proof)):
        yield proof[:pos] + proof[pos + 1 :]  # an element removed
        yield proof[: pos + 1] + proof[pos:]  # an element duplicated
        if pos + 1 < len(proof):
            yield [*proof[:pos], proof[pos + 1], proof[pos], *proof[pos + 2 :]]  # swapped
    for extra in (FOREIGN, root, EMPTY_ROOT):
        yield [*proof, extra]
        yield [extra, *proof]
    yield [*proof, b""]  # not a hash at all
    yield [*proof[:-1], proof[-1][:31]] if proof else [b"\x00" * 31]


def test_every_corrupted_inclusion_proof_fails(tree: MemoryTree) -> None:
    roots = [tree.root(size) for size in range(MAX_SIZE + 1)]
    for index, size in INCLUSION_CASES:
        leaf, root = leaf_hash(ENTRIES[index]), roots[size]
        proof = inclusion_proof(index, size, tree.get)
        for bad in itertools.chain(flipped_proofs(proof, size), edited_proofs(proof, root)):
            assert not verify_inclusion(leaf, index, size, bad, root), (index, size, bad)
        for other in (index - 1, index + 1, size, -1):
            assert not verify_inclusion(leaf, other, size, proof, root), (other, size)
        for other in (size - 1, size + 1, 2 * size, size // 2):
            if other < 1:
                continue
            # Against the other size's own root it can never verify ...
            if other <= MAX_SIZE:
                assert not verify_inclusion(leaf, index, other, proof, roots[other])
            # ... and against this root only if the verifier does the very same hashing.
            same = index < other and path_shape(index, other) == path_shape(index, size)
            assert verify_inclusion(leaf, index, other, proof, root) == same, (index, other)
        wrong_leaves = [leaf_hash(ENTRIES[(index + 1) % MAX_SIZE]), ENTRIES[index], FOREIGN]
        for bad_leaf in wrong_leaves + [flip(leaf, b) for b in (0, 100, 255)]:
            assert not verify_inclusion(bad_leaf, index, size, proof, root)
        for bad_root in [FOREIGN, EMPTY_ROOT, flip(root, 7), roots[size - 1], root[:31]]:
            assert not verify_inclusion(leaf, index, size, proof, bad_root)


def test_every_corrupted_consistency_proof_fails(tree: MemoryTree) -> None:
    roots = [tree.root(size) for size in range(MAX_SIZE + 1)]
    for first, second in CONSISTENCY_CASES:
        r1, r2 = roots[first], roots[second]
        proof = consistency_proof(first, second, tree.get)
        for bad in itertools.chain(flipped_proofs(proof, second), edited_proofs(proof, r2)):
            assert not verify_consistency(first, second, bad, r1, r2), (first, second, bad)
        for bad1, bad2 in [(FOREIGN, r2), (r1, FOREIGN), (flip(r1, 3), r2), (r1, flip(r2, 3))]:
            assert not verify_consistency(first, second, proof, bad1, bad2)
        if first != second:
            assert not verify_consistency(first, second, proof, r2, r1)  # swapped
            assert not verify_consistency(first, second, [], r1, r2)
        shape = subproof_shape(first, second) if first < second else None
        other_sizes = [
            (first - 1, second),
            (first + 1, second),
            (first, second - 1),
            (first, second + 1),
            (first, 2 * second),
            (first, second // 2),
            (second, first),
        ]
        for f, s in other_sizes:
            if (f, s) == (first, second):
                continue
            if 1 <= f <= s <= MAX_SIZE:
                # The other sizes' own roots never verify ...
                assert not verify_consistency(f, s, proof, roots[f], roots[s]), (f, s)
            # ... these roots only if the verifier does the very same hashing.
            same = 1 <= f < s and subproof_shape(f, s) == shape
            assert verify_consistency(f, s, proof, r1, r2) == same, (first, second, f, s)


# --- Verification never raises ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        (b"", 0, 1, [], b""),
        (EMPTY_ROOT, 0, 0, [], EMPTY_ROOT),
        (EMPTY_ROOT, -1, 1, [], EMPTY_ROOT),
        (EMPTY_ROOT, 0, 1, None, EMPTY_ROOT),
        (EMPTY_ROOT, 0, 1, "ab", EMPTY_ROOT),
        (EMPTY_ROOT, 0, 2, [bytearray(32)], EMPTY_ROOT),
        (EMPTY_ROOT, 0.0, 1, [], EMPTY_ROOT),
        (EMPTY_ROOT, True, 2, [EMPTY_ROOT], EMPTY_ROOT),
        ("x" * 32, 0, 1, [], "x" * 32),
    ],
)
def test_verify_inclusion_answers_false_for_garbage(args: tuple[object, ...]) -> None:
    assert verify_inclusion(*args) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        (0, 0, [], b"", b""),
        (2, 1, [], EMPTY_ROOT, EMPTY_ROOT),
        (1, 2, [], EMPTY_ROOT, EMPTY_ROOT),
        (1, 1, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT),
        (0, 1, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT),
        (1, 2, None, EMPTY_ROOT, EMPTY_ROOT),
        (1, 2, [b"short"], EMPTY_ROOT, EMPTY_ROOT),
        (-1, 2, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT),
        (1.0, 2, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT),
    ],
)
def test_verify_consistency_answers_false_for_garbage(args: tuple[object, ...]) -> None:
    assert verify_consistency(*args) is False  # type: ignore[arg-type]


def test_verification_accepts_hashes_read_back_as_memoryview(tree: MemoryTree) -> None:
    proof = [memoryview(h) for h in inclusion_proof(3, 9, tree.get)]
    root = memoryview(tree.root(9))
    assert verify_inclusion(memoryview(leaf_hash(ENTRIES[3])), 3, 9, proof, root)  # type: ignore[arg-type]
    cproof = [memoryview(h) for h in consistency_proof(3, 9, tree.get)]
    assert verify_consistency(3, 9, cproof, memoryview(tree.root(3)), root)  # type: ignore[arg-type]
    assert range_hash(0, 1, lambda lv, ix: memoryview(tree.get(lv, ix))) == tree.get(0, 0)  # type: ignore[arg-type, return-value]


def test_trivial_consistency_needs_no_proof(tree: MemoryTree) -> None:
    r = tree.root(5)
    assert verify_consistency(5, 5, [], r, r)
    assert verify_consistency(0, 5, [], EMPTY_ROOT, r)
    assert not verify_consistency(0, 5, [], FOREIGN, r)
    assert verify_consistency(0, 0, [], EMPTY_ROOT, EMPTY_ROOT)


def test_hash_helpers_use_the_rfc_prefixes() -> None:
    assert leaf_hash(b"a") == hashlib.sha256(b"\x00a").digest()
    assert node_hash(b"l", b"r") == hashlib.sha256(b"\x01lr").digest()

"""The log as static tiles (c2sp.org/tlog-tiles; SPEC, "The log as static tiles"): the
checkpoint and the hash tiles, full and partial, their paths exactly as specified, their
caching, and no entry bundles. A whole log read back from its tiles by a reader of the tests'
own is tests/live/test_witnessing.py."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.test import Client

from receiptsite.integrity import merkle, note
from receiptsite.receipts.models import LogEntry, Receipt
from tests.conftest import Producer, assert_problem, example_body

pytestmark = pytest.mark.db

SIZE = 260  # one full level-0 tile and a partial one of 4; a partial level-1 tile of 1


@pytest.fixture
def leaves(producer: Producer) -> list[bytes]:
    """A log of SIZE receipts, and its leaf hashes recomputed from the stored bytes."""
    for start in range(0, SIZE, 130):
        items = [example_body(idempotency_key=f"tile-{i}") for i in range(start, start + 130)]
        response = producer.post({"receipts": items}, path="/api/receipts/batch")
        assert response.status_code == 200, response.content
    by_index = dict(LogEntry.objects.values_list("receipt_id", "index"))
    rows = Receipt.objects.values_list("pk", "canonical_bytes")
    hashes = {by_index[pk]: merkle.leaf_hash(bytes(data)) for pk, data in rows}
    return [hashes[i] for i in range(SIZE)]


def get(client: Client, path: str, **headers: str) -> Any:
    return client.get(path, headers=headers)


def test_the_tiles_checkpoint_is_the_latest_checkpoint_cached_seconds(
    client: Client, leaves: list[bytes]
) -> None:
    response = get(client, "/log/checkpoint")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Cache-Control"] == "public, max-age=5"
    assert response.content == get(client, "/api/log/checkpoint").content
    _, size, root = note.parse_checkpoint(response.content.decode().partition("\n\n")[0] + "\n")
    assert (size, root) == (SIZE, merkle.root_from_leaves(leaves))


def test_a_full_level_0_tile_is_256_leaf_hashes_immutable(
    client: Client, leaves: list[bytes]
) -> None:
    response = get(client, "/log/tile/0/000")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Cache-Control"] == "public, max-age=31536000, immutable"
    assert response["Access-Control-Allow-Origin"] == "*"
    assert response.content == b"".join(leaves[:256]) and len(response.content) == 8192


def test_partial_tiles_hold_the_hashes_a_signed_tree_had(
    client: Client, leaves: list[bytes]
) -> None:
    assert get(client, "/log/tile/0/001.p/4").content == b"".join(leaves[256:260])
    # An earlier tree's partial tile (every size was signed): its nodes are stored.
    assert get(client, "/log/tile/0/001.p/2").content == b"".join(leaves[256:258])
    assert get(client, "/log/tile/0/000.p/7").content == b"".join(leaves[:7])
    # Level 1: the hash of the full tile below, MTH of the first 256 leaves.
    assert get(client, "/log/tile/1/000.p/1").content == merkle.root_from_leaves(leaves[:256])


@pytest.mark.parametrize(
    "path",
    [
        "/log/tile/0/001",  # not full yet
        "/log/tile/0/001.p/5",  # a later tree's
        "/log/tile/0/002.p/1",
        "/log/tile/1/000",
        "/log/tile/1/000.p/2",
        "/log/tile/2/000.p/1",
    ],
)
def test_a_tile_the_signed_tree_does_not_have_is_a_404(
    client: Client, leaves: list[bytes], path: str
) -> None:
    body = assert_problem(get(client, path), 404, "no-such-tile")
    assert "no entry bundles" in body["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/log/tile/0/0",
        "/log/tile/0/0000",
        "/log/tile/00/000",
        "/log/tile/64/000",
        "/log/tile/0/x000/000",
        "/log/tile/0/001/000",
        "/log/tile/0/000.p/0",
        "/log/tile/0/000.p/256",
        "/log/tile/0/000.p/04",
        "/log/tile/entries/000",
        "/log/tile/entries/000.p/4",
    ],
)
def test_any_other_path_is_no_tile(client: Client, leaves: list[bytes], path: str) -> None:
    assert get(client, path).status_code == 404


def test_a_tile_answers_304_to_its_etag_and_head_without_a_body(
    client: Client, leaves: list[bytes]
) -> None:
    first = get(client, "/log/tile/0/000")
    etag = first["ETag"]
    assert etag == '"' + hashlib.sha256(first.content).hexdigest()[:32] + '"'
    again = get(client, "/log/tile/0/000", **{"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again["Cache-Control"] == "public, max-age=31536000, immutable"
    other = get(client, "/log/tile/0/000", **{"If-None-Match": '"something-else"'})
    assert other.status_code == 200
    head = client.head("/log/tile/0/000")
    assert head.status_code == 200 and head.content == b""
    checkpoint = get(client, "/log/checkpoint")
    etag = checkpoint["ETag"]
    assert get(client, "/log/checkpoint", **{"If-None-Match": etag}).status_code == 304


def test_the_tiles_recompute_the_checkpoints_root(client: Client, leaves: list[bytes]) -> None:
    level0 = get(client, "/log/tile/0/000").content + get(client, "/log/tile/0/001.p/4").content
    read = [level0[i : i + 32] for i in range(0, len(level0), 32)]
    text = get(client, "/log/checkpoint").content.decode()
    _, size, root = note.parse_checkpoint(text.partition("\n\n")[0] + "\n")
    assert len(read) == size and merkle.root_from_leaves(read) == root


def test_an_empty_log_has_no_tiles(client: Client, db: None) -> None:
    from receiptsite.ledger import log

    log.sign_head()
    assert get(client, "/log/checkpoint").status_code == 200
    assert get(client, "/log/tile/0/000.p/1").status_code == 404

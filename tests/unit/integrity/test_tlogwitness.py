"""The log's side of c2sp.org/tlog-witness: the request body and the answers' data."""

from __future__ import annotations

import base64

import pytest

from receiptsite.integrity import tlogwitness

pytestmark = pytest.mark.unit

NOTE = "log.example/receipts\n3\n" + "A" * 43 + "=\n\n— log.example/receipts AAAA\n"


def test_the_body_is_old_size_proof_lines_a_blank_line_and_the_checkpoint() -> None:
    body = tlogwitness.add_checkpoint_body(2, [bytes(32), b"\xff" * 32], NOTE)
    assert body == (
        b"old 2\n"
        + base64.b64encode(bytes(32))
        + b"\n"
        + base64.b64encode(b"\xff" * 32)
        + b"\n\n"
        + NOTE.encode("utf-8")
    )
    assert tlogwitness.add_checkpoint_body(0, [], NOTE) == b"old 0\n\n" + NOTE.encode()


@pytest.mark.parametrize(
    ("old", "proof"),
    [(0, [bytes(32)]), (-1, []), (5, [bytes(31)]), (5, [bytes(32)] * 64)],
)
def test_a_body_the_spec_forbids_is_never_made(old: int, proof: list[bytes]) -> None:
    with pytest.raises(ValueError):
        tlogwitness.add_checkpoint_body(old, proof, NOTE)


@pytest.mark.parametrize(("body", "size"), [(b"0\n", 0), (b"20852014\n", 20852014)])
def test_a_409s_size_is_read(body: bytes, size: int) -> None:
    assert tlogwitness.parse_size(body) == size


@pytest.mark.parametrize(
    "body", [b"", b"12", b"012\n", b"12\n\n", b"-1\n", b" 12\n", b"\xd9\xa1\n"]
)
def test_anything_else_is_no_size(body: bytes) -> None:
    with pytest.raises(ValueError):
        tlogwitness.parse_size(body)


def test_a_200s_lines_are_read_and_anything_else_refused() -> None:
    assert tlogwitness.signature_lines("— w1 AAAA\n— w2 BBBB\n".encode()) == [
        "— w1 AAAA",
        "— w2 BBBB",
    ]
    for bad in (b"", "— w1 AAAA".encode(), b"ok\n", "— w1 A\n\n".encode(), b"\xff\n"):
        with pytest.raises(ValueError):
            tlogwitness.signature_lines(bad)

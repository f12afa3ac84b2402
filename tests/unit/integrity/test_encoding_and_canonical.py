from __future__ import annotations

import pytest

from receiptsite.integrity.canonical import canonical_bytes, is_canonical, sha256_hex
from receiptsite.integrity.encoding import b64, b64decode, b64url, b64url_decode

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xfb\xff", b"abc", bytes(range(256))])
def test_every_encoding_round_trips(data: bytes) -> None:
    assert b64decode(b64(data)) == data
    assert b64url_decode(b64url(data)) == data
    assert "=" not in b64url(data)


def test_url_safe_base64_uses_the_url_alphabet_and_accepts_padding() -> None:
    assert b64url(b"\xfb\xff") == "-_8"
    assert b64url_decode("-_8=") == b"\xfb\xff"


@pytest.mark.parametrize("text", ["YQ", "Y Q==", "YQ==\n", "Y$Q=", "-_8=", "é"])
def test_standard_base64_decoding_is_strict(text: str) -> None:
    with pytest.raises(ValueError):
        b64decode(text)


@pytest.mark.parametrize("text", ["+/8", "Y", "YQ===", "YQ=", "Y Q", "YQ\n"])
def test_url_safe_base64_decoding_is_strict(text: str) -> None:
    with pytest.raises(ValueError):
        b64url_decode(text)


def test_canonical_bytes_sort_keys_and_drop_whitespace() -> None:
    assert canonical_bytes({"b": [1, 2.5, None], "a": "é"}) == '{"a":"é","b":[1,2.5,null]}'.encode()


def test_sha256_hex_is_lowercase_hex() -> None:
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize(
    "data",
    [b"{}", b"[]", b'{"a":1,"b":[true,false,null]}', b'"\xc3\xa9"', b"1.5", b'{"\\u0000":0}'],
)
def test_it_accepts_canonical_json(data: bytes) -> None:
    assert is_canonical(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"b":1,"a":2}',  # unsorted
        b'{"a": 1}',  # whitespace
        b'{"a":1,"a":1}',  # duplicate key, even with the same value
        b"1.0",  # number not in shortest form
        b'"\\u00e9"',  # needless escape
        b"NaN",
        b"[Infinity]",
        b"1e999",  # overflows to infinity
        b"9007199254740993",  # beyond the exact integer range
        b'"\\ud800"',  # lone surrogate
        b"\xef\xbb\xbf{}",  # BOM
        "{}".encode("utf-16"),
        b"\xff",
        b"",
        b"{",
        b"[" * 100_000 + b"]" * 100_000,  # nesting deep enough to exhaust recursion
    ],
)
def test_it_rejects_json_that_is_not_canonical_without_raising(data: bytes) -> None:
    assert not is_canonical(data)


def test_it_answers_false_for_things_that_are_not_bytes() -> None:
    assert not is_canonical("{}")  # type: ignore[arg-type]
    assert is_canonical(memoryview(b"{}"))  # type: ignore[arg-type]

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from receiptsite.integrity.encoding import b64, b64decode
from receiptsite.integrity.keys import public_raw
from receiptsite.integrity.merkle import EMPTY_ROOT
from receiptsite.integrity.note import (
    checkpoint_body,
    key_id,
    parse_checkpoint,
    parse_verifier_key,
    sign_note,
    verifier_key,
    verify_note,
)

pytestmark = pytest.mark.unit

ORIGIN = "log.example/receipts"
# Fixed keys: test ids name them, and every pytest-xdist worker must collect the same ids.
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
VKEY = verifier_key(ORIGIN, public_raw(KEY))
BODY = checkpoint_body(ORIGIN, 42, bytes(range(32)))
NOTE = sign_note(BODY, ORIGIN, KEY)


def test_a_signed_checkpoint_round_trips() -> None:
    expected = f"{ORIGIN}\n42\n{b64(bytes(range(32)))}\n"
    assert expected == BODY
    assert NOTE.startswith(BODY + "\n\u2014 " + ORIGIN + " ")
    assert verify_note(NOTE, [VKEY]) == BODY
    assert parse_checkpoint(BODY) == (ORIGIN, 42, bytes(range(32)))


def test_the_signature_starts_with_the_key_id() -> None:
    blob = b64decode(NOTE.rstrip("\n").rsplit(" ", 1)[1])
    assert blob[:4] == key_id(ORIGIN, public_raw(KEY)) and len(blob) == 68


def test_the_empty_tree_has_a_checkpoint() -> None:
    assert parse_checkpoint(checkpoint_body(ORIGIN, 0, EMPTY_ROOT)) == (ORIGIN, 0, EMPTY_ROOT)


def test_a_flipped_byte_in_the_body_or_the_signature_fails() -> None:
    sig_start = NOTE.index("\u2014")
    for i, ch in enumerate(NOTE):
        if i < len(BODY) - 1 and ch != "\n":
            changed = NOTE[:i] + chr(ord(ch) ^ 1) + NOTE[i + 1 :]
            assert verify_note(changed, [VKEY]) is None, i
    sig_b64 = NOTE[sig_start:].rstrip("\n").rsplit(" ", 1)[1]
    blob = b64decode(sig_b64)
    for i in range(len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 0x01
        assert verify_note(NOTE.replace(sig_b64, b64(bytes(bad))), [VKEY]) is None, i


def test_an_unknown_key_fails() -> None:
    other = verifier_key(ORIGIN, public_raw(OTHER))
    assert verify_note(NOTE, [other]) is None
    assert verify_note(NOTE, []) is None
    # Same key under another name: a different (name, id) pair, so still unknown.
    assert verify_note(NOTE, [verifier_key("other.example/log", public_raw(KEY))]) is None


def test_unknown_signatures_are_ignored_and_known_bad_ones_reject_the_note() -> None:
    foreign = sign_note(BODY, "witness.example", OTHER).split("\n\n", 1)[1]
    assert verify_note(NOTE + foreign, [VKEY]) == BODY
    assert verify_note(BODY + "\n" + foreign, [VKEY]) is None  # only an unknown signer
    # A second signature line from the known key that does not verify: reject everything.
    bad_line = sign_note("other text\n", ORIGIN, KEY).split("\n\n", 1)[1]
    assert verify_note(NOTE + bad_line, [VKEY]) is None


def test_a_rotated_key_set_verifies_with_either_signature() -> None:
    both = [VKEY, verifier_key(ORIGIN, public_raw(OTHER))]
    assert verify_note(sign_note(BODY, ORIGIN, OTHER), both) == BODY
    two = NOTE + sign_note(BODY, ORIGIN, OTHER).split("\n\n", 1)[1]
    assert verify_note(two, both) == BODY


GARBAGE = [
    "",
    "\n",
    "\n\n",
    BODY,
    BODY + "\n",
    NOTE.rstrip("\n"),
    NOTE + "\n",
    NOTE.replace("\u2014", "-"),
    NOTE.replace("\u2014 ", "\u2014"),
    NOTE.replace("\n\n", "\n"),
    NOTE[: NOTE.rindex(" ")] + " !!!!\n",
    NOTE[: NOTE.rindex(" ")] + " AAAA\n",
    NOTE[: NOTE.rindex(" ")] + "\n",
    NOTE + "garbage line\n",
    NOTE + "\u2014 \n",
    NOTE + "\u2014  AAAAAAA=\n",
    NOTE.replace("42", "4\x002"),
    NOTE.replace("42", "4\r2"),
    NOTE.replace("42", "4\ud8002"),
    BODY + "\n" + "\u2014 x AAAAAAAA\n" * 1000,
    "\u2014 " * 10_000,
]


@pytest.mark.parametrize("note", GARBAGE)
def test_garbage_notes_do_not_raise(note: str) -> None:
    assert verify_note(note, [VKEY]) is None


def test_non_text_does_not_raise() -> None:
    assert verify_note(NOTE.encode(), [VKEY]) is None  # type: ignore[arg-type]
    assert verify_note(None, [VKEY]) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "vkey",
    [
        "",
        "name",
        "name+00000000",
        VKEY + "+x",
        VKEY.replace("+", "+0", 1),
        VKEY[:-2],
        "other.example+" + VKEY.split("+", 1)[1],  # id does not match the name
        VKEY.rsplit("+", 1)[0] + "+" + b64(b"\x02" + public_raw(KEY)),  # not type 0x01
        "has space+" + VKEY.split("+", 1)[1],
    ],
)
def test_a_malformed_verifier_key_is_refused(vkey: str) -> None:
    with pytest.raises(ValueError):
        parse_verifier_key(vkey)


def test_a_verifier_key_parses_back() -> None:
    assert parse_verifier_key(VKEY) == (ORIGIN, key_id(ORIGIN, public_raw(KEY)), public_raw(KEY))


@pytest.mark.parametrize(
    "body",
    [
        "",
        "origin\n1\n",
        "origin\n1\n" + b64(bytes(32)),
        "origin\n01\n" + b64(bytes(32)) + "\n",
        "origin\n-1\n" + b64(bytes(32)) + "\n",
        "origin\n+1\n" + b64(bytes(32)) + "\n",
        "origin\n\u0661\n" + b64(bytes(32)) + "\n",  # ARABIC-INDIC DIGIT ONE
        "origin\n1\n" + b64(bytes(31)) + "\n",
        "origin\n1\n" + b64(bytes(32)).rstrip("=") + "\n",
        "\n1\n" + b64(bytes(32)) + "\n",
        "origin\n1\n" + b64(bytes(32)) + "\n\n",
    ],
)
def test_a_malformed_checkpoint_is_refused(body: str) -> None:
    with pytest.raises(ValueError):
        parse_checkpoint(body)


def test_checkpoint_extension_lines_are_allowed() -> None:
    body = checkpoint_body(ORIGIN, 3, bytes(32)) + "extension\n"
    assert parse_checkpoint(body) == (ORIGIN, 3, bytes(32))


@pytest.mark.parametrize(("body", "name"), [("no newline", ORIGIN), (BODY, "a b"), (BODY, "a+b")])
def test_signing_refuses_what_cannot_be_a_note(body: str, name: str) -> None:
    with pytest.raises(ValueError):
        sign_note(body, name, KEY)


def test_a_verifier_key_whose_base64_holds_a_plus_parses() -> None:
    # Standard base64 may contain '+', the separator of the other fields.
    keys = (Ed25519PrivateKey.from_private_bytes(bytes([i]) * 32) for i in range(256))
    raw = next(r for r in map(public_raw, keys) if "+" in b64(b"\x01" + r))
    vkey = verifier_key(ORIGIN, raw)
    assert vkey.count("+") > 2
    assert parse_verifier_key(vkey) == (ORIGIN, key_id(ORIGIN, raw), raw)

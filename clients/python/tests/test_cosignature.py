"""Witness cosignatures (receiptsite_client/verify/cosignature.py, c2sp.org/tlog-cosignature
cosignature/v1 with Ed25519): the key id, witness vkeys, the signed message, and verifying a
line, against the specification's own example and against cosignatures made here, each valid
one with corrupted variants."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from receiptsite_client.verify import (
    MAX_TIMESTAMP,
    cosignature_key_id,
    cosignature_timestamp,
    cosigned_message,
    parse_note,
    parse_witness_vkey,
    verify_cosignature_line,
)
from receiptsite_client.verify.cosignature import read_timestamp
from vector_helpers import VECTORS
from witness_helpers import (
    EM_DASH,
    b64,
    cosignature_line,
    flip_in_line,
    key_id,
    new_key,
    raw,
    vkey,
    witness_vkey,
)

pytestmark = pytest.mark.unit

# The example of c2sp.org/tlog-cosignature: a checkpoint and its witness's cosignature line.
SPEC_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_LINE = (
    f"{EM_DASH} witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZC"
    "B9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
)
SPEC_NOTE = (
    f"{SPEC_BODY}\n{EM_DASH} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJu"
    "rmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    f"{SPEC_LINE}\n"
)
SPEC_MESSAGE = (
    "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)
BODY = "receipts.example.org/receipts\n7\n" + b64(hashlib.sha256(b"root").digest()) + "\n"
NAME = "witness.example/w1"


def test_the_message_of_the_specifications_example_is_built_byte_for_byte() -> None:
    assert cosigned_message(SPEC_BODY, 1679315147) == SPEC_MESSAGE.encode()


def test_the_specifications_example_line_names_its_key_id_and_timestamp() -> None:
    note = parse_note(SPEC_NOTE)
    [(_, _, _), (name, kid, signature)] = note.signatures
    assert name == "witness.example.com/w1"
    assert kid.hex() == "8d66cf3f"
    assert read_timestamp(signature) == 1679315147
    assert note.text == SPEC_BODY


def test_the_key_id_is_sha256_of_name_newline_0x04_and_the_key() -> None:
    key = new_key()
    expected = hashlib.sha256(NAME.encode() + b"\n\x04" + raw(key)).digest()[:4]
    assert cosignature_key_id(NAME, raw(key)) == expected
    # Not the note key id of the same key (type 0x01): the types are kept apart.
    assert cosignature_key_id(NAME, raw(key)) != key_id(NAME, b"\x01", raw(key))


def test_a_witness_vkey_reads_as_its_name_key_id_and_key() -> None:
    key = new_key()
    witness = parse_witness_vkey(witness_vkey(NAME, key))
    assert (witness.name, witness.key_id, witness.raw) == (
        NAME,
        key_id(NAME, b"\x04", raw(key)),
        raw(key),
    )


def test_it_refuses_an_ml_dsa_witness_key_in_words_that_say_so() -> None:
    key = new_key()
    material = raw(key) * 41  # 1312 bytes, an ML-DSA-44 public key's size
    text = f"{NAME}+{key_id(NAME, b'\x06', material).hex()}+{b64(b'\x06' + material)}"
    with pytest.raises(ValueError, match="ML-DSA-44"):
        parse_witness_vkey(text)


def _vkey_variants() -> dict[str, str]:
    key = new_key()
    good = witness_vkey(NAME, key)
    name, hex_id, encoded = good.split("+", 2)
    return {
        "a note key (type 0x01)": vkey(NAME, key, b"\x01"),
        "an unknown type": vkey(NAME, key, b"\x09"),
        "a key id that is not the key's": f"{name}+{'00' * 4}+{encoded}",
        "an uppercase key id": f"{name}+{hex_id.upper()}+{encoded}"
        if hex_id != hex_id.upper()
        else f"{name}+{'A' * 8}+{encoded}",
        "a short key id": f"{name}+{hex_id[:6]}+{encoded}",
        "a short key": f"{name}+{hex_id}+{b64(b'\x04' + raw(key)[:31])}",
        "a key that is no base64": f"{name}+{hex_id}+{encoded[:-2]}!!",
        "no key": f"{name}+{hex_id}",
        "an empty name": f"+{hex_id}+{encoded}",
        "a name with a space": f"witness example+{hex_id}+{encoded}",
        "the id of another name": f"witness.example/w2+{hex_id}+{encoded}",
    }


VKEYS = _vkey_variants()


@pytest.mark.parametrize("text", VKEYS.values(), ids=VKEYS.keys())
def test_it_refuses_a_corrupted_witness_vkey(text: str) -> None:
    with pytest.raises(ValueError):
        parse_witness_vkey(text)


def test_a_cosignature_made_here_verifies_and_gives_its_timestamp() -> None:
    key = new_key()
    witness = parse_witness_vkey(witness_vkey(NAME, key))
    line = cosignature_line(BODY, NAME, key, 1796283000)
    assert verify_cosignature_line(line, witness, BODY) == 1796283000
    assert verify_cosignature_line(line.rstrip("\n"), witness, BODY) == 1796283000


def test_a_cosignature_with_any_one_bit_flipped_does_not_verify() -> None:
    key = new_key()
    witness = parse_witness_vkey(witness_vkey(NAME, key))
    line = cosignature_line(BODY, NAME, key, 1796283000)
    for at in range(76):  # key id (4), timestamp (8), signature (64)
        assert verify_cosignature_line(flip_in_line(line, at), witness, BODY) is None, at


def _line_variants() -> tuple[dict[str, tuple[str, str]], Ed25519PrivateKey]:
    """(line, body) pairs, each a valid cosignature but for one thing."""
    key, other = new_key(), new_key()
    good = cosignature_line(BODY, NAME, key, 1796283000)
    return {
        "another checkpoint": (good, BODY.replace("\n7\n", "\n8\n")),
        "another witness's key": (cosignature_line(BODY, NAME, other, 1796283000), BODY),
        "another key name": (good.replace(NAME, "witness.example/w2"), BODY),
        "a timestamp of zero": (cosignature_line(BODY, NAME, key, 0), BODY),
        "a timestamp of 2^63": (cosignature_line(BODY, NAME, key, 2**63), BODY),
        "a body without its final newline": (good, BODY.rstrip("\n")),
        "not a signature line": (good.replace(EM_DASH, "-"), BODY),
        "a line that is too short": (f"{EM_DASH} {NAME} {b64(b'1234' + bytes(40))}\n", BODY),
        "a note signature (no timestamp)": (
            f"{EM_DASH} {NAME} {b64(key_id(NAME, b'\x04', raw(key)) + key.sign(BODY.encode()))}\n",
            BODY,
        ),
    }, key


LINES, LINES_KEY = _line_variants()


@pytest.mark.parametrize("case", LINES.values(), ids=LINES.keys())
def test_a_corrupted_cosignature_does_not_verify(case: tuple[str, str]) -> None:
    line, body = case
    witness = parse_witness_vkey(witness_vkey(NAME, LINES_KEY))
    assert verify_cosignature_line(line, witness, body) is None


def test_the_largest_timestamp_the_spec_allows_verifies() -> None:
    key = new_key()
    witness = parse_witness_vkey(witness_vkey(NAME, key))
    line = cosignature_line(BODY, NAME, key, MAX_TIMESTAMP)
    assert MAX_TIMESTAMP == 2**63 - 1
    assert verify_cosignature_line(line, witness, BODY) == MAX_TIMESTAMP


def test_the_message_refuses_a_timestamp_out_of_range() -> None:
    for timestamp in (0, -1, 2**63):
        with pytest.raises(ValueError):
            cosigned_message(BODY, timestamp)
    assert cosigned_message(BODY, 5).startswith(b"cosignature/v1\ntime 5\n")


def test_a_parsed_line_is_verified_only_under_its_own_name_and_key_id() -> None:
    key = new_key()
    witness = parse_witness_vkey(witness_vkey(NAME, key))
    blob = base64.b64decode(cosignature_line(BODY, NAME, key, 42).split(" ")[-1])
    assert cosignature_timestamp(witness, BODY, NAME, blob[:4], blob[4:]) == 42
    assert cosignature_timestamp(witness, BODY, "w1", blob[:4], blob[4:]) is None
    assert cosignature_timestamp(witness, BODY, NAME, b"\x00" * 4, blob[4:]) is None


# --- vectors/cosignature.json (the lead's known answers, made with the site's own code) ------

VECTOR = json.loads((VECTORS / "cosignature.json").read_text("utf-8"))


def test_it_matches_the_specification_part_of_the_vector_file_byte_for_byte() -> None:
    spec = VECTOR["specification"]
    assert cosigned_message(spec["checkpoint_body"], spec["timestamp"]) == (
        spec["message"].encode("utf-8")
    )
    note = parse_note(spec["note"])
    assert note.text == spec["checkpoint_body"]
    [(name, kid, signature)] = [s for s in note.signatures if s[0] == spec["name"]]
    assert kid.hex() == spec["key_id"]
    assert read_timestamp(signature) == spec["timestamp"]
    assert spec["line"] + "\n" in spec["note"]


def test_it_matches_the_signed_part_of_the_vector_file_byte_for_byte() -> None:
    signed = VECTOR["signed"]
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(signed["private_key_seed"]))
    assert raw(key).hex() == signed["public_key"]
    assert cosignature_key_id(signed["name"], raw(key)).hex() == signed["key_id"]
    witness = parse_witness_vkey(signed["vkey"])
    assert (witness.name, witness.key_id.hex(), witness.raw.hex()) == (
        signed["name"],
        signed["key_id"],
        signed["public_key"],
    )
    assert witness_vkey(signed["name"], key) == signed["vkey"]
    body, timestamp = signed["checkpoint_body"], signed["timestamp"]
    assert cosigned_message(body, timestamp) == signed["message"].encode("utf-8")
    assert verify_cosignature_line(signed["line"], witness, body) == timestamp
    # Ed25519 is deterministic: signing the same message gives the same line.
    assert cosignature_line(body, signed["name"], key, timestamp) == signed["line"] + "\n"
    # ...and the line, corrupted, does not verify.
    for at in (0, 4, 11, 12, 75):
        assert verify_cosignature_line(flip_in_line(signed["line"], at), witness, body) is None
    assert verify_cosignature_line(signed["line"], witness, body.replace("\n5\n", "\n6\n")) is None

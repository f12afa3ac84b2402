"""Witness cosignatures (c2sp.org/tlog-cosignature): the format, byte for byte against the
C2SP text's own example and against vectors/cosignature.json, and corrupted variants."""

from __future__ import annotations

import base64
import json
import struct
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from receiptsite.integrity import cosignature, note
from receiptsite.integrity.keys import public_raw

pytestmark = pytest.mark.unit

VECTORS = Path(__file__).resolve().parents[3] / "vectors"
FILE = json.loads((VECTORS / "cosignature.json").read_text(encoding="utf-8"))
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
NAME = "witness.test.example/w1"
BODY = "log.example/receipts\n3\n" + base64.b64encode(bytes(32)).decode() + "\n"
WITNESS = cosignature.witness_key(cosignature.witness_vkey(NAME, public_raw(KEY)))


def test_the_message_is_the_specifications_example_byte_for_byte() -> None:
    spec = FILE["specification"]
    made = cosignature.message(spec["checkpoint_body"], spec["timestamp"])
    assert made == spec["message"].encode("utf-8")
    assert made.startswith(b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n")


def test_the_specifications_example_line_reads_as_its_key_id_and_timestamp() -> None:
    spec = FILE["specification"]
    read = cosignature.parse_line(spec["line"])
    assert read is not None
    assert (read.name, read.key_id.hex(), read.timestamp) == (
        spec["name"],
        spec["key_id"],
        spec["timestamp"],
    )
    assert len(read.signature) == 64


def test_the_lines_of_the_specifications_note_are_its_two_signatures() -> None:
    lines = cosignature.signature_lines(FILE["specification"]["note"])
    assert [line.split(" ")[1] for line in lines] == [
        "example.com/behind-the-sofa",
        "witness.example.com/w1",
    ]
    # The log's own signature is 68 bytes, no cosignature: it is not read as one.
    assert cosignature.parse_line(lines[0]) is None


def test_the_signed_vector_is_reproduced_exactly() -> None:
    signed = FILE["signed"]
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(signed["private_key_seed"]))
    assert public_raw(key).hex() == signed["public_key"]
    assert cosignature.witness_vkey(signed["name"], public_raw(key)) == signed["vkey"]
    assert (
        note.key_id(signed["name"], public_raw(key), cosignature.COSIGNATURE_TYPE).hex()
        == signed["key_id"]
    )
    assert cosignature.message(signed["checkpoint_body"], signed["timestamp"]) == signed[
        "message"
    ].encode("utf-8")
    line = cosignature.cosign(signed["checkpoint_body"], signed["name"], key, signed["timestamp"])
    assert line == signed["line"]
    read = cosignature.parse_line(line)
    assert read is not None
    assert cosignature.verify(
        read, cosignature.witness_key(signed["vkey"]), signed["checkpoint_body"]
    )


def test_the_vector_file_is_what_its_generator_writes() -> None:
    sys.path.insert(0, str(VECTORS))
    try:
        import generate_cosignature
    finally:
        sys.path.remove(str(VECTORS))
    assert generate_cosignature.render() == (VECTORS / "cosignature.json").read_text("utf-8")


def test_the_key_id_is_that_of_type_0x04() -> None:
    raw = public_raw(KEY)
    assert WITNESS.key_id == note.key_id(NAME, raw, b"\x04")
    assert WITNESS.key_id != note.key_id(NAME, raw)  # a note key's id, type 0x01
    assert WITNESS.vkey.split("+", 2)[2] == base64.b64encode(b"\x04" + raw).decode()


def test_a_cosignature_verifies_and_carries_its_time() -> None:
    read = cosignature.parse_line(cosignature.cosign(BODY, NAME, KEY, 1_800_000_000))
    assert read is not None and read.timestamp == 1_800_000_000
    assert cosignature.verify(read, WITNESS, BODY)


@pytest.mark.parametrize(
    "change",
    ["other body", "other time", "flipped signature", "other name", "other key"],
)
def test_a_changed_cosignature_does_not_verify(change: str) -> None:
    line = cosignature.cosign(BODY, NAME, KEY, 1_800_000_000)
    read = cosignature.parse_line(line)
    assert read is not None
    body, witness = BODY, WITNESS
    if change == "other body":
        body = BODY.replace("\n3\n", "\n4\n")
    elif change == "other time":
        blob = bytearray(base64.b64decode(line.split(" ")[2]))
        blob[4:12] = struct.pack(">Q", 1_800_000_001)
        read = cosignature.parse_line(f"— {NAME} {base64.b64encode(bytes(blob)).decode()}")
    elif change == "flipped signature":
        blob = bytearray(base64.b64decode(line.split(" ")[2]))
        blob[-1] ^= 1
        read = cosignature.parse_line(f"— {NAME} {base64.b64encode(bytes(blob)).decode()}")
    elif change == "other name":
        read = cosignature.parse_line(line.replace(NAME, "witness.test.example/w2"))
    else:
        witness = cosignature.witness_key(cosignature.witness_vkey(NAME, public_raw(OTHER)))
    assert read is not None
    assert not cosignature.verify(read, witness, body)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "- witness AAAA",
        "— witness",
        "— witness not-base64!",
        "— witness " + base64.b64encode(bytes(75)).decode(),  # one byte short
        "— witness " + base64.b64encode(bytes(77)).decode(),  # one byte long
        "— wit ness " + base64.b64encode(bytes(76)).decode(),
        "— a+b " + base64.b64encode(bytes(76)).decode(),
    ],
)
def test_a_line_that_cannot_be_a_cosignature_is_not_read_as_one(line: str) -> None:
    assert cosignature.parse_line(line) is None


@pytest.mark.parametrize("timestamp", [0, -1, 2**63, True])
def test_a_timestamp_out_of_range_is_refused(timestamp: int) -> None:
    with pytest.raises(ValueError):
        cosignature.message(BODY, timestamp)


def test_a_cosignature_with_time_zero_never_verifies() -> None:
    signature = KEY.sign(b"cosignature/v1\ntime 0\n" + BODY.encode())
    blob = note.key_id(NAME, public_raw(KEY), b"\x04") + bytes(8) + signature
    read = cosignature.parse_line(f"— {NAME} {base64.b64encode(blob).decode()}")
    assert read is not None and read.timestamp == 0
    assert not cosignature.verify(read, WITNESS, BODY)


@pytest.mark.parametrize(
    "vkey",
    [
        note.verifier_key(NAME, public_raw(KEY)),  # a note key (0x01), not a cosigner's
        NAME + "+00000000+" + base64.b64encode(b"\x04" + public_raw(KEY)).decode(),
        NAME + "+" + WITNESS.key_id.hex() + "+" + base64.b64encode(b"\x06" + bytes(32)).decode(),
        "no-plus-signs",
    ],
)
def test_a_verifier_key_that_is_no_ed25519_cosigner_key_is_refused(vkey: str) -> None:
    with pytest.raises(ValueError):
        cosignature.witness_key(vkey)

"""The test vector (tests/examples.py), checked with this package alone."""

from __future__ import annotations

import pytest

from receiptsite.integrity.canonical import is_canonical, sha256_hex
from receiptsite.integrity.encoding import b64decode, b64url_decode
from receiptsite.integrity.keys import jwk_thumbprint, public_pem, verify_signature
from receiptsite.integrity.merkle import leaf_hash, verify_inclusion
from receiptsite.integrity.note import (
    checkpoint_body,
    key_id,
    parse_checkpoint,
    parse_verifier_key,
    verifier_key,
    verify_note,
)
from tests.examples import EXAMPLE_CANONICAL_B64, EXAMPLE_HASH

pytestmark = pytest.mark.unit

CANONICAL_B64 = EXAMPLE_CANONICAL_B64
OUTPUT_HASH = EXAMPLE_HASH
SIGNATURE = (
    "y2nPdo46jhf0M2x2Ef4R2B/uev8Vso8Lx2lw+fRxKz7gk+OsfaQZemEKa/34P7nnAbZpBKX54hZ77z0fb+UcDA=="
)
X = "lWF9BfGUebsmDsCzDuFQJIwqIQuSOAmkOV0G2yHELyM"
KID = "zTkoJZ-PxYISqNE_rYhLCU8YyKxtdZTnYkZ1V0EVST0"
PEM = (
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEAlWF9BfGUebsmDsCzDuFQJIwqIQuSOAmkOV0G2yHELyM=\n"
    "-----END PUBLIC KEY-----\n"
)
ORIGIN = "receipts.example.org/receipts"
VERIFIER_KEY = "receipts.example.org/receipts+bc33122d+AZVhfQXxlHm7Jg7Asw7hUCSMKiELkjgJpDldBtshxC8j"
ROOT_B64 = "W7JMRl5Tf9D5WlJQCTNawQ8XM2vMNsbvvoYFzhBEKFs="
CHECKPOINT = (
    "receipts.example.org/receipts\n1\nW7JMRl5Tf9D5WlJQCTNawQ8XM2vMNsbvvoYFzhBEKFs=\n\n"
    "\u2014 receipts.example.org/receipts "
    "vDMSLSiR9JylXCXofAqpqc6rrRUf+5Mb8D1qg4Tr7HEdFY/afvVu3KUFZPdSHQIwNM1YAcfvV63m/frne9vYn0jjIgM=\n"
)

DOCUMENT = b64decode(CANONICAL_B64)
PUBLIC = b64url_decode(X)


def test_the_canonical_bytes_hash_to_the_published_output_hash() -> None:
    assert len(DOCUMENT) == 1059
    assert sha256_hex(DOCUMENT) == OUTPUT_HASH


def test_the_canonical_bytes_are_in_rfc_8785_form() -> None:
    assert is_canonical(DOCUMENT)


def test_the_receipt_signature_verifies_under_the_published_key() -> None:
    assert verify_signature(PUBLIC, DOCUMENT, b64decode(SIGNATURE))


def test_the_kid_is_the_jwk_thumbprint_of_x() -> None:
    assert jwk_thumbprint(PUBLIC) == KID


def test_the_pem_is_the_published_one() -> None:
    assert public_pem(PUBLIC) == PEM


def test_the_verifier_key_and_its_key_id_are_the_published_ones() -> None:
    assert verifier_key(ORIGIN, PUBLIC) == VERIFIER_KEY
    assert key_id(ORIGIN, PUBLIC).hex() == "bc33122d"
    assert parse_verifier_key(VERIFIER_KEY) == (ORIGIN, bytes.fromhex("bc33122d"), PUBLIC)


def test_the_checkpoint_signature_carries_the_c2sp_key_id() -> None:
    signature_line = CHECKPOINT.rstrip("\n").rsplit("\n", 1)[1]
    assert b64decode(signature_line.rsplit(" ", 1)[1])[:4] == key_id(ORIGIN, PUBLIC)


def test_the_checkpoint_verifies_and_commits_to_the_receipt_as_leaf_zero() -> None:
    body = verify_note(CHECKPOINT, [VERIFIER_KEY])
    assert body == checkpoint_body(ORIGIN, 1, b64decode(ROOT_B64))
    origin, size, root = parse_checkpoint(body)
    assert (origin, size) == (ORIGIN, 1)
    assert root == leaf_hash(DOCUMENT)
    assert verify_inclusion(leaf_hash(DOCUMENT), 0, 1, [], root)

from __future__ import annotations

import subprocess

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from receiptsite.integrity.encoding import b64url_decode
from receiptsite.integrity.keys import (
    generate_private_key_pem,
    jwk,
    jwk_thumbprint,
    load_private_key_pem,
    public_pem,
    public_raw,
    sign,
    verify_signature,
)

pytestmark = pytest.mark.unit

# RFC 8037 Appendix A.1-A.3: a published Ed25519 JWK and its RFC 7638 thumbprint.
RFC8037_X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
RFC8037_THUMBPRINT = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_the_rfc_8037_thumbprint_vector_holds() -> None:
    assert jwk_thumbprint(b64url_decode(RFC8037_X)) == RFC8037_THUMBPRINT


def test_a_generated_key_signs_and_verifies() -> None:
    key = load_private_key_pem(generate_private_key_pem())
    raw = public_raw(key)
    signature = sign(key, b"receipt")
    assert len(raw) == 32 and len(signature) == 64
    assert verify_signature(raw, b"receipt", signature)
    assert jwk(raw) == {"kty": "OKP", "crv": "Ed25519", "x": jwk(raw)["x"]}
    assert b64url_decode(jwk(raw)["x"]) == raw
    assert public_pem(raw).startswith("-----BEGIN PUBLIC KEY-----\n")


def test_it_loads_a_key_written_by_openssl() -> None:
    try:
        pem = subprocess.run(
            ["openssl", "genpkey", "-algorithm", "ed25519"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no openssl with Ed25519 here")
    key = load_private_key_pem(pem)
    assert verify_signature(public_raw(key), b"x", sign(key, b"x"))


def test_it_refuses_a_key_that_is_not_ed25519() -> None:
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="Ed25519"):
        load_private_key_pem(pem)


@pytest.mark.parametrize("pem", [b"", b"not a key", b"-----BEGIN PRIVATE KEY-----\n-----END"])
def test_it_refuses_a_malformed_pem_with_a_value_error(pem: bytes) -> None:
    with pytest.raises(ValueError):
        load_private_key_pem(pem)


def test_it_refuses_an_encrypted_pem_with_a_value_error() -> None:
    key = load_private_key_pem(generate_private_key_pem())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(ValueError):
        load_private_key_pem(pem)


def test_it_rejects_a_flipped_bit_anywhere() -> None:
    key = load_private_key_pem(generate_private_key_pem())
    raw, data = public_raw(key), b"the canonical bytes"
    signature = sign(key, data)
    for i in range(len(signature) * 8):
        flipped = bytearray(signature)
        flipped[i // 8] ^= 1 << (i % 8)
        assert not verify_signature(raw, data, bytes(flipped))
    for i in range(len(data) * 8):
        changed = bytearray(data)
        changed[i // 8] ^= 1 << (i % 8)
        assert not verify_signature(raw, bytes(changed), signature)


def test_it_rejects_another_key_and_wrong_lengths_without_raising() -> None:
    key = load_private_key_pem(generate_private_key_pem())
    other = public_raw(load_private_key_pem(generate_private_key_pem()))
    raw, signature = public_raw(key), sign(key, b"x")
    assert not verify_signature(other, b"x", signature)
    assert not verify_signature(raw, b"x", signature[:-1])
    assert not verify_signature(raw, b"x", signature + b"\x00")
    assert not verify_signature(raw[:-1], b"x", signature)
    assert not verify_signature(b"", b"x", b"")
    assert not verify_signature(None, b"x", signature)  # type: ignore[arg-type]

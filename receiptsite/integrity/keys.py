"""Ed25519 signing keys (RFC 8032) and their public forms: raw, PEM, JWK and JWK thumbprint."""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from receiptsite.integrity.canonical import canonical_bytes
from receiptsite.integrity.encoding import b64url

PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64


def load_private_key_pem(pem: bytes) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        # TypeError means "encrypted, and no password given": to the operator it is the same
        # problem as a malformed file, so report both one way.
        raise ValueError(f"cannot read the signing key PEM: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(
            f"the signing key must be Ed25519 (openssl genpkey -algorithm ed25519), "
            f"not {type(key).__name__}"
        )
    return key


def generate_private_key_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem(raw: bytes) -> str:
    return (
        Ed25519PublicKey.from_public_bytes(raw)
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def jwk(raw: bytes) -> dict[str, str]:
    if len(raw) != PUBLIC_KEY_SIZE:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}


def jwk_thumbprint(raw: bytes) -> str:
    # RFC 7638 wants the required members in lexicographic order with no whitespace; for
    # these string-only members that is exactly the RFC 8785 form, so reuse it.
    return b64url(hashlib.sha256(canonical_bytes(jwk(raw))).digest())


def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    return key.sign(data)


def verify_signature(raw_public: bytes, data: bytes, signature: bytes) -> bool:
    # Verification answers a yes/no question for untrusted input, so nothing may escape.
    try:
        if len(signature) != SIGNATURE_SIZE or len(raw_public) != PUBLIC_KEY_SIZE:
            return False
        Ed25519PublicKey.from_public_bytes(bytes(raw_public)).verify(bytes(signature), bytes(data))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True

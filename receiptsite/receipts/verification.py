"""The verification JSON: every check recomputed from the stored bytes on every request.

Nothing here trusts a stored verdict. A row changed behind the site's back (bytes, hash,
signature or columns) comes out `invalid`, naming the check that failed.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, TypedDict

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from receiptsite.integrity import keys, merkle
from receiptsite.integrity.canonical import is_canonical, sha256_hex
from receiptsite.integrity.encoding import b64
from receiptsite.receipts import log
from receiptsite.receipts.evidence import COLUMNS, columns_of
from receiptsite.receipts.models import LogEntry, Receipt, SigningKey, format_timestamp


class CheckResult(TypedDict):
    name: str
    result: str  # pass | fail | pending
    detail: str


def _check(name: str, passed: bool, ok: str, failed: str) -> CheckResult:
    if passed:
        return {"name": name, "result": "pass", "detail": ok}
    return {"name": name, "result": "fail", "detail": failed}


def _record_matches(receipt: Receipt, data: bytes) -> tuple[bool, list[str]]:
    """Compare every stored column with the document; return the names that disagree.

    The columns are the declaration's (evidence.COLUMNS) plus the site's own: whatever a list
    filter or an admin search reads is vouched for here.
    """
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        expected: dict[str, Any] = {
            "id": doc.get("id"),
            "tenant": (doc.get("tenant") or {}).get("slug"),
            "recorded_at": doc.get("recorded_at"),
            **columns_of(doc),
            "output_hash": sha256_hex(data),
        }
    except (ValueError, AttributeError, TypeError):
        return False, ["the document cannot be read"]
    actual = {
        "id": receipt.uuid,
        "tenant": receipt.tenant.slug,
        "recorded_at": format_timestamp(receipt.recorded_at),
        **{column.name: getattr(receipt, column.name) for column in COLUMNS},
        "output_hash": receipt.output_hash,
    }
    wrong = [name for name in actual if actual[name] != expected[name]]
    return not wrong, wrong


def verification_json(receipt: Receipt, now: datetime | None = None) -> dict[str, Any]:
    """The verification JSON (docs/verification.md) of a receipt fetched with
    for_verification()."""
    data = receipt.raw_bytes()
    signature = bytes(receipt.signature)
    key: SigningKey = receipt.signing_key
    checks: list[CheckResult] = []

    checks.append(
        _check(
            "canonical_form",
            is_canonical(data),
            "The stored bytes are UTF-8 JSON in RFC 8785 form.",
            "The stored bytes are not UTF-8 JSON in RFC 8785 form: they were altered.",
        )
    )
    digest = sha256_hex(data)
    checks.append(
        _check(
            "hash",
            digest == receipt.output_hash,
            "SHA-256 of the stored bytes equals the stored output hash.",
            "SHA-256 of the stored bytes differs from the stored output hash.",
        )
    )
    matches, wrong = _record_matches(receipt, data)
    checks.append(
        _check(
            "record_matches",
            matches,
            "The stored columns agree with the document.",
            "The stored columns disagree with the document: " + ", ".join(wrong) + ".",
        )
    )
    if key.status == SigningKey.COMPROMISED:
        checks.append(
            _check("signature", False, "", "The signing key is marked compromised.")
        )
    else:
        checks.append(
            _check(
                "signature",
                keys.verify_signature(bytes(key.public_key), data, signature),
                "The Ed25519 signature verifies under a published key.",
                "The Ed25519 signature does not verify under the published key.",
            )
        )

    log_json, log_check = _log_part(receipt, data)
    checks.append(log_check)

    results = {check["result"] for check in checks}
    status = "invalid" if "fail" in results else "pending" if "pending" in results else "valid"
    return {
        "receipt_id": receipt.uuid,
        "receipt_url": receipt.url,
        "status": status,
        "algorithm": "sha-256",
        "canonicalization": "RFC 8785",
        "output_hash": receipt.output_hash,
        "canonical_bytes": b64(data),
        "byte_length": len(data),
        "checks": checks,
        "signature": {
            "algorithm": "Ed25519",
            "key_id": key.kid,
            "value": b64(signature),
            "keys_url": settings.SITE_URL + reverse("receipt-keys"),
        },
        "log": log_json,
        "verified_at": format_timestamp(now or timezone.now()),
    }


def _log_part(receipt: Receipt, data: bytes) -> tuple[dict[str, Any] | None, CheckResult]:
    try:
        index = receipt.log_entry.index
    except LogEntry.DoesNotExist:
        return None, {
            "name": "log_inclusion",
            "result": "fail",
            "detail": "The receipt has no place in the transparency log.",
        }
    try:
        signed = log.published()  # the latest stored checkpoint: nothing is signed on a read
    except log.LogNotSigned as error:
        return None, {"name": "log_inclusion", "result": "fail", "detail": error.detail}
    if index >= signed.size:
        # Only while the POST that stored it has not answered yet: it answers once the
        # checkpoint that includes the receipt is stored.
        return None, {
            "name": "log_inclusion",
            "result": "pending",
            "detail": f"The receipt is leaf {index} of the log; the latest signed checkpoint "
            f"covers {signed.size} leaves, and the one that includes it is being signed.",
        }
    proof = log.inclusion_proof(index, signed.size)
    leaf = merkle.leaf_hash(data)
    included = merkle.verify_inclusion(leaf, index, signed.size, proof, signed.root)
    check = _check(
        "log_inclusion",
        included,
        f"The inclusion proof verifies against the signed checkpoint of size {signed.size}.",
        f"The inclusion proof does not verify against the signed checkpoint of size "
        f"{signed.size}: the stored bytes are not the ones logged.",
    )
    return {
        "origin": signed.origin,
        "index": index,
        "tree_size": signed.size,
        "root_hash": b64(signed.root),
        "inclusion_proof": [b64(p) for p in proof],
        "checkpoint": signed.note,
    }, check

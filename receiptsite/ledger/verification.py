"""The verification JSON: every check recomputed from the stored bytes on every request.

Nothing here trusts a stored verdict. A row changed behind the site's back (bytes, hash,
signature or columns) comes out `invalid`, naming the check that failed.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from receiptsite.evidence.declaration import COLUMNS, columns_of
from receiptsite.integrity import merkle
from receiptsite.integrity.canonical import is_canonical, sha256_hex
from receiptsite.integrity.encoding import b64
from receiptsite.ledger import log, signatures, witnesses
from receiptsite.ledger.assurance import assurance
from receiptsite.lib import memo
from receiptsite.receipts.models import Receipt, SigningKey, format_timestamp


class CheckResult(TypedDict):
    name: str
    result: str  # pass | fail | pending
    detail: str


def _check(name: str, passed: bool, ok: str, failed: str) -> CheckResult:
    if passed:
        return {"name": name, "result": "pass", "detail": ok}
    return {"name": name, "result": "fail", "detail": failed}


@dataclass(frozen=True)
class _Reading:
    """What the stored bytes alone say. A receipt is immutable, so this is worked out once per
    distinct bytes (content, not row: bytes changed behind the site's back are other bytes,
    and are read afresh). The hash, the signature and the log proof are never kept."""

    canonical: bool
    document: dict[str, Any] | None  # None: no JSON object (shared: read, never change it)
    expected: dict[str, Any] | None  # the columns as the document says them


@memo.of_bytes(maxsize=512)
def read_bytes(data: bytes) -> _Reading:
    """The reading of `data` (memoised per process, keyed by the bytes themselves: memo.py)."""
    canonical = is_canonical(data)
    try:
        doc = json.loads(data)
    except ValueError:  # not UTF-8, or not JSON
        return _Reading(canonical, None, None)
    if not isinstance(doc, dict):
        return _Reading(canonical, None, None)
    try:
        expected = {
            "id": doc.get("id"),
            "tenant": (doc.get("tenant") or {}).get("slug"),
            "recorded_at": doc.get("recorded_at"),
            **columns_of(doc),
        }
    except (AttributeError, TypeError):
        return _Reading(canonical, doc, None)
    return _Reading(canonical, doc, expected)


def _record_matches(receipt: Receipt, reading: _Reading, digest: str) -> tuple[bool, list[str]]:
    """Compare every stored column with the document; return the names that disagree.

    The columns are the declaration's (evidence.COLUMNS) plus the site's own: whatever a list
    filter or an admin search reads is vouched for here. `digest` is the SHA-256 of the bytes,
    recomputed for this request.
    """
    if reading.expected is None:
        return False, ["the document cannot be read"]
    expected = {**reading.expected, "output_hash": digest}
    actual = {
        "id": receipt.uuid,
        "tenant": receipt.tenant.slug,
        "recorded_at": format_timestamp(receipt.recorded_at),
        **{column.name: getattr(receipt, column.name) for column in COLUMNS},
        "output_hash": receipt.output_hash,
    }
    wrong = [name for name in actual if actual[name] != expected[name]]
    return not wrong, wrong


def _checks_of_the_bytes(
    receipt: Receipt, data: bytes, reading: _Reading
) -> tuple[list[CheckResult], signatures.Shown]:
    """The checks of the stored bytes themselves, before the log's: canonical_form, hash,
    record_matches and signature (the newest signature that verifies under a key not
    compromised, signatures.py), and that signature."""
    checks: list[CheckResult] = []
    checks.append(
        _check(
            "canonical_form",
            reading.canonical,
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
    matches, wrong = _record_matches(receipt, reading, digest)
    checks.append(
        _check(
            "record_matches",
            matches,
            "The stored columns agree with the document.",
            "The stored columns disagree with the document: " + ", ".join(wrong) + ".",
        )
    )
    signed = signatures.shown(receipt, data)
    checks.append(_check("signature", signed.passed, signed.detail, signed.detail))
    return checks, signed


# The log's latest signed checkpoint, as verifiable() read it with the receipt (a SignedHead,
# or the LogNotSigned that log.published() would raise): the key in the receipt's __dict__.
_PUBLISHED = "published_with_it"


def verifiable(public_id: uuid.UUID) -> Receipt | None:
    """Receipt.objects.verifiable(public_id), with the log's latest signed checkpoint read in
    the same statement (log.published_with): the receipt and the tree its proof is checked
    against in one round trip, one snapshot. What verification_json() of the receipt then
    uses, instead of asking the log again."""
    sql, params = Receipt.objects.verifiable_statement(public_id)
    signed, row = log.published_with(sql, params)
    receipt = Receipt.objects.verifiable_from(row)
    if receipt is not None:
        receipt.__dict__[_PUBLISHED] = signed
    return receipt


def _published(receipt: Receipt) -> log.SignedHead:
    """The checkpoint read with the receipt (verifiable()), else log.published(): raises
    LogNotSigned as it does."""
    signed = receipt.__dict__.get(_PUBLISHED)
    if signed is None:
        return log.published()
    if isinstance(signed, log.LogNotSigned):
        raise signed
    return cast(log.SignedHead, signed)


def verification_json(receipt: Receipt, now: datetime | None = None) -> dict[str, Any]:
    """The verification JSON (docs/verification.md) of a receipt fetched with its tenant,
    signing key and log entry (Receipt.objects.verifiable() or for_verification())."""
    return verification_and_key(receipt, now)[0]


def verification_and_key(
    receipt: Receipt, now: datetime | None = None
) -> tuple[dict[str, Any], SigningKey]:
    """The verification JSON, and the key of the signature it shows (the receipt page names
    that key's `x` in its "check it yourself" commands), at no cost beyond the JSON's."""
    data = receipt.raw_bytes()
    reading = read_bytes(data)
    checks, signed = _checks_of_the_bytes(receipt, data, reading)

    evidence = signed.evidence
    log_json, log_check, evidence_proof = _log_part(
        receipt, data, None, evidence.tree_size if evidence is not None else None
    )
    checks.append(log_check)
    signature: dict[str, Any] = {
        "algorithm": "Ed25519",
        "key_id": signed.key.kid,
        "value": b64(signed.value),
        "keys_url": settings.SITE_URL + reverse("receipt-keys"),
    }
    if evidence is not None and evidence_proof is not None:
        # What anyone can check of the signature appended: the checkpoint it rests on, and
        # the leaf's place in it. What shows it predates the compromise: the witnesses'
        # cosignatures, dated (`signed_at_source` "witnesses"), else the site's own record of
        # when it signed ("site"); the check's detail says which in words.
        witnessed = signed.witnessed
        signature["evidence"] = {
            "checkpoint": witnessed.note if witnessed is not None else evidence.note,
            "tree_size": evidence.tree_size,
            "leaf_index": receipt.log_index,
            "inclusion_proof": [b64(p) for p in evidence_proof],
            "signed_at": format_timestamp(evidence.signed_at),
            "signed_at_source": "witnesses" if witnessed is not None else "site",
            **(
                {"cosigners": witnesses.cosigners_json(witnessed)}
                if witnessed is not None
                else {}
            ),
        }

    results = {check["result"] for check in checks}
    status = "invalid" if "fail" in results else "pending" if "pending" in results else "valid"
    answer = {
        "receipt_id": receipt.uuid,
        "receipt_url": receipt.url,
        "status": status,
        "algorithm": "sha-256",
        "canonicalization": "RFC 8785",
        "output_hash": receipt.output_hash,
        "canonical_bytes": b64(data),
        "byte_length": len(data),
        "checks": checks,
        "signature": signature,
        "log": log_json,
        "verified_at": format_timestamp(now or timezone.now()),
        # Who vouches for each claim (ledger/assurance.py): from the parts above, no query.
        "assurance": assurance(reading.document, checks, log_json),
    }
    return answer, signed.key


def log_part(
    receipt: Receipt, data: bytes, leaf: bytes | None = None
) -> tuple[dict[str, Any] | None, CheckResult]:
    """The `log` object and the `log_inclusion` check, for the leaf of `data`, or for the
    given leaf hash (a withdrawn receipt's, whose bytes are erased: withdrawal/withdrawals.py)."""
    log_json, check, _ = _log_part(receipt, data, leaf, None)
    return log_json, check


def _log_part(
    receipt: Receipt, data: bytes, leaf: bytes | None, evidence_size: int | None
) -> tuple[dict[str, Any] | None, CheckResult, list[bytes] | None]:
    """log_part, and the leaf's inclusion proof in the tree of `evidence_size` (a re-signed
    receipt's evidence checkpoint), its nodes read with the log proof's in one query."""
    index = receipt.log_index
    if index is None:
        check: CheckResult = {
            "name": "log_inclusion",
            "result": "fail",
            "detail": "The receipt has no place in the transparency log.",
        }
        return None, check, None
    try:
        signed = _published(receipt)  # the latest stored checkpoint: nothing signed on a read
    except log.LogNotSigned as error:
        check = {"name": "log_inclusion", "result": "fail", "detail": error.detail}
        return None, check, _evidence_proof(index, evidence_size)
    if index >= signed.size:
        # Only while the POST that stored it has not answered yet: it answers once the
        # checkpoint that includes the receipt is stored.
        check = {
            "name": "log_inclusion",
            "result": "pending",
            "detail": f"The receipt is leaf {index} of the log; the latest signed checkpoint "
            f"covers {signed.size} leaves, and the one that includes it is being signed.",
        }
        return None, check, _evidence_proof(index, evidence_size)
    # Every proof the answer holds, their nodes read in one query: against the latest
    # checkpoint, the witnessed one, and a re-signed receipt's evidence checkpoint.
    sizes = [signed.size]
    witnessed = witnesses.latest()  # no query without a policy
    if witnessed is not None and index < witnessed.size:
        sizes.append(witnessed.size)
    else:
        witnessed = None
    if evidence_size is not None and index < evidence_size:
        sizes.append(evidence_size)
    proofs = dict(zip(sizes, log.inclusion_proofs(index, sizes), strict=True))
    proof = proofs[signed.size]
    evidence_proof = proofs.get(evidence_size) if evidence_size is not None else None
    if leaf is None:
        leaf = merkle.leaf_hash(data)
    included = merkle.verify_inclusion(leaf, index, signed.size, proof, signed.root)
    check = _check(
        "log_inclusion",
        included,
        f"The inclusion proof verifies against the signed checkpoint of size {signed.size}.",
        f"The inclusion proof does not verify against the signed checkpoint of size "
        f"{signed.size}: the stored bytes are not the ones logged.",
    )
    log_json = {
        "origin": signed.origin,
        "index": index,
        "tree_size": signed.size,
        "root_hash": b64(signed.root),
        "inclusion_proof": [b64(p) for p in proof],
        "checkpoint": signed.note,
        # The largest checkpoint the policy's witnesses cosigned that includes the receipt,
        # with their cosignature lines (ledger/witnesses.py); null without one.
        "witnessed": None
        if witnessed is None
        else {
            "checkpoint": witnessed.note,
            "tree_size": witnessed.size,
            "inclusion_proof": [b64(p) for p in proofs[witnessed.size]],
            "cosigners": witnesses.cosigners_json(witnessed),
        },
    }
    return log_json, check, evidence_proof


def _evidence_proof(index: int, size: int | None) -> list[bytes] | None:
    """The leaf's inclusion proof in the tree of `size`, when there is one."""
    if size is None or not index < size:
        return None
    return log.inclusion_proof(index, size)


def linked_status(receipt: Receipt, leaf: bytes | None, tree_size: int | None) -> str:
    """The status of a receipt another receipt's page lists among its links: `valid`,
    `invalid` or `pending`, with the checks of the verification JSON recomputed from the
    stored bytes now, except that the log's part is read, not proved: the receipt's stored
    leaf hash (`leaf`, the log's node at level 0) must be the leaf hash of its bytes, in a
    tree of `tree_size` (the latest signed checkpoint, which the linking page's own proof
    checked). Fetched with its tenant, signing key and log entry in the page's one query for
    its links; a receipt whose key is compromised costs one more (its appended signatures).
    Its own page runs every check in full."""
    data = receipt.raw_bytes()
    checks, _ = _checks_of_the_bytes(receipt, data, read_bytes(data))
    local = all(check["result"] == "pass" for check in checks)
    index = receipt.log_index
    if not local or index is None or leaf is None or leaf != merkle.leaf_hash(data):
        return "invalid"
    if tree_size is None or index >= tree_size:
        return "pending"
    return "valid"

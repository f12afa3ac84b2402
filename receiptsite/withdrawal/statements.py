"""The withdrawals' record: every withdrawal a signed statement, chained to the one before.

- A withdrawal's statement is the RFC 8785 canonical form of statement_v1.statement()
  (frozen): who withdrew (the publisher or an auditor), when, the reason category, the
  receipt's public id, output hash and leaf hash (base64; null when the receipt had no place
  in the log), its position in the chain and the hash of the statement before it (GENESIS for
  the first). Its hash is `sha256(bytes)` in lowercase hex, its signature Ed25519 over the
  bytes by the site's active key (lib/chain.py, shared with the auditors' record).
- state() appends a withdrawal's statement in the transaction that stores the withdrawal,
  under the log's append lock (withdrawals.receipt_withdraw takes it, as ingest does: the key
  is read under it), and the table's unique position and unique predecessor make a fork
  impossible even without it.
- check() reads the whole chain and says which withdrawals are not as they were stated:
  changed (the statement's bytes, hash or signature do not verify, or the withdrawal or its
  receipt no longer says what the statement says), removed or reordered (a statement that
  does not follow the one it was signed after), unstated (a withdrawal no statement states:
  added behind the site's back), or signed by a key after it was compromised. It reads and
  never writes: `manage.py checkwithdrawals` uses it.

The statement is public evidence, served in the withdrawn receipt's 410 answers; the
withdrawal's free-text note is not in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from receiptsite.integrity.encoding import b64
from receiptsite.lib import chain
from receiptsite.receipts.models import LogNode, SigningKey, Withdrawal, WithdrawalStatement
from receiptsite.withdrawal.statement_v1 import CHAIN_FIELDS, WITHDRAWAL_FIELDS, statement


def state(withdrawal: Withdrawal, leaf_hash: bytes | None) -> WithdrawalStatement:
    """Sign a just-stored withdrawal's statement and append it to the chain. Call inside the
    transaction that stored it, under the log's lock. Raises keyring.CannotSign without a
    usable key (then nothing of the withdrawal is stored)."""
    last = (
        WithdrawalStatement.objects.order_by("-position")
        .only("position", "statement_hash")
        .first()
    )
    position, previous_hash = chain.next_place(
        None if last is None else last.position, None if last is None else last.statement_hash
    )
    row = _row(withdrawal)
    link = WithdrawalStatement(
        withdrawal=withdrawal,
        position=position,
        previous_hash=previous_hash,
        stated_at=timezone.now(),
        stated_by=WithdrawalStatement.SITE,
    )
    sealed = chain.seal(
        statement(row, _leaf(leaf_hash), {name: getattr(link, name) for name in CHAIN_FIELDS})
    )
    link.canonical_bytes, link.statement_hash = sealed.canonical_bytes, sealed.hash
    link.signature, link.signing_key = sealed.signature, sealed.signing_key
    link.save(force_insert=True)
    return link


def _row(withdrawal: Withdrawal) -> dict[str, Any]:
    values = {
        lookup: getattr(withdrawal, lookup)
        for _, lookup in WITHDRAWAL_FIELDS
        if "__" not in lookup
    }
    values["receipt__output_hash"] = withdrawal.receipt.output_hash
    return values


def _leaf(leaf_hash: bytes | None) -> str | None:
    return None if leaf_hash is None else b64(leaf_hash)


def served(link: WithdrawalStatement) -> dict[str, Any]:
    """The `statement` member of the 410 verification answer (the key's row fetched with it)."""
    return {
        "format": json.loads(bytes(link.canonical_bytes))["format"],
        "canonical_bytes": b64(bytes(link.canonical_bytes)),
        "hash": link.statement_hash,
        "signature": {
            "algorithm": "Ed25519",
            "key_id": link.signing_key.kid,
            "value": b64(bytes(link.signature)),
        },
        "position": link.position,
        "previous_hash": link.previous_hash,
    }


@dataclass(frozen=True)
class Finding:
    """What is wrong with one withdrawal's statement."""

    withdrawal_id: int
    position: int | None  # None: the withdrawal has no statement
    kind: str  # changed, reordered, unstated, compromised
    detail: str

    def __str__(self) -> str:
        where = f" (position {self.position})" if self.position is not None else ""
        return f"withdrawal {self.withdrawal_id}{where} {self.detail}"


@dataclass
class Record:
    """The result of check(): sound when there is no finding, findings in chain order."""

    count: int = 0
    head_position: int | None = None
    head_hash: str | None = None
    by_migration: int = 0
    findings: list[Finding] = field(default_factory=list)
    hashes: set[str] = field(default_factory=set)

    @property
    def sound(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        if not self.sound:
            return f"The withdrawals' statements do not check out: {self.findings[0]}."
        if self.head_hash is None:
            return "The withdrawals' statements check out: there is no withdrawal yet."
        return (
            f"The withdrawals' statements check out: {self.count} withdrawals, each stated, "
            f"signed and chained to the one before; the head is statement hash "
            f"{self.head_hash} at position {self.head_position}."
        )


def check() -> Record:
    """Verify the whole chain. Reads only: four queries (statements, withdrawals, leaves,
    keys)."""
    record = Record()
    links = list(WithdrawalStatement.objects.order_by("position"))
    lookups = ["id", "receipt__log_entry__index", *(lookup for _, lookup in WITHDRAWAL_FIELDS)]
    rows = {row["id"]: row for row in Withdrawal.objects.values(*lookups)}
    indexes = [r["receipt__log_entry__index"] for r in rows.values()]
    leaves = {
        node.key: bytes(node.hash)
        for node in LogNode.objects.filter(key__in=[i for i in indexes if i is not None])
    }
    signing_keys = {key.pk: key for key in SigningKey.objects.all()}
    record.count = len(links)
    record.hashes = {link.statement_hash for link in links}
    previous_hash = chain.GENESIS
    for expected, link in enumerate(links):
        row = rows.get(link.withdrawal_id)
        problem = _check_link(link, row, leaves, signing_keys, expected, previous_hash)
        if problem is not None:
            kind, detail = problem
            record.findings.append(Finding(link.withdrawal_id, link.position, kind, detail))
        previous_hash = link.statement_hash
        record.by_migration += link.stated_by == WithdrawalStatement.MIGRATION
    if links:
        record.head_position, record.head_hash = links[-1].position, links[-1].statement_hash
    stated = {link.withdrawal_id for link in links}
    for withdrawal_id in sorted(set(rows) - stated):
        record.findings.append(
            Finding(
                withdrawal_id,
                None,
                "unstated",
                "has no statement: it was added behind the site's back",
            )
        )
    return record


def _check_link(
    link: WithdrawalStatement,
    row: dict[str, Any] | None,
    leaves: dict[int, bytes],
    signing_keys: dict[int, SigningKey],
    expected: int,
    previous_hash: str,
) -> tuple[str, str] | None:
    data = bytes(link.canonical_bytes)
    key = signing_keys.get(link.signing_key_id)
    if row is None:
        return "changed", "was removed: its statement remains, the withdrawal is gone"
    if not chain.holds(data, link.statement_hash, bytes(link.signature), key):
        return "changed", "was changed: its statement's hash or signature does not verify"
    assert key is not None
    signed = json.loads(data)
    index = row["receipt__log_entry__index"]
    now = statement(
        row,
        _leaf(leaves.get(index) if index is not None else None),
        {name: getattr(link, name) for name in CHAIN_FIELDS},
    )
    if signed != now:
        changed = [
            f"{k} was {json.dumps(signed.get(k))}, is {json.dumps(now.get(k))}"
            for k in sorted(set(signed) | set(now))
            if signed.get(k) != now.get(k)
        ]
        return "changed", "was changed: " + "; ".join(changed)
    if key.disowns(link.stated_at):
        return "compromised", f"was signed by the key {key.kid} after it was compromised"
    if link.previous_hash != previous_hash or link.position != expected:
        return (
            "reordered",
            f"does not follow the statement before it: it is at position {link.position} "
            f"after hash {link.previous_hash}, the chain has position {expected} after hash "
            f"{previous_hash} (a statement was removed or moved)",
        )
    return None

"""The auditors' record: every review decision signed and chained to the one before it.

Decisions are internal, so their record is kept apart from the public receipt log: a hash
chain (models.DecisionLink), one link per decision, in the order decisions were recorded.

- A decision's signed document is the RFC 8785 canonical form of `document()`
  (review/decision_v1.py, frozen): the decision's fields, and the id and hash of the decision
  before it (`GENESIS` for the first). Its hash is `sha256(bytes)` in lowercase hex, its
  signature Ed25519 over the bytes by the site's active key. The link stores the bytes, the
  hash, the signature and the key.
- `chain()` appends a decision in the transaction that stores it, under a lock (PostgreSQL:
  an advisory lock; SQLite: the write lock BEGIN IMMEDIATE holds), and the link's unique
  position and unique predecessor make a fork impossible even without it.
- `check()` reads the whole record and says which decisions are not as they were signed:
  changed (the row differs from its signed document, or the link itself was rewritten),
  removed (a link whose decision, or whose predecessor, is gone), reordered (a link that
  follows another decision than the one it was signed after), unchained (a decision no link
  signs: added behind the site's back), or signed by a key compromised before it could be
  shown to exist. It reads and never writes. `manage.py checkdecisions`, the admin and the CSV
  export all use it.

Decisions recorded before the chain existed were chained by migration 0011, at migrate time,
`chained_by = "migration"`: the record vouches for them as they stood then (README, "For
auditors: the record of decisions").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils import timezone

from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes, sha256_hex
from receiptsite.ledger import keyring
from receiptsite.receipts.models import (
    DecisionLink,
    ReviewDecision,
    SigningKey,
)
from receiptsite.review.decision_v1 import (
    CHAIN_FIELDS,
    DECISION_FIELDS,
    GENESIS,
    document,
    json_value,
)

# Any fixed number: the PostgreSQL advisory lock that serialises appends to the record.
CHAIN_LOCK = 0x6465636973696F6E


def lock() -> None:
    """Serialise appends to the record. Inside the storing transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK])


def chain(decision: ReviewDecision) -> DecisionLink:
    """Sign a just-stored decision and append it to the record. Call inside the transaction
    that stored it, after lock(). Raises keyring.CannotSign without a usable key."""
    last = (
        DecisionLink.objects.order_by("-position")
        .only("position", "decision_id", "decision_hash")
        .first()
    )
    values = {
        lookup: decision.receipt.public_id
        if lookup == "receipt__public_id"
        else getattr(decision, lookup)
        for _, lookup in DECISION_FIELDS
    }
    link = DecisionLink(
        position=0 if last is None else last.position + 1,
        decision=decision,
        previous_decision_id=None if last is None else last.decision_id,
        previous_hash=GENESIS if last is None else last.decision_hash,
        chained_at=timezone.now(),
        chained_by=DecisionLink.SITE,
    )
    data = canonical_bytes(document(values, {name: getattr(link, name) for name in CHAIN_FIELDS}))
    link.signature, link.signing_key = keyring.sign(data)
    link.canonical_bytes, link.decision_hash = data, sha256_hex(data)
    link.save(force_insert=True)
    return link


@dataclass(frozen=True)
class Finding:
    """What is wrong with one decision of the record."""

    decision_id: int
    position: int | None  # None: the decision has no place in the chain
    kind: str  # changed, removed, reordered, unchained, compromised
    detail: str

    def __str__(self) -> str:
        where = f" (position {self.position})" if self.position is not None else ""
        return f"decision {self.decision_id}{where} {self.detail}"


@dataclass
class Record:
    """The result of check(): sound when there is no finding, findings in record order."""

    count: int = 0
    head_position: int | None = None
    head_hash: str | None = None
    by_migration: int = 0
    findings: list[Finding] = field(default_factory=list)
    links: dict[int, DecisionLink] = field(default_factory=dict)  # decision id -> its link

    @property
    def sound(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def verdict(self, decision_id: int) -> str:
        """One decision's line in the CSV export: `sound`, or what is wrong with it."""
        for finding in self.findings:
            if finding.decision_id == decision_id:
                return f"{finding.kind}: {finding}"
        return "sound"

    def summary(self) -> str:
        if not self.sound:
            return f"The record of review decisions does not check out: {self.first}."
        if self.head_hash is None:
            return "The record of review decisions checks out: it holds no decision yet."
        return (
            f"The record of review decisions checks out: {self.count} decisions, each signed "
            f"and chained to the one before; the head is decision hash {self.head_hash} at "
            f"position {self.head_position}."
        )


def _changes(signed: dict[str, Any], now: dict[str, Any]) -> str:
    changed = [
        f"{key} was {json.dumps(signed.get(key), ensure_ascii=False)}, "
        f"is {json.dumps(now.get(key), ensure_ascii=False)}"
        for key in sorted(set(signed) | set(now))
        if signed.get(key) != now.get(key)
    ]
    return "; ".join(changed)


def check() -> Record:
    """Verify the whole record. Reads only: three queries (links, decisions, keys)."""
    record = Record()
    links = list(DecisionLink.objects.order_by("position"))
    lookups = [lookup for _, lookup in DECISION_FIELDS]
    decisions = {row["id"]: row for row in ReviewDecision.objects.values(*lookups)}
    signing_keys = {key.pk: key for key in SigningKey.objects.all()}
    for link in links:
        if link.signing_key_id in signing_keys:
            link.signing_key = signing_keys[link.signing_key_id]  # no query per link
    record.links = {link.decision_id: link for link in links}
    record.count = len(links)
    signed_hashes = {link.decision_hash: link for link in links}

    previous_id: int | None = None
    previous_hash = GENESIS
    expected = 0
    unvouched: list[DecisionLink] = []  # signed by a compromised key, nothing later signs them
    for link in links:
        found = _check_link(
            link,
            decisions.get(link.decision_id),
            signing_keys,
            expected,
            previous_id,
            previous_hash,
            signed_hashes,
        )
        record.findings += found
        key = signing_keys.get(link.signing_key_id)
        if key is not None and key.status == SigningKey.COMPROMISED:
            unvouched.append(link)
        elif not found:
            unvouched.clear()  # a sound link by a good key binds every link before it
        previous_id, previous_hash = link.decision_id, link.decision_hash
        expected = link.position + 1
        record.by_migration += link.chained_by == DecisionLink.MIGRATION
    if links:
        record.head_position, record.head_hash = links[-1].position, links[-1].decision_hash
    reported = {finding.decision_id for finding in record.findings}
    for link in unvouched:
        if link.decision_id not in reported:
            record.findings.append(
                Finding(
                    link.decision_id,
                    link.position,
                    "compromised",
                    f"was signed by the key {signing_keys[link.signing_key_id].kid}, since "
                    "compromised, and no later decision signed by another key vouches for it",
                )
            )
    for decision_id in sorted(set(decisions) - set(record.links)):
        record.findings.append(
            Finding(
                decision_id,
                None,
                "unchained",
                "is in no link of the record: it was added behind the site's back",
            )
        )
    record.findings.sort(key=lambda f: (f.position is None, f.position or 0, f.decision_id))
    return record


def _check_link(
    link: DecisionLink,
    row: dict[str, Any] | None,
    signing_keys: dict[int, SigningKey],
    expected: int,
    previous_id: int | None,
    previous_hash: str,
    signed_hashes: dict[str, DecisionLink],
) -> list[Finding]:
    def finding(kind: str, detail: str) -> list[Finding]:
        return [Finding(link.decision_id, link.position, kind, detail)]

    if row is None:
        return finding("removed", "was removed: its signed link remains, the decision is gone")
    data = bytes(link.canonical_bytes)
    key = signing_keys.get(link.signing_key_id)
    if (
        sha256_hex(data) != link.decision_hash
        or key is None
        or not keys.verify_signature(bytes(key.public_key), data, bytes(link.signature))
    ):
        return finding("changed", "was changed: its link's hash or signature does not verify")
    signed = json.loads(data)
    chain_now = {name: json_value(getattr(link, name)) for name in CHAIN_FIELDS}
    now = document(row, chain_now)
    if signed != now:
        return finding("changed", f"was changed: {_changes(signed, now)}")
    if key.status == SigningKey.COMPROMISED and (
        key.compromised_at is None or link.chained_at >= key.compromised_at
    ):
        return finding("compromised", f"was signed by the key {key.kid} after it was compromised")
    if signed["previous_hash"] != previous_hash or signed["previous_decision_id"] != previous_id:
        before = signed_hashes.get(signed["previous_hash"])
        if before is not None:
            return finding(
                "reordered",
                f"was reordered: it was signed after decision "
                f"{before.decision_id}, and now follows "
                f"{_name(previous_id)}",
            )
        return finding(
            "removed",
            f"follows a removed decision: it was signed after decision "
            f"{signed['previous_decision_id']}, which is gone from the "
            "record",
        )
    if link.position != expected:
        return finding("reordered", f"was moved: its place in the chain is {expected}")
    return []


def _name(decision_id: int | None) -> str:
    return "nothing (the start of the record)" if decision_id is None else f"decision {decision_id}"


def links_for(decision_ids: Iterable[int]) -> dict[int, DecisionLink]:
    """The links of these decisions, with their keys (for the admin's change form)."""
    rows = DecisionLink.objects.select_related("signing_key").filter(decision_id__in=decision_ids)
    return {link.decision_id: link for link in rows}

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
  position and unique predecessor make a fork impossible even without it. The key it signs
  with is read under that lock (`signing_key()`), as the log's write path reads its key under
  the append lock (ledger/log.py): a decision is never signed by a key the database already
  marks compromised.
- `vouch()` is `compromisekey`'s part, under the same lock and in its transaction: the key
  that takes over signs again the bytes of every decision whose standing rested on the
  compromised key and that still checks out (models.DecisionVouch, append-only). Decisions
  that do not check out get no vouch and stay reported.
- `check()` reads the whole record and says which decisions are not as they were signed:
  changed (the row differs from its signed document, or the link itself was rewritten),
  removed (a link whose decision, or whose predecessor, is gone), reordered (a link that
  follows another decision than the one it was signed after), unchained (a decision no link
  signs: added behind the site's back), or signed by a key compromised before it could be
  shown to exist and vouched for by no key that took over. A decision signed by a compromised
  key counts when a vouch verifies for it by a key that did not disown it (SigningKey.disowns
  at the vouch's time, which the database stamps), and the record says so. It reads and never
  writes. `manage.py checkdecisions`, the admin and the CSV export all use it.

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
    DecisionVouch,
    ReviewDecision,
    SigningKey,
    format_timestamp,
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


def signing_key() -> keyring.ActiveKey:
    """The key to sign a decision with, its status read from the database now: call after
    lock(), so that a key `compromisekey` marked meanwhile is never used (its run takes the
    lock too), nor one retired by a rotation on another host (keyring.signing_now)."""
    return keyring.signing_now()


def chain(decision: ReviewDecision, key: keyring.ActiveKey | None = None) -> DecisionLink:
    """Sign a just-stored decision and append it to the record. Call inside the transaction
    that stored it, after lock(); `key`: signing_key(), read under that lock (by default read
    here). Raises keyring.CannotSign without a usable key."""
    key = key or signing_key()
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
    link.signature, link.signing_key = keys.sign(key.private, data), key.row
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
    # decision id -> the vouch that lets a decision signed by a compromised key count
    vouched: dict[int, DecisionVouch] = field(default_factory=dict)

    @property
    def sound(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def verdict(self, decision_id: int) -> str:
        """One decision's line in the CSV export and the admin: `sound` (and, for one signed
        by a key since compromised, the vouch it rests on), or what is wrong with it."""
        for finding in self.findings:
            if finding.decision_id == decision_id:
                return f"{finding.kind}: {finding}"
        vouch = self.vouched.get(decision_id)
        if vouch is None:
            return "sound"
        return f"sound: {vouched_words(self.links[decision_id], vouch)}"

    def vouches(self) -> str:
        """The sentence that says how many decisions rest on a vouch, and by which keys; ""
        when none does."""
        if not self.vouched:
            return ""
        kids = sorted({vouch.signing_key.kid for vouch in self.vouched.values()})
        return (
            f"{len(self.vouched)} of them were signed by a key since compromised and count "
            f"because the key that took over vouches for them (it signed their bytes again "
            f"when `compromisekey` ran): {', '.join(kids)}."
        )

    def summary(self) -> str:
        if not self.sound:
            return f"The record of review decisions does not check out: {self.first}."
        if self.head_hash is None:
            return "The record of review decisions checks out: it holds no decision yet."
        said = (
            f"The record of review decisions checks out: {self.count} decisions, each signed "
            f"and chained to the one before; the head is decision hash {self.head_hash} at "
            f"position {self.head_position}."
        )
        return f"{said} {self.vouches()}" if self.vouched else said


def _changes(signed: dict[str, Any], now: dict[str, Any]) -> str:
    changed = [
        f"{key} was {json.dumps(signed.get(key), ensure_ascii=False)}, "
        f"is {json.dumps(now.get(key), ensure_ascii=False)}"
        for key in sorted(set(signed) | set(now))
        if signed.get(key) != now.get(key)
    ]
    return "; ".join(changed)


def vouched_words(link: DecisionLink, vouch: DecisionVouch) -> str:
    return (
        f"signed by the key {link.signing_key.kid}, since compromised, and vouched for by the "
        f"key {vouch.signing_key.kid}, which signed its bytes again at "
        f"{format_timestamp(vouch.signed_at)}"
    )


def _vouches(
    links: list[DecisionLink], signing_keys: dict[int, SigningKey]
) -> dict[int, DecisionVouch]:
    """Decision id -> the first vouch for its link that counts: by another key than the
    link's, its signature over the link's bytes verifies under its key, and its key did not
    disown it (SigningKey.disowns, at the database's stamp of the vouch). Only for links signed
    by a compromised key."""
    by_link = {link.pk: link for link in links}
    counted: dict[int, DecisionVouch] = {}
    for vouch in DecisionVouch.objects.order_by("id"):
        link = by_link.get(vouch.link_id)
        key = signing_keys.get(vouch.signing_key_id)
        if link is None or key is None or link.decision_id in counted:
            continue
        signer = signing_keys.get(link.signing_key_id)
        if (
            signer is None
            or signer.status != SigningKey.COMPROMISED
            or key.pk == signer.pk  # a key never vouches for itself
            or key.disowns(vouch.signed_at)
        ):
            continue
        if keys.verify_signature(
            bytes(key.public_key), bytes(link.canonical_bytes), bytes(vouch.signature)
        ):
            vouch.signing_key = key  # no query per vouch
            counted[link.decision_id] = vouch
    return counted


def check() -> Record:
    """Verify the whole record. Reads only: four queries (links, decisions, keys, vouches)."""
    record = Record()
    links = list(DecisionLink.objects.order_by("position"))
    lookups = [lookup for _, lookup in DECISION_FIELDS]
    decisions = {row["id"]: row for row in ReviewDecision.objects.values(*lookups)}
    signing_keys = {key.pk: key for key in SigningKey.objects.all()}
    for link in links:
        if link.signing_key_id in signing_keys:
            link.signing_key = signing_keys[link.signing_key_id]  # no query per link
    record.links = {link.decision_id: link for link in links}
    record.vouched = _vouches(links, signing_keys)
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
            link.decision_id in record.vouched,
        )
        record.findings += found
        key = signing_keys.get(link.signing_key_id)
        if key is not None and key.status == SigningKey.COMPROMISED:
            if link.decision_id not in record.vouched:
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
                    "compromised, and no later decision signed by another key vouches for it, "
                    "nor a vouch by the key that took over",
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
    vouched: bool,
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
    # Last: a "compromised" finding means everything else about the link holds (vouch()).
    if key.disowns(link.chained_at) and not vouched:
        return finding(
            "compromised",
            f"was signed by the key {key.kid} after it was compromised, and no key that took "
            "over vouches for it",
        )
    return []


def _name(decision_id: int | None) -> str:
    return "nothing (the start of the record)" if decision_id is None else f"decision {decision_id}"


def links_for(decision_ids: Iterable[int]) -> dict[int, DecisionLink]:
    """The links of these decisions, with their keys (for the admin's change form)."""
    rows = DecisionLink.objects.select_related("signing_key").filter(decision_id__in=decision_ids)
    return {link.decision_id: link for link in rows}


@dataclass(frozen=True)
class Vouched:
    """What vouch() did: how many decisions the new key vouched for, and the findings of
    those that rested on the compromised key but do not check out (left without a vouch)."""

    count: int
    left_out: list[Finding]


def vouch(old: SigningKey, key: keyring.ActiveKey) -> Vouched:
    """`compromisekey`'s part, in its transaction, after it marked `old` compromised and
    recorded `key` as the active key: take the record's lock, then have `key` sign again the
    canonical bytes of every decision whose standing rested on `old` (chained by it, or vouched
    for by it) and that still checks out, its link's hash, signature and place in the chain
    included (check(): no finding, or only the one that says its key was compromised). A
    decision that does not check out is never made to verify again: it keeps its finding."""
    lock()
    record = check()
    by_old = set(
        DecisionVouch.objects.filter(signing_key=old).values_list("link__decision_id", flat=True)
    )
    resting = [
        link
        for decision_id, link in record.links.items()
        if link.signing_key_id == old.pk or decision_id in by_old
    ]
    bad = {
        finding.decision_id: finding
        for finding in reversed(record.findings)
        if finding.kind != "compromised"
    }
    made = [
        DecisionVouch(
            link=link,
            signing_key=key.row,
            signature=keys.sign(key.private, bytes(link.canonical_bytes)),
        )
        for link in sorted(resting, key=lambda link: link.position)
        if link.decision_id not in bad
    ]
    DecisionVouch.objects.bulk_create(made)
    left_out = [bad[link.decision_id] for link in resting if link.decision_id in bad]
    return Vouched(len(made), sorted(left_out, key=lambda f: f.position or 0))

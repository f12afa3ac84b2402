"""What the record's check (review/chain.py) means for an auditor, in words they can act on.

The check's own findings are written for the site's operator, who runs `checkdecisions` on
the server; the admin's list of decisions says the same things to an auditor, who cannot run
a command there: what happened to each decision, whether it counts, what repairs it, and whom
to ask ("the site's operator": whoever runs the site's server and its database). A decision
whose key was compromised is not "changed": it is as it was signed, and what repairs it is the
vouch of the key that takes over, which the operator's key-compromise procedure makes."""

from __future__ import annotations

from dataclasses import dataclass

from receiptsite.receipts.models import format_timestamp
from receiptsite.review import chain

OPERATOR = "the site's operator (whoever runs its server and database)"
TAMPERED = {"changed", "removed", "reordered", "unchained"}


@dataclass(frozen=True)
class Said:
    """One decision's line: what happened, what to do about it, and the check's own words."""

    decision_id: int
    kind: str  # the finding's kind, "vouched" or "sound"
    happened: str
    to_do: str
    check: str = ""  # the record's check, as `checkdecisions` and the export say it


def _kid(record: chain.Record, decision_id: int) -> str:
    link = record.links.get(decision_id)
    return link.signing_key.kid if link is not None else "?"


HAPPENED = {
    "changed": "was changed in the database after it was signed: it no longer reads as it was "
    "signed, and it does not count.",
    "removed": "was removed from the database after it was signed, or follows one that was: it "
    "does not count.",
    "reordered": "was moved to another place in the record than the one it was signed in: it "
    "does not count.",
    "unchained": "was added to the database behind the site's back and was never signed: it "
    "does not count.",
}


def finding(record: chain.Record, found: chain.Finding) -> Said:
    """An auditor's words for one finding of the record."""
    d, kind = found.decision_id, found.kind
    if kind == "compromised":
        return Said(d, kind, (
            f"Decision {d} is as it was signed, but it was signed by the key "
            f"{_kid(record, d)}, which was compromised since, and no key vouches for it yet: "
            "until one does, it cannot be relied on."
        ), (
            "What repairs it: the key-compromise procedure, in which the key that takes over "
            "vouches for every decision that still checks out. Only the site's operator can "
            f"run it: ask {OPERATOR}."
        ), str(found))
    happened = f"Decision {d} {HAPPENED.get(kind, 'does not check out: it does not count.')}"
    link = record.links.get(d)
    if link is not None and link.signing_key.status == "compromised":
        happened += (
            f" When its key {link.signing_key.kid} was compromised, the key that took over "
            "left it out: it vouches only for decisions that still check out."
        )
    return Said(d, kind, happened, (
        "What you can do: if you know the right conclusion, record a new decision on its "
        "receipt (one that corrects it, where the form offers it): a new decision is signed "
        "and counts. Keep the export you have, and tell "
        f"{OPERATOR}: the database was changed behind the site's back."
    ), str(found))


def vouched(record: chain.Record, decision_id: int) -> Said | None:
    """The words for a decision that counts on a vouch, or None when it needs none."""
    vouch = record.vouched.get(decision_id)
    link = record.links.get(decision_id)
    if vouch is None or link is None:
        return None
    return Said(decision_id, "vouched", (
        f"Decision {decision_id} is vouched for: it was signed by the key "
        f"{link.signing_key.kid}, which was compromised since, and the key "
        f"{vouch.signing_key.kid} that took over signed its bytes again on "
        f"{format_timestamp(vouch.signed_at)}. That vouch is what keeps it counting."
    ), "Nothing to do: it counts.", record.verdict(decision_id))


def entry(record: chain.Record, decision_id: int) -> Said:
    """One decision's line in the list: sound, vouched for, or what is wrong with it."""
    for found in record.findings:
        if found.decision_id == decision_id:
            return finding(record, found)
    said = vouched(record, decision_id)
    if said is not None:
        return said
    return Said(decision_id, "sound", "Signed, chained, and as it was signed.", "")


def headline(record: chain.Record) -> str:
    """The sentence above the list of decisions."""
    if record.sound:
        if record.head_hash is None:
            return "The record of review decisions checks out: it holds no decision yet."
        said = (
            f"The record of review decisions checks out: {record.count} decisions, each signed "
            f"and chained to the one before; the newest is decision hash {record.head_hash}."
        )
        if record.vouched:
            kids = ", ".join(sorted({v.signing_key.kid for v in record.vouched.values()}))
            said += (
                f" {len(record.vouched)} of them were signed by a key since compromised, and "
                f"count because the key that took over vouches for them ({kids}): that vouch "
                "is what repairs them."
            )
        return said
    tampered = sum(f.kind in TAMPERED for f in record.findings)
    unvouched = sum(f.kind == "compromised" for f in record.findings)
    parts = []
    if tampered:
        parts.append(
            f"{tampered} decision(s) were changed, removed, moved or added behind the site's "
            "back, and do not count"
        )
    if unvouched:
        parts.append(
            f"{unvouched} decision(s) are as they were signed but rest on a compromised key "
            "that no key vouches for yet"
        )
    return "The record of review decisions does not check out. " + "; ".join(parts) + "."

"""The auditors' export of review decisions, as CSV and as JSON, for the audit file.

What is exported: every decision in the record when no filter is given; or those reviewed in
a date range (UTC dates, both inclusive, either end may be left open); or one reviewer's; or
both. Each row carries the decision, its receipt, and the decision's signed bytes as the record
holds them (review/chain.py): its place in the chain, the canonical bytes (as text, and in
base64), their SHA-256, the Ed25519 signature and the signing key's id, and for a decision
whose key was since compromised, the vouch of the key that took over; then the site's own
check of that row. With the published keys alone, every row can be checked (README, "For
auditors: the record of decisions").

The CSV's columns, in order: DECISION_COLUMNS, then RECORD_COLUMNS. The JSON holds the same
fields per decision, typed (numbers as numbers, blanks as null), in `decisions`, with what was
asked (`filter`) and the record's check (`record`)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from receiptsite.integrity.encoding import b64
from receiptsite.receipts.models import (
    DecisionLink,
    DecisionVouch,
    ReviewDecision,
    format_timestamp,
)
from receiptsite.review import chain

FORMAT = "review-decisions-export/v1"
DECISION_COLUMNS = ["decision_id", "reviewed_at", "reviewer", "conclusion", "exception_note",
                    "follow_up", "supersedes", "receipt_id", "tenant", "workflow_id", "subject",
                    "reviewed_output_hash", "current_output_hash"]
# The auditors' record (review/chain.py), after the decision's own: enough to check each row
# with nothing but the site's published keys (for a decision signed by a key since
# compromised, the vouch of the key that took over: its signature over the same bytes).
RECORD_COLUMNS = ["position", "previous_decision_id", "previous_hash", "decision_hash",
                  "signature", "signing_key", "chained_at", "chained_by", "signed_document",
                  "signed_document_base64", "vouch_signature", "vouch_signing_key",
                  "vouched_at", "record_check"]
COLUMNS = DECISION_COLUMNS + RECORD_COLUMNS
# Cells that are free text, or text a producer chose: kept from running in a spreadsheet.
_TEXT = {"exception_note", "follow_up", "workflow_id", "subject"}


class BadFilter(ValueError):
    pass


@dataclass(frozen=True)
class Filter:
    start: date | None = None
    end: date | None = None
    reviewer: User | None = None

    @property
    def whole(self) -> bool:
        return self.start is None and self.end is None and self.reviewer is None

    def name(self) -> str:
        """The file's name, saying what it holds."""
        parts = ["review-decisions"]
        if self.whole:
            parts.append("whole-record")
        if self.start is not None or self.end is not None:
            parts.append(f"{self.start or 'start'}-to-{self.end or 'now'}")
        if self.reviewer is not None:
            parts.append(f"by-{self.reviewer.get_username()}")
        return "-".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.start.isoformat() if self.start else None,
            "to": self.end.isoformat() if self.end else None,
            "reviewer": self.reviewer.get_username() if self.reviewer else None,
        }


def read_filter(params: Any) -> Filter:
    """The filter of a request's `from`, `to` (YYYY-MM-DD) and `reviewer` (a username);
    BadFilter says what is wrong."""
    try:
        start = date.fromisoformat(params["from"]) if params.get("from") else None
        end = date.fromisoformat(params["to"]) if params.get("to") else None
    except ValueError:
        raise BadFilter("from and to must be dates (YYYY-MM-DD), or left empty") from None
    if start is not None and end is not None and end < start:
        raise BadFilter("to is before from")
    reviewer = None
    if params.get("reviewer"):
        reviewer = User.objects.filter(username=params["reviewer"]).first()
        if reviewer is None:
            raise BadFilter(f"no user is called {params['reviewer']!r}")
    return Filter(start, end, reviewer)


def decisions(wanted: Filter) -> QuerySet[ReviewDecision]:
    found = ReviewDecision.objects.select_related("receipt", "receipt__tenant", "reviewer")
    if wanted.start is not None:
        found = found.filter(reviewed_at__date__gte=wanted.start)
    if wanted.end is not None:
        found = found.filter(reviewed_at__date__lte=wanted.end)
    if wanted.reviewer is not None:
        found = found.filter(reviewer=wanted.reviewer)
    return found.order_by("reviewed_at", "pk")


def _record_fields(link: DecisionLink | None, vouch: DecisionVouch | None) -> dict[str, Any]:
    if link is None:
        return dict.fromkeys(RECORD_COLUMNS[:-1])
    data = bytes(link.canonical_bytes)
    return {
        "position": link.position,
        "previous_decision_id": link.previous_decision_id,
        "previous_hash": link.previous_hash,
        "decision_hash": link.decision_hash,
        "signature": b64(bytes(link.signature)),
        "signing_key": link.signing_key.kid,
        "chained_at": format_timestamp(link.chained_at),
        "chained_by": link.chained_by,
        "signed_document": data.decode(),
        "signed_document_base64": b64(data),
        "vouch_signature": None if vouch is None else b64(bytes(vouch.signature)),
        "vouch_signing_key": None if vouch is None else vouch.signing_key.kid,
        "vouched_at": None if vouch is None else format_timestamp(vouch.signed_at),
    }


def rows(wanted: Filter, record: chain.Record) -> list[dict[str, Any]]:
    """The export's rows: COLUMNS, typed."""
    made = []
    for d in decisions(wanted):
        made.append({
            "decision_id": d.pk,
            "reviewed_at": format_timestamp(d.reviewed_at),
            "reviewer": d.reviewer.get_username(),
            "conclusion": d.conclusion,
            "exception_note": d.exception_note,
            "follow_up": d.follow_up,
            "supersedes": d.supersedes_id,
            "receipt_id": d.receipt.uuid,
            "tenant": d.receipt.tenant.slug,
            "workflow_id": d.receipt.workflow_id,
            "subject": d.receipt.subject_name,
            "reviewed_output_hash": d.output_hash,
            "current_output_hash": d.receipt.output_hash,
            **_record_fields(record.links.get(d.pk), record.vouched.get(d.pk)),
            "record_check": record.verdict(d.pk),
        })
    return made


def _cell(name: str, value: Any) -> str:
    """A CSV cell: blank for none; text that starts like a formula kept from running."""
    if value is None:
        return ""
    text = str(value)
    if name in _TEXT and text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text


def as_csv(made: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for row in made:
        writer.writerow([_cell(name, row[name]) for name in COLUMNS])
    return out.getvalue()


def as_json(made: list[dict[str, Any]], wanted: Filter, record: chain.Record) -> str:
    document = {
        "format": FORMAT,
        "exported_at": format_timestamp(timezone.now()),
        "filter": wanted.as_json(),
        "record": {
            "sound": record.sound,
            "summary": record.summary(),
            "decisions": record.count,
            "head_position": record.head_position,
            "head_hash": record.head_hash,
        },
        "columns": COLUMNS,
        "decisions": made,
    }
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"

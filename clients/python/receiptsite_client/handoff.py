"""The hand-off block: the few lines a person pastes into a ticket or an e-mail to hand the
work on. One template, used by the receiptsite's pages and by this client."""

from __future__ import annotations

from typing import Any


def handoff_block(doc: dict[str, Any], url: str, follow_up: str) -> str:
    """The hand-off block of one receipt: one text for the site's page, its handoff.txt and
    this client. `doc` is the evidence document (or, before publication, the producer's part
    of it); `url` the receipt's link (or what stands in for it while it has none)."""
    subject = doc.get("subject", {})
    attempt = doc.get("attempt", {"number": 1})
    lines = [
        ("Work item:", f"{subject.get('type', '')} {subject.get('name', '')}"),
        ("Workflow / attempt:", f"{doc.get('workflow_id', '')} / {attempt.get('number', 1)}"),
        ("Observed status:", doc.get("outcome") or "started"),
        ("Receipt:", url),
        ("Recorded at:", doc.get("recorded_at", "")),
        ("What it shows:", " ".join(doc.get("observed", [])) or "nothing stated by the producer"),
        ("What it does not show:", " ".join(doc.get("not_observed", []))),
        ("Follow-up:", follow_up),
    ]
    return "".join(f"{label:<20}{value}\n" if len(label) < 20 else f"{label} {value}\n"
                   for label, value in lines)

"""What a reviewer reads, in plain words, built from the evidence document alone."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from receiptsite.receipts.models import Receipt, ReviewDecision

SUBJECT_WORDS = {
    "tool": "the tool",
    "task": "the task",
    "chain": "the chain",
    "agent_run": "the agent run",
    "model": "the model",
    "external": "the external step",
}

OUTCOME_WORDS = {
    # (label, icon, tone): the icon and the words carry the meaning, never the colour alone.
    "succeeded": ("Succeeded", "✓", "good"),
    "failed": ("Failed", "✗", "bad"),
    "timed_out": ("Timed out", "⧖", "bad"),
    "uncertain": ("Uncertain", "?", "unsure"),
    None: ("Started (no result recorded)", "▶", "neutral"),
}

PHASE_SENTENCES = {
    "start": "{agent} recorded that {subject} {name} was started.",
    "end": "{agent} recorded that {subject} {name} finished: {outcome}.",
    "completion": "{agent} recorded that {subject} {name} was completed: {outcome}.",
    "confirmation": "{agent} recorded a confirmation for {subject} {name}: {outcome}.",
    "handoff": "{agent} recorded a hand-off of {subject} {name}: {outcome}.",
}


def latest_follow_up(receipt: Receipt) -> str | None:
    """The follow-up note of the latest decision that has one."""
    decisions = ReviewDecision.objects.filter(receipt=receipt).exclude(follow_up="")
    return decisions.order_by("-reviewed_at", "-id").values_list("follow_up", flat=True).first()


def handoff_text(doc: dict[str, Any], url: str, follow_up: str) -> str:
    """The hand-off block of SPEC.md: one text for the page, handoff.txt and the client."""
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


def page_context(
    receipt: Receipt, verification: dict[str, Any] | None, *, show_follow_up: bool = False
) -> dict[str, Any]:
    doc = receipt.document()
    subject = doc.get("subject", {})
    outcome = doc.get("outcome")
    label, icon, tone = OUTCOME_WORDS.get(outcome, OUTCOME_WORDS["uncertain"])
    framework = doc.get("framework", {})
    agent = (
        _("The agent runtime ({name})").format(name=framework["name"])
        if framework.get("name")
        else _("The agent runtime")
    )
    sentence = PHASE_SENTENCES.get(doc.get("phase", ""), PHASE_SENTENCES["end"]).format(
        agent=agent,
        subject=SUBJECT_WORDS.get(subject.get("type", ""), "the step"),
        name=f"“{subject.get('name', '')}”",
        outcome=label.lower(),
    )
    # Decisions are internal: the public page says only whether a follow-up exists.
    recorded = latest_follow_up(receipt)
    if recorded is None:
        follow_up = "none recorded"
    elif show_follow_up:
        follow_up = recorded
    else:
        follow_up = "recorded by the auditors (not shown publicly)"
    links = doc.get("links", {})
    status = verification["status"] if verification else None
    return {
        "receipt": receipt,
        "doc": doc,
        "sentence": sentence,
        "outcome_label": label,
        "outcome_icon": icon,
        "outcome_tone": tone,
        "subject": subject,
        "attempt": doc.get("attempt", {"number": 1}),
        "framework": framework,
        "links_parent": links.get("parent_receipt_id"),
        "links_children": links.get("child_receipt_ids", []),
        "redactions": doc.get("redactions", []),
        "metadata": sorted(doc.get("metadata", {}).items()),
        "verification": verification,
        "status": status,
        "failed_checks": [c for c in verification["checks"] if c["result"] == "fail"]
        if verification
        else [],
        "handoff": handoff_text(doc, receipt.url, follow_up),
        "site_url": settings.SITE_URL,
        "verify_command": (
            f"curl -s {receipt.verify_url} | jq -r .canonical_bytes | base64 -d | sha256sum"
        ),
    }

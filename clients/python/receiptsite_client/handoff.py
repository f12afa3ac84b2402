"""The hand-off block: the few lines a person pastes into a ticket or an e-mail to hand the
work on. One template, used by the receiptsite's pages (and their handoff.txt) and by this
client.

    Work item:          <subject.type> <subject.name>
    Workflow / attempt: <workflow_id> / <attempt.number>
    Observed status:    <outcome, or "started">
    Receipt:            <url>
    Recorded at:        <recorded_at>
    What it shows:      <observed, joined>
    What it does not show: <not_observed, joined>
    Follow-up:          <the latest review decision's follow-up, or "none recorded">

A receipt that does not verify gets a first line before these: `WARNING: this receipt does not
verify (<the failed checks>); do not rely on it.` The site hands its own words (`Words`, in the
reader's language) for the labels and the fixed phrases; what the producer wrote is never
translated."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LABEL_COLUMNS = 20  # the values start in this column (a label as long or longer: one space)


@dataclass(frozen=True)
class Words:
    """The block's own words: English by default, the site's translation otherwise."""

    work_item: str = "Work item:"
    workflow: str = "Workflow / attempt:"
    status: str = "Observed status:"
    receipt: str = "Receipt:"
    recorded_at: str = "Recorded at:"
    shows: str = "What it shows:"
    does_not_show: str = "What it does not show:"
    follow_up: str = "Follow-up:"
    started: str = "started"
    nothing_stated: str = "nothing stated by the producer"
    warning: str = "WARNING: this receipt does not verify ({checks}); do not rely on it."
    separator: str = ", "  # between the failed checks
    outcomes: Mapping[str, str] = field(default_factory=dict)  # an outcome absent: as stored


ENGLISH = Words()


def width(text: str) -> int:
    """How many columns `text` takes in a monospaced font: wide (CJK) characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _line(label: str, value: str) -> str:
    room = LABEL_COLUMNS - width(label)
    return f"{label}{' ' * room}{value}\n" if room > 0 else f"{label} {value}\n"


def handoff_block(
    doc: dict[str, Any],
    url: str,
    follow_up: str,
    *,
    failed: Sequence[str] = (),
    words: Words = ENGLISH,
) -> str:
    """The hand-off block of one receipt. `doc` is the evidence document (or, before
    publication, the producer's part of it); `url` the receipt's link (or what stands in for
    it while it has none); `failed` the checks that fail, in words, when it does not verify."""
    subject = doc.get("subject", {})
    attempt = doc.get("attempt", {"number": 1})
    outcome = doc.get("outcome")
    lines = [
        (words.work_item, f"{subject.get('type', '')} {subject.get('name', '')}"),
        (words.workflow, f"{doc.get('workflow_id', '')} / {attempt.get('number', 1)}"),
        (words.status, words.outcomes.get(outcome, outcome) if outcome else words.started),
        (words.receipt, url),
        (words.recorded_at, doc.get("recorded_at", "")),
        (words.shows, " ".join(doc.get("observed", [])) or words.nothing_stated),
        (words.does_not_show, " ".join(doc.get("not_observed", []))),
        (words.follow_up, follow_up),
    ]
    warning = words.warning.format(checks=words.separator.join(failed)) + "\n" if failed else ""
    return warning + "".join(_line(label, value) for label, value in lines)

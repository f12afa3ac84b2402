"""Recording a review decision: the one write path of the auditors' desk, from the page and
from the admin alike."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from receiptsite.ledger import keyring
from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review import chain


def decision_record(
    *,
    receipt: Receipt,
    reviewer: User,
    conclusion: str,
    exception_note: str = "",
    follow_up: str = "",
    supersedes: ReviewDecision | None = None,
) -> ReviewDecision:
    """Append a review decision, bound to the output hash the reviewer saw, and sign it into
    the auditors' record (review/chain.py) in the same transaction. Raises
    keyring.CannotSign (503) without a usable key, before anything is stored."""
    if supersedes is not None and supersedes.receipt_id != receipt.pk:
        raise ValueError("a decision can only supersede a decision on the same receipt")
    with transaction.atomic():
        chain.lock()  # two auditors saving at once take turns: the record cannot fork
        keyring.active_key()
        decision = ReviewDecision.objects.create(
            receipt=receipt,
            reviewer=reviewer,
            conclusion=conclusion,
            exception_note=exception_note,
            follow_up=follow_up,
            output_hash=receipt.output_hash,
            supersedes=supersedes,
        )
        chain.chain(decision)
    return decision

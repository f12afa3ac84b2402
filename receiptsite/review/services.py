"""Recording a review decision: the one write path of the auditors' desk, from the page and
from the admin alike. It ends the receipt's review in the queue (review/queue.py): another
auditor's hold on the receipt refuses it, and the decision releases the hold."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review import chain, queue


class AlreadyCorrected(ValueError):
    """The decision to correct was corrected meanwhile: two auditors corrected it at once, and
    the other one's correction was stored first (the form shows it as an error)."""

    def __init__(self, decision: ReviewDecision) -> None:
        super().__init__(
            f"decision {decision.pk} was corrected meanwhile by another decision; reload the "
            "page and correct the newest decision instead"
        )


class HeldByAnother(ValueError):
    """Another auditor holds the receipt for review (review/queue.py): the form shows who, and
    until when."""

    def __init__(self, hold: queue.Hold) -> None:
        self.hold = hold
        assert hold.by is not None and hold.until is not None
        super().__init__(
            f"{hold.by.get_username()} holds this receipt for review until "
            f"{queue.when(hold.until)}: ask them, or wait until then"
        )


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
    keyring.CannotSign (503) without a usable key, AlreadyCorrected when another decision
    corrects `supersedes` already, and HeldByAnother when another auditor holds the receipt
    for review, before anything is stored. The decision releases the receipt's hold."""
    if supersedes is not None and supersedes.receipt_id != receipt.pk:
        raise ValueError("a decision can only supersede a decision on the same receipt")
    with transaction.atomic():
        chain.lock()  # two auditors saving at once take turns: the record cannot fork
        # Both read under the lock: a key compromised meanwhile, a correction stored meanwhile.
        key = chain.signing_key()
        if supersedes is not None and ReviewDecision.objects.filter(supersedes=supersedes).exists():
            raise AlreadyCorrected(supersedes)
        # Locked until the decision commits: a claim meanwhile waits for it, then finds the
        # receipt released.
        hold = queue.hold_of(receipt, lock=True)
        if hold.by_other_than(reviewer):
            raise HeldByAnother(hold)
        decision = ReviewDecision.objects.create(
            receipt=receipt,
            reviewer=reviewer,
            conclusion=conclusion,
            exception_note=exception_note,
            follow_up=follow_up,
            output_hash=receipt.output_hash,
            supersedes=supersedes,
        )
        chain.chain(decision, key)
        queue.release_on_decision(receipt)
    return decision

"""A receipt's verification state as the auditors' lists and the decision form show it:
valid, invalid, pending or withdrawn. Recomputed from the stored bytes for every receipt
shown (ledger/verification.py, verification_json), never stored: a state kept in a column
would be one more thing to change behind the site's back.

What it costs: verifying a receipt fetched with its tenant, signing key, log entry and
withdrawal (STATE_RELATED, one query for a page of them) reads the latest signed checkpoint and
the receipt's inclusion proof (two queries per receipt), and a receipt whose key was
compromised its appended signatures (one more). A withdrawn receipt costs nothing: its content
is erased, and there is nothing left to verify."""

from __future__ import annotations

from dataclasses import dataclass

from receiptsite.ledger.verification import verification_json
from receiptsite.receipts.models import Receipt, Withdrawal
from receiptsite.withdrawal.withdrawals import is_erased

VALID, INVALID, PENDING, WITHDRAWN = "valid", "invalid", "pending", "withdrawn"
STATES = [
    (VALID, "valid: every check passed"),
    (INVALID, "invalid: does not verify"),
    (PENDING, "pending: being logged"),
    (WITHDRAWN, "withdrawn"),
]
# What a list fetches with each receipt, so that its state costs no query of its own.
STATE_RELATED = ["tenant", "signing_key", "log_entry", "withdrawal"]


@dataclass(frozen=True)
class State:
    name: str  # VALID, INVALID, PENDING or WITHDRAWN
    failed: tuple[str, ...] = ()  # the names of the checks that failed
    reason: str = ""  # why it does not verify, in the verification's own words

    @property
    def verifies(self) -> bool:
        return self.name == VALID

    @property
    def label(self) -> str:
        return dict(STATES)[self.name]


def _withdrawal(receipt: Receipt) -> Withdrawal | None:
    try:
        return receipt.withdrawal  # type: ignore[no-any-return]
    except Withdrawal.DoesNotExist:
        return None


def state_of(receipt: Receipt) -> State:
    """The state of a receipt fetched with STATE_RELATED (Receipt.objects.for_verification()
    with the withdrawal; without it, an erased receipt costs one query more)."""
    if is_erased(receipt) and _withdrawal(receipt) is not None:
        return State(WITHDRAWN, reason="it was withdrawn: its content is erased")
    result = verification_json(receipt)
    if result["status"] == VALID:
        return State(VALID)
    unpassed = [check for check in result["checks"] if check["result"] != "pass"]
    return State(
        result["status"],
        failed=tuple(check["name"] for check in unpassed if check["result"] == "fail"),
        reason=" ".join(check["detail"] for check in unpassed),
    )


def states_of(receipts: list[Receipt]) -> dict[int, State]:
    """Receipt pk -> its state, for a page of receipts."""
    return {receipt.pk: state_of(receipt) for receipt in receipts}

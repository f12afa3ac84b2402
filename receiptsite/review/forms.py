"""The form of a review decision, one set of rules wherever an auditor records one: on the
receipt page (`DecisionForm(data, receipt=receipt)`: the receipt is the page's, and the hash
the auditor was looking at is posted back hidden) and in the admin (the auditor names the
receipt and types or pastes the output hash they reviewed). Either way:

- the output hash reviewed must be the receipt's: a decision binds the SHA-256 of the bytes
  the auditor was shown;
- a receipt that does not verify (its verification status, ledger/verification.py, is not
  "valid") is refused with the reason, unless the decision says so: a conclusion other than
  accepted, with an exception note;
- "accepted with exception" needs an exception note;
- a correction supersedes a decision on the same receipt that no other decision corrects yet.

`record()` stores it through review/services.decision_record, which reads again under the
record's lock whether the corrected decision was corrected meanwhile (two auditors at once):
that is a form error too, never a 500."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db import connection
from django.utils.translation import gettext_lazy as _

from receiptsite.ledger.verification import verification_json
from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review import chain
from receiptsite.review.services import AlreadyCorrected, decision_record

ACCEPTED_WITH_EXCEPTION = "accepted_with_exception"
# The conclusions that may be recorded on a receipt that does not verify, with an exception
# note: every one but a plain "accepted".
MAY_NOT_VERIFY = {value for value, _ in ReviewDecision.CONCLUSIONS} - {ReviewDecision.ACCEPTED}
CORRECTED = _(
    "That decision was corrected meanwhile by another decision. Reload the page and correct "
    "the newest decision instead."
)


def corrected(decision: ReviewDecision) -> bool:
    """Whether another decision corrects `decision` already. Inside a transaction that goes on
    to store the decision (the admin validates and saves in one), under the record's lock,
    which then holds until it commits: the answer cannot go stale before the save."""
    if connection.in_atomic_block:
        chain.lock()
    return ReviewDecision.objects.filter(supersedes=decision).exists()


def not_verifying(receipt: Receipt) -> str:
    """Why the receipt does not verify now, in the verification's own words; "" when it does."""
    found = Receipt.objects.for_verification().filter(pk=receipt.pk).first() or receipt
    result = verification_json(found)
    if result["status"] == "valid":
        return ""
    details = [check["detail"] for check in result["checks"] if check["result"] != "pass"]
    return f"its verification status is {result['status']}: " + " ".join(details)


class DecisionForm(forms.ModelForm):
    class Meta:
        model = ReviewDecision
        fields = ["receipt", "conclusion", "exception_note", "follow_up", "supersedes",
                  "output_hash"]
        labels = {
            "conclusion": _("Conclusion"),
            "exception_note": _("Exception (if any)"),
            "follow_up": _("Follow-up (if any)"),
            "supersedes": _("Corrects an earlier decision"),
            "output_hash": _("Output hash you reviewed"),
        }
        help_texts = {
            "output_hash": _("The receipt's output hash (SHA-256) as its page showed it to "
                             "you: the decision is bound to it."),
        }
        widgets = {
            "exception_note": forms.Textarea(attrs={"rows": 2}),
            "follow_up": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, *args: Any, receipt: Receipt | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.receipt = receipt
        if receipt is None:
            return
        # On the receipt page: the receipt is given, and only its open decisions can be
        # corrected; the conclusion starts at the first choice, as a radio-like select.
        del self.fields["receipt"]
        self.instance.receipt = receipt
        conclusion = self.fields["conclusion"]
        assert isinstance(conclusion, forms.ChoiceField)
        conclusion.choices = ReviewDecision.CONCLUSIONS
        supersedes = self.fields["supersedes"]
        assert isinstance(supersedes, forms.ModelChoiceField)
        supersedes.queryset = ReviewDecision.objects.filter(
            receipt=receipt, superseded_by__isnull=True
        )
        supersedes.empty_label = _("No: this is a new decision")
        # The hash the auditor was looking at: a decision is bound to it.
        self.fields["output_hash"] = forms.CharField(
            widget=forms.HiddenInput, initial=receipt.output_hash
        )

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        receipt = self.receipt or data.get("receipt")
        supersedes = data.get("supersedes")
        conclusion = data.get("conclusion")
        note = (data.get("exception_note") or "").strip()
        if receipt is not None and supersedes is not None and supersedes.receipt_id != receipt.pk:
            self.add_error(
                "supersedes", _("A decision can only supersede a decision on the same receipt.")
            )
        elif supersedes is not None and corrected(supersedes):
            self.add_error("supersedes", CORRECTED)
        if conclusion == ACCEPTED_WITH_EXCEPTION and not note:
            self.add_error("exception_note", _(
                "“Accepted with exception” needs an exception note: say what the exception is."
            ))
        if receipt is None:
            return data
        if "output_hash" in data and data["output_hash"].strip().lower() != receipt.output_hash:
            self.add_error("output_hash", _(
                "The receipt's hash is not the one you reviewed. Reload the page and review "
                "it again."
            ))
        elif "output_hash" in data:
            data["output_hash"] = receipt.output_hash
        excepted = conclusion in MAY_NOT_VERIFY and note
        if conclusion is not None and not excepted and (why := not_verifying(receipt)):
            self.add_error(None, _(
                "This receipt does not verify (%(why)s). A decision on it is recorded only "
                "with a conclusion other than “accepted” and an exception note saying so."
            ) % {"why": why})
        return data

    def record(self, reviewer: User) -> ReviewDecision | None:
        """Store the valid form's decision (services.decision_record); None, with the error on
        the form, when another auditor corrected the same decision meanwhile."""
        data = self.cleaned_data
        try:
            return decision_record(
                receipt=self.receipt or data["receipt"],
                reviewer=reviewer,
                conclusion=data["conclusion"],
                exception_note=data["exception_note"],
                follow_up=data["follow_up"],
                supersedes=data["supersedes"],
            )
        except AlreadyCorrected:
            self.add_error("supersedes", CORRECTED)
            return None

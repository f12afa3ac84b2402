"""The form of a review decision, one set of rules wherever an auditor records one: on the
receipt page (`DecisionForm(data, receipt=receipt)`: the receipt is the page's, and the hash
the auditor was looking at is posted back hidden) and in the admin (the auditor names the
receipt by its id, short id or a link to it, review/lookup.py, and confirms the output hash
they reviewed). Either way:

- it starts with no conclusion chosen: the auditor picks one;
- the output hash reviewed must be the receipt's: a decision binds the SHA-256 of the bytes
  the auditor was shown;
- a receipt that does not verify (its state, review/states.py, is not "valid") is refused
  with the reason: "accepted" always, any other conclusion unless its exception note says so;
- "accepted with exception" needs an exception note;
- a correction supersedes a decision on the same receipt that no other decision corrects yet;
- a receipt another auditor holds for review (review/queue.py) is theirs until the hold ends.

`record()` stores it through review/services.decision_record, which reads again under the
record's lock whether the corrected decision was corrected meanwhile (two auditors at once),
and whether another auditor holds the receipt: either is a form error too, never a 500."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db import connection
from django.utils.translation import gettext_lazy as _

from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review import chain, lookup, queue, states
from receiptsite.review.services import AlreadyCorrected, HeldByAnother, decision_record

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
    found = (
        Receipt.objects.select_related(*states.STATE_RELATED).filter(pk=receipt.pk).first()
        or receipt
    )
    state = states.state_of(found)
    if state.verifies:
        return ""
    if state.name == states.WITHDRAWN:
        return state.reason
    return f"its verification status is {state.name}: {state.reason}"


def held_words(hold: queue.Hold) -> str:
    assert hold.by is not None and hold.until is not None
    return str(_(
        "%(auditor)s holds this receipt for review until %(until)s. Ask them, or wait until "
        "then: a decision on a receipt another auditor holds is refused."
    ) % {"auditor": hold.by.get_username(), "until": queue.when(hold.until)})


class ReceiptField(forms.CharField):
    """The receipt a decision is on, as an auditor names it (review/lookup.py): its id, its
    short id or a link to it; never the database's internal number."""

    default_error_messages = {
        "required": _("Paste the receipt's id or the link to its page."),
        "names_none": _(
            "“%(text)s” names no receipt. Paste the receipt's id (as its page shows it, "
            "e.g. 0b7c1a2d-…), its 8-character short id, or the link to its page "
            "(…/run/ and its id). The numbers in the admin's own addresses are not receipt ids."
        ),
        "no_such": _("No receipt has the id %(text)s. Check that you copied all of it."),
        "no_such_start": _("No receipt's id starts with %(text)s."),
        "several": _(
            "%(count)s receipts' ids start with %(text)s: paste the whole id or the link."
        ),
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("label", _("Receipt"))
        kwargs.setdefault("help_text", _(
            "The receipt's id, its 8-character short id, or the link to its page "
            "(…/run/ and its id), pasted as it is."
        ))
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 60, "autocomplete": "off"}))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, Receipt):
            return value.uuid
        return value

    def clean(self, value: Any) -> Receipt | None:  # type: ignore[override]
        text = super().clean(value)
        if isinstance(text, Receipt):
            return text
        if not text:
            return None
        found = lookup.named(text)
        if found is None:
            raise forms.ValidationError(
                self.error_messages["names_none"], code="names_none",
                params={"text": text[:100]},
            )
        matches = list(
            Receipt.objects.select_related(*states.STATE_RELATED).filter(found.q())[:2]
        )
        if len(matches) == 1:
            return matches[0]
        if found.id is not None:
            raise forms.ValidationError(
                self.error_messages["no_such"], code="no_such", params={"text": found.id}
            )
        if not matches:
            raise forms.ValidationError(
                self.error_messages["no_such_start"], code="no_such",
                params={"text": found.prefix},
            )
        raise forms.ValidationError(
            self.error_messages["several"], code="several",
            params={"text": found.prefix, "count": Receipt.objects.filter(found.q()).count()},
        )


def conclusion_choices() -> list[tuple[str, Any]]:
    """The conclusions, after an empty first choice: the form starts with none chosen."""
    return [("", _("Choose a conclusion…")), *ReviewDecision.CONCLUSIONS]


class DecisionForm(forms.ModelForm):
    # The auditor recording the decision, when the form knows it before record() (the admin
    # binds it): a receipt another auditor holds is then refused when the form is checked.
    reviewer: User | None = None

    receipt = ReceiptField()

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

    def __init__(
        self, *args: Any, receipt: Receipt | None = None, reviewer: User | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.given = receipt  # on the receipt page; in the admin the form names it
        if reviewer is not None:
            self.reviewer = reviewer
        conclusion = self.fields.get("conclusion")  # none on a decision's read-only page
        if isinstance(conclusion, forms.ChoiceField):
            conclusion.choices = conclusion_choices()
            conclusion.initial = None
        if receipt is None:
            return
        # On the receipt page: the receipt is given, and only its open decisions can be
        # corrected.
        del self.fields["receipt"]
        self.instance.receipt = receipt
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
        receipt = self.given or data.get("receipt")
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
        if conclusion and not excepted and (why := not_verifying(receipt)):
            if conclusion == ReviewDecision.ACCEPTED:
                self.add_error(None, _(
                    "This receipt does not verify (%(why)s), so “accepted” is refused. A "
                    "decision on it is recorded only with another conclusion and an exception "
                    "note saying so."
                ) % {"why": why})
            else:
                self.add_error(None, _(
                    "This receipt does not verify (%(why)s). A decision on it is recorded only "
                    "with a conclusion other than “accepted” and an exception note saying so."
                ) % {"why": why})
        if self.reviewer is not None:
            # In the admin's transaction, the row stays locked until the decision is stored.
            hold = queue.hold_of(receipt, lock=connection.in_atomic_block)
            if hold.by_other_than(self.reviewer):
                self.add_error(None, held_words(hold))
        return data

    def record(self, reviewer: User) -> ReviewDecision | None:
        """Store the valid form's decision (services.decision_record); None, with the error on
        the form, when another auditor corrected the same decision meanwhile or holds the
        receipt."""
        data = self.cleaned_data
        try:
            return decision_record(
                receipt=self.given or data["receipt"],
                reviewer=reviewer,
                conclusion=data["conclusion"],
                exception_note=data["exception_note"],
                follow_up=data["follow_up"],
                supersedes=data["supersedes"],
            )
        except AlreadyCorrected:
            self.add_error("supersedes", CORRECTED)
            return None
        except HeldByAnother as held:
            self.add_error(None, held_words(held.hold))
            return None

"""The form of a review decision, one set of rules wherever an auditor records one: on the
receipt page (`DecisionForm(data, receipt=receipt)`: the receipt is the page's, and the hash
the auditor was looking at must still be the receipt's) and in the admin (the auditor names
the receipt). Either way a correction supersedes a decision on the same receipt that no other
decision corrects yet; review/services.decision_record stores it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from receiptsite.receipts.models import Receipt, ReviewDecision


class DecisionForm(forms.ModelForm):
    class Meta:
        model = ReviewDecision
        fields = ["receipt", "conclusion", "exception_note", "follow_up", "supersedes"]
        labels = {
            "conclusion": _("Conclusion"),
            "exception_note": _("Exception (if any)"),
            "follow_up": _("Follow-up (if any)"),
            "supersedes": _("Corrects an earlier decision"),
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

    def clean_output_hash(self) -> str:
        value: str = self.cleaned_data["output_hash"]
        assert self.receipt is not None
        if value != self.receipt.output_hash:
            raise forms.ValidationError(
                _("The receipt's hash is not the one you reviewed. Reload the page and review "
                  "it again.")
            )
        return value

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        receipt = self.receipt or data.get("receipt")
        supersedes = data.get("supersedes")
        if receipt is not None and supersedes is not None and supersedes.receipt_id != receipt.pk:
            self.add_error(
                "supersedes", _("A decision can only supersede a decision on the same receipt.")
            )
        return data

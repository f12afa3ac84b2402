"""The auditor's "Record a review" form on the receipt page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from receiptsite.receipts.models import Receipt, ReviewDecision


class DecisionForm(forms.Form):
    conclusion = forms.ChoiceField(label=_("Conclusion"), choices=ReviewDecision.CONCLUSIONS)
    exception_note = forms.CharField(
        label=_("Exception (if any)"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    follow_up = forms.CharField(
        label=_("Follow-up (if any)"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    supersedes = forms.ModelChoiceField(
        label=_("Corrects an earlier decision"),
        queryset=ReviewDecision.objects.none(),
        required=False,
        empty_label=_("No: this is a new decision"),
    )
    # The hash the auditor was looking at: a decision is bound to it.
    output_hash = forms.CharField(widget=forms.HiddenInput)

    def __init__(self, *args: Any, receipt: Receipt, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.receipt = receipt
        field = self.fields["supersedes"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = ReviewDecision.objects.filter(
            receipt=receipt, superseded_by__isnull=True
        )
        self.fields["output_hash"].initial = receipt.output_hash

    def clean_output_hash(self) -> str:
        value: str = self.cleaned_data["output_hash"]
        if value != self.receipt.output_hash:
            raise forms.ValidationError(
                _("The receipt's hash is not the one you reviewed. Reload the page and review "
                  "it again.")
            )
        return value

"""The auditor's withdrawal: an admin action on receipts, with a confirmation page, and the
withdrawals themselves, read-only (withdrawal/withdrawals.py does the withdrawing)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import Receipt, Withdrawal
from receiptsite.withdrawal.withdrawals import NOTE_MAX, is_erased, receipt_withdraw


class WithdrawForm(forms.Form):
    reason = forms.ChoiceField(choices=Withdrawal.REASONS, help_text="Shown on the public page.")
    note = forms.CharField(
        max_length=NOTE_MAX,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Internal: kept with the withdrawal, never shown publicly.",
    )


def may_withdraw(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("receipts.add_withdrawal"))


@admin.action(description="Withdraw the selected receipts (asks first)", permissions=["withdraw"])
def withdraw_receipts(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Receipt]
) -> TemplateResponse | None:
    receipts = list(queryset.select_related("tenant").order_by("pk"))
    confirmed = request.POST.get("confirm") == "yes"
    form = WithdrawForm(request.POST if confirmed else None)
    if confirmed and form.is_valid():
        for receipt in receipts:
            # The admin reads every tenant (rowsecurity.AuditorScopeMiddleware); the writes are
            # the receipt's tenant's, as the tenant's own route makes them.
            with rowsecurity.tenant_transaction(receipt.tenant_id):
                receipt_withdraw(
                    receipt=receipt,
                    reason=form.cleaned_data["reason"],
                    note=form.cleaned_data["note"],
                    auditor=request.user,  # type: ignore[arg-type]
                )
        modeladmin.message_user(
            request,
            f"Withdrew {len(receipts)} receipt(s); their content is erased.",
            messages.SUCCESS,
        )
        return None  # back to the list
    for receipt in receipts:
        receipt.is_withdrawn = is_erased(receipt)  # type: ignore[attr-defined]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Withdraw receipts",
        "receipts": receipts,
        "form": form,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/receipts/receipt/withdraw_confirmation.html", context)


@admin.register(Withdrawal)
class WithdrawalAdmin(admin.ModelAdmin):
    """Withdrawals are made by the action above or the tenant's API; here they are read."""

    list_display = ["receipt_public_id", "tenant", "withdrawn_at", "reason", "withdrawn_by"]
    list_filter = ["reason", "withdrawn_by", "tenant"]
    search_fields = ["=receipt_public_id"]
    list_select_related = ["tenant"]
    fields = readonly_fields = (
        "receipt_public_id",
        "tenant",
        "withdrawn_at",
        "reason",
        "note",
        "withdrawn_by",
        "api_key",
        "auditor",
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

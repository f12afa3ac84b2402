"""GET /api/audit-logs: the tenant's own audit-log entries, newest first, filtered and
keyset-paginated like the tenant's receipts (receiptsite/api/views.py), read by the same functions
(receiptsite/api/reading.py), with the same errors."""

from __future__ import annotations

import re
import uuid

from django.http import HttpResponse

from receiptsite.api.reading import bad_parameter, keyset_page, refuse_nul, whole_number
from receiptsite.api.routes import TenantRequest, api_route, json_response
from receiptsite.audit.models import AuditEntry
from receiptsite.capability import RECEIPT_ID_PATTERN

CURSOR_SALT = "receiptsite.audit.cursor"

# Exact-match filters on text: the parameter is the column.
TEXT_FILTERS = ("request_id", "key_prefix")
RECEIPT_ID = re.compile(RECEIPT_ID_PATTERN)


@api_route("GET", tenant=True, rate={"GET": "read"})
def audit_logs(request: TenantRequest) -> HttpResponse:
    params = request.GET
    refuse_nul(params)
    query = AuditEntry.objects.filter(tenant_id=request.api_key.tenant_id)
    for name in TEXT_FILTERS:
        if params.get(name):  # an empty parameter counts as absent
            query = query.filter(**{name: params[name]})
    if params.get("status"):
        status = whole_number(params["status"])
        if status is None or not 100 <= status <= 599:
            raise bad_parameter("status", "must be an HTTP status code from 100 to 599")
        query = query.filter(status=status)
    if params.get("receipt_id"):
        if not RECEIPT_ID.fullmatch(params["receipt_id"]):
            raise bad_parameter("receipt_id", "must be a receipt id (a hyphenated UUID)")
        query = query.filter(receipt_ids__holds=str(uuid.UUID(params["receipt_id"])))
    page, next_cursor = keyset_page(query, params, at="at", salt=CURSOR_SALT)
    entries = [entry.to_dict() for entry in page]
    return json_response({"entries": entries, "next_cursor": next_cursor})

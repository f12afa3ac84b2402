"""GET /api/audit-logs: the tenant's own audit-log entries, newest first, filtered and
keyset-paginated like the tenant's receipts (receiptsite.receipts.api), with the same errors."""

from __future__ import annotations

import re
import uuid

from django.core import signing as django_signing
from django.http import HttpResponse

from receiptsite.audit.models import AuditEntry
from receiptsite.receipts.api import _bad_parameter, _json, _whole_number
from receiptsite.receipts.http import RECEIPT_ID_PATTERN, TenantRequest, api_route
from receiptsite.receipts.rfc3339 import parse_rfc3339

CURSOR_SALT = "receiptsite.audit.cursor"

# Exact-match filters on text: the parameter is the column.
TEXT_FILTERS = ("request_id", "key_prefix")
RECEIPT_ID = re.compile(RECEIPT_ID_PATTERN)


@api_route("GET", tenant=True, rate={"GET": "read"})
def audit_logs(request: TenantRequest) -> HttpResponse:
    params = request.GET
    for name, values in params.lists():
        if any("\x00" in value for value in values):
            raise _bad_parameter(name, "must not contain U+0000")
    query = AuditEntry.objects.filter(tenant_id=request.api_key.tenant_id)
    for name in TEXT_FILTERS:
        if params.get(name):  # an empty parameter counts as absent
            query = query.filter(**{name: params[name]})
    if params.get("status"):
        status = _whole_number(params["status"])
        if status is None or not 100 <= status <= 599:
            raise _bad_parameter("status", "must be an HTTP status code from 100 to 599")
        query = query.filter(status=status)
    if params.get("receipt_id"):
        if not RECEIPT_ID.fullmatch(params["receipt_id"]):
            raise _bad_parameter("receipt_id", "must be a receipt id (a hyphenated UUID)")
        query = query.filter(receipt_ids__holds=str(uuid.UUID(params["receipt_id"])))
    for name, lookup in (("since", "at__gte"), ("until", "at__lt")):
        if params.get(name):
            try:
                # An unencoded "+" in a query string arrives as a space: take it back.
                when = parse_rfc3339(params[name].replace(" ", "+"))
            except ValueError:
                raise _bad_parameter(name, "must be an RFC 3339 date-time with an offset") from None
            query = query.filter(**{lookup: when})
    limit = _whole_number(params.get("limit") or "50")
    if limit is None or not 1 <= limit <= 200:
        raise _bad_parameter("limit", "must be a whole number from 1 to 200")
    if params.get("cursor"):
        try:
            after = int(django_signing.loads(params["cursor"], salt=CURSOR_SALT))
        except (django_signing.BadSignature, ValueError, TypeError):
            raise _bad_parameter("cursor", "is not a cursor this site handed out") from None
        query = query.filter(pk__lt=after)
    rows = list(query.order_by("-pk")[: limit + 1])
    page = rows[:limit]
    next_cursor = (
        django_signing.dumps(page[-1].pk, salt=CURSOR_SALT) if len(rows) > limit else None
    )
    return _json({"entries": [entry.to_dict() for entry in page], "next_cursor": next_cursor})

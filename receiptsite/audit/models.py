"""The API audit log: what each tenant's request asked, who asked, and what it was answered;
and the failed authentications of tenant routes, which have no tenant.

Both are append-only: the database refuses to change a row, and lets one go only to
`manage.py pruneauditlog`, inside the transaction in which that command wrote a PrunePermit,
and only when the row is older than the permit's cutoff (migrations/0002_append_only, and
0004_failedauthentication for the failed authentications).
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.compiler import SQLCompiler

from receiptsite.lib.rows import InsertQuerySet
from receiptsite.receipts.models import AuthFailure, Tenant, format_timestamp


class ReceiptIdsField(models.JSONField):
    """A JSON list of receipt ids (lowercase, hyphenated), with one lookup, `holds`."""


@ReceiptIdsField.register_lookup
class Holds(models.Lookup):
    """`receipt_ids__holds=<id>`: the list holds this id. On PostgreSQL a jsonb containment,
    which the GIN index answers; SQLite has no containment for JSON, so it looks in the list."""

    lookup_name = "holds"
    prepare_rhs = False

    def as_sql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper
    ) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        if connection.vendor == "postgresql":
            return f"{lhs} @> %s::jsonb", (*lhs_params, json.dumps([str(self.rhs)]))
        sql = f"EXISTS (SELECT 1 FROM json_each({lhs}) WHERE json_each.value = %s)"
        return sql, (*lhs_params, str(self.rhs))


class EntryJSON(TypedDict):
    id: int
    at: str
    request_id: str
    key_prefix: str
    method: str
    route: str
    status: int
    problem_type: str | None
    receipt_ids: list[str]
    duration_ms: int


class AuditEntry(models.Model):
    """One request made with a tenant's key. Never a key, a header or a path: the route is the
    URL pattern's name (`GET /api/receipts/{id}`), the receipts are named in `receipt_ids`."""

    at = models.DateTimeField(help_text="When the request reached the route (UTC).")
    request_id = models.CharField(max_length=128, help_text="The request's X-Request-ID.")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    key_prefix = models.CharField(max_length=32, help_text="The API key's public prefix.")
    method = models.CharField(max_length=10)
    route = models.CharField(max_length=200)
    status = models.PositiveSmallIntegerField()
    problem_type = models.CharField(max_length=300, null=True, blank=True)
    receipt_ids = ReceiptIdsField(default=list, blank=True)
    duration_ms = models.PositiveIntegerField()

    # insert(): the entry of a storing request is written under the log's lock.
    objects = InsertQuerySet["AuditEntry"].as_manager()

    class Meta:
        verbose_name = "API audit-log entry"
        verbose_name_plural = "API audit log"
        indexes = [
            models.Index(fields=["tenant", "-id"], name="audit_tenant_newest"),
            models.Index(fields=["tenant", "request_id"], name="audit_tenant_request"),
            models.Index(fields=["at"], name="audit_at"),  # pruneauditlog
        ]

    def __str__(self) -> str:
        return f"{self.route} {self.status} ({self.request_id})"

    def to_dict(self) -> EntryJSON:
        return {
            "id": self.pk,
            "at": format_timestamp(self.at),
            "request_id": self.request_id,
            "key_prefix": self.key_prefix,
            "method": self.method,
            "route": self.route,
            "status": self.status,
            "problem_type": self.problem_type,
            "receipt_ids": list(self.receipt_ids),
            "duration_ms": self.duration_ms,
        }


class FailedAuthentication(models.Model):
    """A request to a tenant route that no active API key authenticated (answered 401), as
    receiptsite/audit/recording.py writes it. Never the key: at most the public prefix of the
    stored key it named (a revoked key, or a known prefix with a wrong secret). The path is
    masked as the logs mask it (a receipt id cut short). A refusal by the `auth` rate limit
    (429) is not recorded, so an address adds rows no faster than its limit allows."""

    at = models.DateTimeField(help_text="When the request reached the route (UTC).")
    request_id = models.CharField(max_length=128, help_text="The request's X-Request-ID.")
    client_address = models.CharField(
        max_length=100, help_text="The client's address, as the rate limits see it."
    )
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=200, help_text="The path, any receipt id cut short.")
    reason = models.CharField(max_length=10, choices=AuthFailure.choices)
    key_prefix = models.CharField(
        max_length=32, blank=True,
        help_text="The public prefix of the stored key the request named, if it named one.",
    )

    class Meta:
        verbose_name = "failed authentication"
        indexes = [
            models.Index(fields=["at"], name="failedauth_at"),  # pruneauditlog, the admin
            models.Index(fields=["client_address", "at"], name="failedauth_address"),
        ]

    def __str__(self) -> str:
        return f"{self.reason} key from {self.client_address} ({self.request_id})"


class PrunePermit(models.Model):
    """Written by `manage.py pruneauditlog` only, in the transaction that removes the entries
    and failed authentications older than `cutoff`; closed (with the count of both removed)
    before that transaction commits. The database lets a row go only against an open permit
    of the current transaction, refuses
    a permit whose cutoff is less than a day old, and keeps every permit for ever: each prune
    leaves its record."""

    cutoff = models.DateTimeField()
    issued_at = models.DateTimeField()
    # On PostgreSQL the database sets it to the writing transaction's id (txid_current()):
    # a permit is good in that transaction only. Unused on SQLite (see the migration).
    txid = models.BigIntegerField(null=True, blank=True, editable=False)
    closed_at = models.DateTimeField(null=True, blank=True)
    removed = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        verbose_name = "audit-log prune"

    def __str__(self) -> str:
        return f"entries before {format_timestamp(self.cutoff)}: {self.removed} removed"

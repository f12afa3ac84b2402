"""The stored records: tenants and their keys, receipts, the transparency log, review decisions.

Receipts, the log tables and review decisions are append-only: migrations install database
triggers that refuse UPDATE, DELETE and TRUNCATE of them (see migrations/0002_immutability).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import secrets
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypedDict, cast

from django.conf import settings
from django.db import connection, models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy

from receiptsite.evidence.declaration import COLUMNS, LIST_FILTERS, StoredColumn
from receiptsite.lib.rows import InsertQuerySet


def format_timestamp(value: datetime) -> str:
    """Every timestamp the site writes: UTC, microseconds, Z."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Tenant(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug


class ApiKey(models.Model):
    """An API key is shown once. Only its public prefix and the SHA-256 of the whole key are kept.

    A key reads `rk_<12 hex>_<43 base64url>`: the prefix finds the row in one indexed lookup,
    and the digest is compared in constant time. The secret part has 256 bits of entropy, so a
    plain SHA-256 (not a slow password hash) is the right digest.
    """

    PREFIX_LENGTH = len("rk_") + 12

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="api_keys")
    prefix = models.CharField(max_length=32, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix} ({self.tenant.slug})"

    @staticmethod
    def digest_of(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, tenant: Tenant) -> tuple[ApiKey, str]:
        prefix = f"rk_{secrets.token_hex(6)}"
        raw = f"{prefix}_{secrets.token_urlsafe(32)}"
        key = cls.objects.create(tenant=tenant, prefix=prefix, digest=cls.digest_of(raw))
        return key, raw

    @classmethod
    def authenticate(cls, raw: str) -> ApiKey | None:
        """The active key named by `raw`, with its tenant, or None. One query."""
        found = cls.look_up(raw)
        return found if isinstance(found, ApiKey) else None

    @classmethod
    def look_up(cls, raw: str) -> ApiKey | KeyRefused:
        """The active key named by `raw`, with its tenant (one query), or why not. A value
        without a key's shape is not looked up. The refusal names the prefix of the stored key
        `raw` names, if there is one (public, as in every receipt), and never more of `raw`."""
        prefix = raw[: cls.PREFIX_LENGTH]
        if not raw:
            return KeyRefused(AuthFailure.MISSING, "")
        if not prefix.startswith("rk_") or len(raw) > 200:
            return KeyRefused(AuthFailure.MALFORMED, "")
        key = _key_with_tenant(prefix)
        if key is None:
            return KeyRefused(AuthFailure.UNKNOWN, "")
        if not hmac.compare_digest(key.digest, cls.digest_of(raw)):
            return KeyRefused(AuthFailure.UNKNOWN, key.prefix)
        if key.revoked_at is not None:
            return KeyRefused(AuthFailure.REVOKED, key.prefix)
        return key


class AuthFailure(models.TextChoices):
    """Why a request to a tenant route was answered 401 (the audit app records each one)."""

    MISSING = "missing", "no key"
    MALFORMED = "malformed", "not a bearer API key"
    UNKNOWN = "unknown", "no such key, or not its secret"
    REVOKED = "revoked", "a revoked key"


class KeyRefused(NamedTuple):
    reason: AuthFailure
    key_prefix: str  # the stored key's public prefix when `raw` named one, else ""


class SigningKey(models.Model):
    """The public half of every signing key the site has used, kept forever so that old
    receipts and checkpoints keep verifying. The private half lives only in SIGNING_KEY_FILE."""

    ACTIVE, RETIRED, COMPROMISED = "active", "retired", "compromised"
    STATUSES = [(ACTIVE, "active"), (RETIRED, "retired"), (COMPROMISED, "compromised")]

    kid = models.CharField(max_length=64, unique=True)
    public_key = models.BinaryField(max_length=32)
    status = models.CharField(max_length=12, choices=STATUSES, default=ACTIVE)
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)
    # For a compromised key: from when on nothing it signed counts (`compromisekey --at`).
    compromised_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kid} ({self.status})"

    def compromised_as_of(self, unrecorded: str = "an unrecorded time") -> str:
        """When the key counts as compromised from, as every message says it (`unrecorded`:
        the words for a key marked compromised with no time, which only an old release made;
        migration 0010 dated those)."""
        return format_timestamp(self.compromised_at) if self.compromised_at else unrecorded

    def disowns(self, signed_at: datetime) -> bool:
        """Whether what this key signed at `signed_at` counts for nothing: the key is
        compromised, and it signed then or later (or no time was recorded). Reads that must
        stay one round trip apply the same rule in SQL (disowns_sql)."""
        return self.status == self.COMPROMISED and (
            self.compromised_at is None or signed_at >= self.compromised_at
        )

    @classmethod
    def disowns_sql(cls, key: str, signed_at: str) -> str:
        """disowns() as an SQL condition: `key` the alias of this table, `signed_at` the
        column that holds the signing time (ledger/log.py, ledger/witnesses.py)."""
        return (
            f"{key}.status = '{cls.COMPROMISED}' "
            f"AND ({key}.compromised_at IS NULL OR {signed_at} >= {key}.compromised_at)"
        )


_NO_ID = uuid.UUID(int=0)


@functools.lru_cache(maxsize=64)
def _path_around_id(name: str, script_prefix: str) -> tuple[str, str]:
    before, _, after = reverse(name, args=[_NO_ID]).partition(str(_NO_ID))
    return before, after


def _receipt_path(name: str, public_id: uuid.UUID | str) -> str:
    """reverse(name, args=[public_id]) for the routes of one receipt, without resolving the
    URLconf on every answer (each summary of a list names two of them)."""
    before, after = _path_around_id(name, get_script_prefix())
    return f"{before}{public_id}{after}"


class ReceiptQuerySet(InsertQuerySet["Receipt"]):
    """The receipts, with the hand-written reads of the hot routes and insert() (lib/rows.py)."""

    def for_verification(self) -> ReceiptQuerySet:
        return self.select_related("tenant", "signing_key", "log_entry")

    def named(
        self, tenant_id: int, ids: Sequence[str] = (), keys: Sequence[str] = ()
    ) -> ReceiptQuerySet:
        """The receipts of the tenant `tenant_id` that one of these public ids or idempotency
        keys names (a page's linked receipts, a post's links), each found by its own index: an
        id by the public id's, a key by the tenant's keys' (tenant_id, idempotency_key). Beside
        the ids the tenant is compared as `tenant_id + 0`, which no index serves: SQLite keeps
        no statistics unless asked (ANALYZE), and without them it read `tenant_id = ? AND
        public_id IN (...)` through the tenant's index, every receipt of the tenant (30 ms
        against 0.2 ms at 20,000 receipts)."""
        by_id = Q(public_id__in=ids, tenant_unindexed=tenant_id)
        by_key = Q(tenant_id=tenant_id, idempotency_key__in=keys)
        return self.alias(tenant_unindexed=F("tenant_id") + 0).filter(by_id | by_key)

    def verifiable(self, public_id: uuid.UUID, tenant_id: int | None = None) -> Receipt | None:
        """The receipt (of the tenant `tenant_id`, if given) with its tenant, signing key and
        log entry, as for_verification() fetches it, in one hand-written query: on the hot
        routes compiling the ORM query cost more than running it. Every field is read from
        the row now."""
        sql, params = self.verifiable_statement(public_id, tenant_id)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return self.verifiable_from(row)

    def verifiable_statement(
        self, public_id: uuid.UUID, tenant_id: int | None = None
    ) -> tuple[str, list[Any]]:
        """verifiable()'s SELECT and its parameters, for a caller that reads more in the same
        round trip (ledger/verification.verifiable: the log's latest checkpoint too)."""
        field = Receipt._meta.get_field("public_id")
        params = [field.get_db_prep_value(public_id, connection)]
        where = "r.public_id = %s"
        if tenant_id is not None:
            where, params = f"{where} AND r.tenant_id = %s", [*params, tenant_id]
        return f"{_select_sql(connection.vendor)} WHERE {where}", params

    def verifiable_from(self, row: Sequence[Any] | None) -> Receipt | None:
        """The receipt of a row of verifiable_statement(); None for no row, or one of NULLs
        (a LEFT JOIN that found none)."""
        if row is None or row[0] is None:
            return None
        (receipt, tenant, signing_key), (log_index,) = _split(row, Receipt, Tenant, SigningKey)
        receipt.tenant, receipt.signing_key = tenant, signing_key
        receipt.__dict__["log_index"] = log_index  # None: no place in the log yet
        return cast(Receipt, receipt)

    def stored_under(
        self, tenant_id: int, keys: Sequence[str], hashes: Sequence[str]
    ) -> list[tuple[Receipt, str | None]]:
        """The tenant's receipts stored under one of these idempotency keys, or withdrawn
        under one (found by the hash their withdrawal keeps of it: these `hashes`), in the
        order they were stored, each with its log index and the hash its withdrawal keeps
        (None if it is not withdrawn). One hand-written query: ingest runs it under the
        log's lock, where the ORM's compilation of it (a union of two subqueries, a join and
        an annotation) took 2.2 ms against well under a millisecond to run it."""
        if not keys:
            return []
        sql = _stored_under_sql(connection.vendor)
        params: list[Any]
        if connection.vendor == "postgresql":
            params = [tenant_id, list(keys), tenant_id, list(hashes), tenant_id]
        else:
            sql = sql.format(
                keys=", ".join(["%s"] * len(keys)), hashes=", ".join(["%s"] * len(hashes)) or "NULL"
            )
            params = [tenant_id, *keys, tenant_id, *hashes, tenant_id]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        found = []
        for row in rows:
            (receipt,), (log_index, withdrawn_under) = _split(row, Receipt)
            receipt.__dict__["log_index"] = log_index  # None: no place in the log yet
            found.append((receipt, withdrawn_under))
        return found


class IngestAnswer(TypedDict):
    id: str
    url: str
    verify_url: str
    output_hash: str
    recorded_at: str
    log_index: int | None


class Summary(IngestAnswer):
    workflow_id: str
    phase: str
    subject: dict[str, Any]
    outcome: str | None


class Receipt(models.Model):
    """One evidence document. `canonical_bytes` is the single source of truth; the other
    columns are copies for lookups and filters, and the verification checks that they agree."""

    public_id = models.UUIDField(unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="receipts")
    api_key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, related_name="receipts")
    recorded_at = models.DateTimeField()
    # The columns that repeat fields of the document (workflow_id, phase, subject_name, ...)
    # are added below from the declaration, evidence.COLUMNS. These annotations are for the
    # type checker, for the few the code reads by name.
    workflow_id: str
    phase: str
    subject_name: str
    outcome: str | None
    idempotency_key: str | None
    # SHA-256 of the producer's part of the document: "the same request" for idempotency.
    request_hash = models.CharField(max_length=64)
    canonical_bytes = models.BinaryField()
    output_hash = models.CharField(max_length=64)
    signature = models.BinaryField(max_length=64)
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")

    objects = ReceiptQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="receipt_idempotency_key_unique_per_tenant",
            )
        ]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="receipt_tenant_newest"),
            models.Index(fields=["tenant", "workflow_id", "-id"], name="receipt_tenant_workflow"),
            models.Index(fields=["tenant", "recorded_at"], name="receipt_tenant_recorded"),
            # The list's other exact-match filters, each in the list's keyset order (newest
            # first), so that a filtered page reads only its own rows at any size.
            *(
                models.Index(fields=["tenant", column.name, "-id"], name=f"receipt_{column.name}")
                for column in LIST_FILTERS
                if column.name != "workflow_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.phase} {self.subject_name} ({self.public_id})"

    @property
    def uuid(self) -> str:
        return str(self.public_id)

    @property
    def url(self) -> str:
        return settings.SITE_URL + _receipt_path("receipt-page", self.public_id)

    @property
    def verify_url(self) -> str:
        return settings.SITE_URL + _receipt_path("api-verify", self.public_id)

    @functools.cached_property
    def log_index(self) -> int | None:
        """The receipt's place in the log: set by the fetch of `verifiable()` and by ingest,
        else read from the log entry."""
        try:
            return self.log_entry.index
        except LogEntry.DoesNotExist:
            return None

    def raw_bytes(self) -> bytes:
        return bytes(self.canonical_bytes)  # PostgreSQL hands back a memoryview

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.raw_bytes())
        return doc

    def ingest_answer(self) -> IngestAnswer:
        return {
            "id": self.uuid,
            "url": self.url,
            "verify_url": self.verify_url,
            "output_hash": self.output_hash,
            "recorded_at": format_timestamp(self.recorded_at),
            "log_index": self.log_index,
        }

    def summary(self, document: dict[str, Any] | None = None) -> Summary:
        doc = document if document is not None else self.document()
        return {
            **self.ingest_answer(),
            "workflow_id": self.workflow_id,
            "phase": self.phase,
            "subject": doc.get("subject", {}),
            "outcome": self.outcome,
        }


def _column_field(column: StoredColumn) -> models.CharField[str | None, str | None]:
    if column.null:
        return models.CharField(max_length=column.max_length, null=True, blank=True)
    if column.required:
        return models.CharField(max_length=column.max_length)
    return models.CharField(max_length=column.max_length, blank=True, default="")


for _column in COLUMNS:
    Receipt.add_to_class(_column.name, _column_field(_column))


def _fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    return list(model._meta.concrete_fields)


def _columns(alias: str, model: type[models.Model]) -> list[str]:
    """Every column of `model`, as `alias.column`, in the order _split() reads them."""
    quote = connection.ops.quote_name
    return [f"{alias}.{quote(str(field.column))}" for field in _fields(model)]


@functools.cache
def _select_sql(vendor: str) -> str:
    """SELECT every column of a receipt, its tenant and signing key, and its log index: one
    statement, derived from the models once per process. On the hot routes (verify, the
    page, the detail) compiling the ORM's select_related() for it cost 4x the whole fetch
    (measured on both databases), and RawQuerySet 3x."""
    quote = connection.ops.quote_name
    selected = [
        *_columns("r", Receipt), *_columns("t", Tenant), *_columns("k", SigningKey),
        f"e.{quote('index')}",
    ]
    return (
        f"SELECT {', '.join(selected)} FROM {Receipt._meta.db_table} AS r "
        f"JOIN {Tenant._meta.db_table} AS t ON t.id = r.tenant_id "
        f"JOIN {SigningKey._meta.db_table} AS k ON k.id = r.signing_key_id "
        f"LEFT JOIN {LogEntry._meta.db_table} AS e ON e.receipt_id = r.id"
    )


@functools.cache
def _key_sql(vendor: str) -> str:
    """The API key with a prefix, and its tenant: one statement, derived from the models once
    per process. Every tenant request runs it first; the ORM's select_related() took 0.37 ms
    per look-up, most of it compiling."""
    quote = connection.ops.quote_name
    selected = [*_columns("k", ApiKey), *_columns("t", Tenant)]
    prefix = quote(str(ApiKey._meta.get_field("prefix").column))
    return (
        f"SELECT {', '.join(selected)} FROM {ApiKey._meta.db_table} AS k "
        f"JOIN {Tenant._meta.db_table} AS t ON t.id = k.tenant_id WHERE k.{prefix} = %s"
    )


def _key_with_tenant(prefix: str) -> ApiKey | None:
    with connection.cursor() as cursor:
        cursor.execute(_key_sql(connection.vendor), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    (key, tenant), _ = _split(row, ApiKey, Tenant)
    key.tenant = tenant
    return cast(ApiKey, key)


@functools.cache
def _stored_under_sql(vendor: str) -> str:
    """ReceiptQuerySet.stored_under's statement, derived from the models once per process.
    On PostgreSQL each list is one array parameter (`= ANY(%s)`), so that the statement is
    one text whatever the lists' lengths, prepared once per connection (psycopg neither
    caches its parsing of a statement over 4 KB nor prepares a statement it has not seen
    five times: a batch's 300 placeholders cost 3.4 ms to parse, every time). SQLite has no
    arrays: `{keys}` and `{hashes}` stand for the placeholders of the two lists."""
    quote = connection.ops.quote_name
    withdrawal = Withdrawal._meta
    of = withdrawal.db_table
    by_receipt = quote(str(withdrawal.get_field("receipt").column))
    by_tenant = quote(str(withdrawal.get_field("tenant").column))
    kept = quote(str(withdrawal.get_field("idempotency_key_hash").column))
    key = quote(str(Receipt._meta.get_field("idempotency_key").column))
    receipts = Receipt._meta.db_table
    selected = _columns("r", Receipt)
    postgresql = vendor == "postgresql"
    keys, hashes = ("= ANY(%s)",) * 2 if postgresql else ("IN ({keys})", "IN ({hashes})")
    # The ids first, each list through its own index ((tenant, idempotency key) and the
    # withdrawals' (tenant, key hash)), then their rows by primary key: written as
    # `r.id IN (...)`, PostgreSQL without statistics read the subquery once for each of the
    # tenant's receipts (22 ms at 300 receipts).
    return (
        f"SELECT {', '.join(selected)}, e.{quote('index')}, w.{kept} "
        f"FROM (SELECT id FROM {receipts} WHERE tenant_id = %s AND {key} {keys} "
        f"UNION SELECT {by_receipt} FROM {of} WHERE {by_tenant} = %s AND {kept} {hashes}"
        f") AS f JOIN {receipts} AS r ON r.id = f.id "
        f"LEFT JOIN {LogEntry._meta.db_table} AS e ON e.receipt_id = r.id "
        f"LEFT JOIN {of} AS w ON w.{by_receipt} = r.id "
        f"WHERE r.tenant_id = %s ORDER BY r.id"
    )


def _python_value(field: models.Field[Any, Any], value: Any) -> Any:
    """A column's value as the model holds it. Only two kinds differ from what the drivers
    hand back: a UUID (SQLite stores its hex) and a datetime (SQLite's is naive, in UTC)."""
    if isinstance(value, datetime):
        return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value
    if isinstance(field, models.UUIDField):
        return field.to_python(value)
    return value


def _build(model: type[models.Model], values: Sequence[Any]) -> Any:
    fields = _fields(model)
    return model.from_db(
        connection.alias,
        [field.attname for field in fields],
        [_python_value(field, value) for field, value in zip(fields, values, strict=True)],
    )


def _split(row: Sequence[Any], *kinds: type[models.Model]) -> tuple[list[Any], Sequence[Any]]:
    """A row that selects _columns() of each of `kinds`, in order, then other values: an
    instance of each kind, and the values after them."""
    built, start = [], 0
    for kind in kinds:
        end = start + len(_fields(kind))
        built.append(_build(kind, row[start:end]))
        start = end
    return built, row[start:]


class LogEntry(models.Model):
    """A receipt's position in the transparency log. The receipt row itself never changes."""

    index = models.BigIntegerField(primary_key=True)
    receipt = models.OneToOneField(Receipt, on_delete=models.PROTECT, related_name="log_entry")

    class Meta:
        verbose_name_plural = "log entries"


class LogNode(models.Model):
    """The hash of one complete subtree of the log: (level, index) covers leaves
    [index * 2**level, (index + 1) * 2**level). Level 0 holds the leaf hashes. Storing these
    makes an append O(log n) writes and a proof O(log n) reads, as in Certificate Transparency.
    """

    key = models.BigIntegerField(primary_key=True)  # level * 2**56 + index, see node_key()
    hash = models.BinaryField(max_length=32)

    @staticmethod
    def node_key(level: int, index: int) -> int:
        return (level << 56) | index


class Checkpoint(models.Model):
    """The tree head after every append: size, root and the origin it is published under.
    Its signature is a SignedCheckpoint, made once the append has committed."""

    tree_size = models.BigIntegerField(primary_key=True)
    root_hash = models.BinaryField(max_length=32)
    origin = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)


class SignedCheckpoint(models.Model):
    """A checkpoint as published: the C2SP signed note of a tree head, made by a write path
    after the tree was committed (see log.sign_head). Reads serve the latest one and never
    sign. A head is signed again when the active key changes, so one size may have several."""

    tree_size = models.BigIntegerField()
    note = models.TextField()
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    # Stamped by the database's clock whatever the INSERT says (migrations/0013): the site's
    # own record of when it signed, which `compromisekey` takes as proof.
    signed_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["tree_size", "id"], name="signedcheckpoint_latest")]

    def __str__(self) -> str:
        return f"checkpoint of {self.tree_size} leaves ({self.signing_key_id})"


class LogContinuation(models.Model):
    """The end of one log and its continuation under a new origin: `manage.py continuelog`,
    run as the database's owner after a restore that lost trees the site had signed
    (integrity/continuation.py says what the signed statement holds; ledger/log.py honours it).
    Append-only (migrations/0020), and the site role may only read it
    (receipts/rowsecurity.py): a process holding the site's role cannot end its log to
    cover a rollback."""

    old_origin = models.CharField(max_length=255)
    signed_size = models.BigIntegerField()  # the largest tree the ended log signed
    signed_root = models.BinaryField(max_length=32)
    tree_size = models.BigIntegerField()  # the kept tree: the new log's first checkpoint
    root_hash = models.BinaryField(max_length=32)
    new_origin = models.CharField(max_length=255)
    statement = models.TextField()  # the signed note of all the above
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    recorded_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"log {self.old_origin} continued as {self.new_origin} at {self.tree_size}"


class AppendedSignature(models.Model):
    """A receipt signed again, by the key that replaced a compromised one: made by
    `compromisekey` for each receipt that key signed whose leaf a checkpoint signed before
    `compromised_at` includes. Append-only (migrations/0010_key_compromise); the newest one
    that verifies is the receipt's signature (verification.py)."""

    receipt = models.ForeignKey(Receipt, on_delete=models.PROTECT, related_name="+")
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    signature = models.BinaryField(max_length=64)
    signed_at = models.DateTimeField(db_default=Now())  # the database's clock (0013)
    # The checkpoint that shows the receipt was logged before the old key was compromised.
    evidence = models.ForeignKey(SignedCheckpoint, on_delete=models.PROTECT, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["receipt", "id"], name="appendedsignature_receipt")]

    def __str__(self) -> str:
        return f"signature of receipt {self.receipt_id} by {self.signing_key_id}"


class ReviewDecisionQuerySet(models.QuerySet["ReviewDecision"]):
    def latest_follow_up(self, receipt_id: int) -> str | None:
        """The latest follow-up note recorded on a receipt, or None. One indexed lookup,
        written as SQL: the ORM's compile time for it cost more than running it."""
        table = ReviewDecision._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT follow_up FROM {table} WHERE receipt_id = %s AND follow_up <> '' "
                "ORDER BY reviewed_at DESC, id DESC LIMIT 1",
                [receipt_id],
            )
            row = cursor.fetchone()
        return None if row is None else str(row[0])


class ReviewDecision(models.Model):
    """An auditor's decision on a receipt. Append-only: a correction is a new decision that
    supersedes the old one. Internal: the public page never shows decisions."""

    ACCEPTED = "accepted"
    CONCLUSIONS = [
        (ACCEPTED, "Accepted"),
        ("accepted_with_exception", "Accepted with exception"),
        ("rejected", "Rejected"),
        ("needs_follow_up", "Needs follow-up"),
    ]

    receipt = models.ForeignKey(Receipt, on_delete=models.PROTECT, related_name="decisions")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="review_decisions"
    )
    reviewed_at = models.DateTimeField(default=timezone.now)
    conclusion = models.CharField(max_length=32, choices=CONCLUSIONS)
    exception_note = models.TextField(blank=True)
    follow_up = models.TextField(blank=True)
    output_hash = models.CharField(
        max_length=64, help_text="The receipt's output hash at the time of review."
    )
    supersedes = models.OneToOneField(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="superseded_by",
        help_text="The earlier decision this one corrects.",
    )

    objects = ReviewDecisionQuerySet.as_manager()

    class Meta:
        ordering = ["-reviewed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_conclusion_display()} by {self.reviewer} at {self.reviewed_at:%Y-%m-%d}"


class DecisionLink(models.Model):
    """A review decision's place in the auditors' record: one hash chain over every decision,
    kept apart from the public log (review/chain.py). The link holds the hash of the
    decision's canonical bytes (which name the decision before it) and the site's signature
    over them; the decision row itself is untouched. Append-only (migrations/0011)."""

    SITE, MIGRATION = "site", "migration"
    CHAINED_BY = [(SITE, "the site, when it was recorded"), (MIGRATION, "migration 0011")]

    # 0, 1, 2, ... in the order decisions were recorded: unique, so no two can claim one place.
    position = models.PositiveBigIntegerField(unique=True)
    # DO_NOTHING: a DELETE of a decision goes to the database, whose trigger refuses it (the
    # foreign key stays in the database too).
    decision = models.OneToOneField(
        ReviewDecision, on_delete=models.DO_NOTHING, related_name="link"
    )
    # The decision before (its id and hash; none for the first): unique, so the chain cannot
    # fork.
    previous_decision_id = models.BigIntegerField(null=True, blank=True)
    previous_hash = models.CharField(max_length=64, unique=True)
    # The signed document (decisions.document(), RFC 8785), its sha256 and its signature.
    canonical_bytes = models.BinaryField()
    decision_hash = models.CharField(max_length=64)
    signature = models.BinaryField(max_length=64)
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    chained_at = models.DateTimeField(default=timezone.now)
    chained_by = models.CharField(max_length=16, choices=CHAINED_BY, default=SITE)

    def __str__(self) -> str:
        return f"decision {self.decision_id} at position {self.position}"


class RateBucket(models.Model):
    """A rate limit's token bucket, shared by every worker and host (api/ratelimit.py).
    Not a record: each take rewrites its row, and full buckets are deleted."""

    name = models.CharField(max_length=100, primary_key=True)  # scope:key prefix or address
    tokens = models.FloatField()
    stamp = models.FloatField()  # seconds since the epoch of the last take

    def __str__(self) -> str:
        return f"{self.name}: {self.tokens:g} tokens"


class Withdrawal(models.Model):
    """A receipt withdrawn by its publisher or an auditor: append-only, one per receipt.

    Its existence is what lets the database erase the receipt's content (the one change of a
    receipt row the triggers permit, migrations/0009_withdrawal); withdrawal/withdrawals.py does
    it. `receipt_public_id` repeats the receipt's public id so that, on PostgreSQL, a public
    read of that one receipt can read its withdrawal too (rowsecurity.SCOPED)."""

    # The reason categories of the contract, and how the page names each.
    REASONS = [
        ("personal_data", gettext_lazy("personal data")),
        ("secret", gettext_lazy("a secret")),
        ("legal", gettext_lazy("a legal reason")),
        ("other", gettext_lazy("another reason")),
    ]
    PUBLISHER, AUDITOR = "publisher", "auditor"
    BY = [(PUBLISHER, gettext_lazy("the publisher")), (AUDITOR, gettext_lazy("an auditor"))]

    receipt = models.OneToOneField(Receipt, on_delete=models.PROTECT, related_name="withdrawal")
    receipt_public_id = models.UUIDField(unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    withdrawn_at = models.DateTimeField(default=timezone.now)
    reason = models.CharField(max_length=20, choices=REASONS)
    note = models.CharField(max_length=500, blank=True)
    withdrawn_by = models.CharField(max_length=10, choices=BY)
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    auditor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
        related_name="+",
    )
    # The keyed hash of the receipt's (tenant, idempotency key), never the key, which is
    # erased with the content: a POST under that key again answers 410 (withdrawals.py,
    # idempotency_key_hash). Null when the receipt had no key, or was withdrawn before
    # migrations/0014 (its key already erased, nothing to hash).
    idempotency_key_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "idempotency_key_hash"], name="withdrawal_key_hash")
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(withdrawn_by="publisher", api_key__isnull=False, auditor__isnull=True)
                    | models.Q(withdrawn_by="auditor", auditor__isnull=False, api_key__isnull=True)
                ),
                name="withdrawal_by_publisher_or_auditor",
            )
        ]

    def __str__(self) -> str:
        return f"withdrawal of {self.receipt_public_id} ({self.reason})"


class WithdrawalStatement(models.Model):
    """A withdrawal as a signed statement (withdrawal/statement_v1.py, RFC 8785), in one hash
    chain over every withdrawal in the order they were made (withdrawal/statements.py): the
    statement names the hash of the one before. Served in the withdrawn receipt's 410 answers;
    `manage.py checkwithdrawals` checks the chain. Append-only (migrations/0015). Not
    tenant-scoped, as the log: it is public evidence, read by a receipt's public id."""

    SITE, MIGRATION = "site", "migration"
    STATED_BY = [(SITE, "the site, when it was made"), (MIGRATION, "migration 0015")]

    position = models.PositiveBigIntegerField(unique=True)
    # DO_NOTHING: the database refuses a DELETE of a withdrawal (append-only).
    withdrawal = models.OneToOneField(
        Withdrawal, on_delete=models.DO_NOTHING, related_name="statement"
    )
    previous_hash = models.CharField(max_length=64, unique=True)
    canonical_bytes = models.BinaryField()
    statement_hash = models.CharField(max_length=64, unique=True)
    signature = models.BinaryField(max_length=64)
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    stated_at = models.DateTimeField(default=timezone.now)
    stated_by = models.CharField(max_length=16, choices=STATED_BY, default=SITE)

    def __str__(self) -> str:
        return f"statement of withdrawal {self.withdrawal_id} at position {self.position}"


class DecisionVouch(models.Model):
    """A decision of the auditors' record signed again, by the key that replaced a compromised
    one: made by `compromisekey`, in its transaction, for each decision whose standing rested
    on that key and that still checks out (its bytes, hash, signature and place in the chain;
    review/chain.py). The signature is over the link's canonical bytes, unchanged.
    Append-only (migrations/0017_decisions_survive_compromise)."""

    link = models.ForeignKey(DecisionLink, on_delete=models.PROTECT, related_name="vouches")
    signing_key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    signature = models.BinaryField(max_length=64)
    signed_at = models.DateTimeField(db_default=Now())  # the database's clock (as 0013)

    class Meta:
        indexes = [models.Index(fields=["link", "id"], name="decisionvouch_link")]

    def __str__(self) -> str:
        return f"vouch for decision link {self.link_id} by {self.signing_key_id}"


class KeyStatement(models.Model):
    """One change of a signing key's status, a signed key-status/v1 statement
    (ledger/key_statement_v1.py) chained to the one before it: the keys' history
    (ledger/key_history.py writes it, in the transaction that changes the key). The key's row
    must agree with its newest statement: the database refuses an insert or a change of status,
    `retired_at` or `compromised_at` of a SigningKey that no statement records, any change of
    its kid or public key, a second `compromised_at`, and a statement that does not follow the
    newest one. Append-only (migrations/0016_key_history)."""

    SITE, MIGRATION = "site", "migration"

    position = models.PositiveBigIntegerField(unique=True)
    kid = models.CharField(max_length=64)
    public_key = models.BinaryField(max_length=32)
    status = models.CharField(max_length=12, choices=SigningKey.STATUSES)
    at = models.DateTimeField()
    retired_at = models.DateTimeField(null=True, blank=True)
    compromised_at = models.DateTimeField(null=True, blank=True)
    previous_hash = models.CharField(max_length=64, unique=True)
    statement_hash = models.CharField(max_length=64, unique=True)
    canonical_bytes = models.BinaryField()
    # [{"kid": ..., "signature": base64}], in the order of the statement's `signed_by`.
    signatures = models.JSONField()
    made_by = models.CharField(
        max_length=16,
        choices=[(SITE, "the site, when the key changed"), (MIGRATION, "migration 0016")],
        default=SITE,
    )

    class Meta:
        indexes = [models.Index(fields=["kid", "position"], name="keystatement_kid")]

    def __str__(self) -> str:
        return f"key statement {self.position}: {self.kid} {self.status}"


class Cosignature(models.Model):
    """A witness's cosignature of a checkpoint (c2sp.org/tlog-cosignature, cosignature/v1):
    the signature line it answered to `manage.py witness` (ledger/witnesses.py), stored only
    once it verified under the key WITNESS_POLICY_FILE gives that witness, and checked again
    whenever it is read. Append-only (migrations/0018_cosignature). `cosigned_at` is the
    witness's own timestamp, inside its signature: the third party's "this tree existed by
    then"; `received_at` is the database's clock."""

    checkpoint = models.ForeignKey(SignedCheckpoint, on_delete=models.PROTECT, related_name="+")
    tree_size = models.BigIntegerField()  # the checkpoint's, for finding the largest witnessed
    witness_key = models.CharField(max_length=255)  # the witness's verifier key string
    line = models.TextField()  # the note signature line, without its newline
    cosigned_at = models.DateTimeField()
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["tree_size", "id"], name="cosignature_size")]

    def __str__(self) -> str:
        return f"cosignature of {self.tree_size} leaves by {self.witness_key.partition('+')[0]}"


class ReviewAssignment(models.Model):
    """Where a receipt stands in the auditors' review queue (review/queue.py): whom it is
    assigned to, and who holds it for review until when (a reservation: a time-limited claim,
    renewable, released when a decision is recorded). Workflow state, not evidence: it changes
    and may be cleared, and nothing rests on it; the decisions stay append-only and signed
    (review/chain.py). One row per receipt, so that a claim is one conditional UPDATE of that
    row and the database decides between two claims at once: one of them changes it. Not
    tenant-scoped: it is read and written by auditors only, who read every tenant."""

    receipt = models.OneToOneField(Receipt, on_delete=models.PROTECT, related_name="assignment")
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    # The reservation: held by `held_by` until `held_until` (the database's clock decides
    # whether it has run out), since `held_since`.
    held_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )
    held_since = models.DateTimeField(null=True, blank=True)
    held_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "review queue"
        verbose_name_plural = "review queue"

    def __str__(self) -> str:
        return f"review queue place of receipt {self.receipt_id}"

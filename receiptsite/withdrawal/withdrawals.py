"""Withdrawal: a receipt is withdrawn, never edited.

A withdrawal is an append-only record (models.Withdrawal), written by the publishing tenant
(`POST /api/receipts/<id>/withdrawal`) or by an auditor (the admin's action). In the same
transaction the receipt's content is erased: its canonical bytes and every column that repeats
the document (the declaration's columns, evidence.COLUMNS, and the request hash) become empty.
What stays is KEPT: the id, the tenant, `recorded_at`, the output hash, the signature and the
keys that made it; the leaf hash and the log position stay in the log's own tables. The
database permits this one change of a receipt row, and only once a withdrawal record for it
exists (migrations/0009_withdrawal installs its triggers with these columns written out, frozen;
tests/db/test_withdrawal.py holds them to KEPT and the model).

The withdrawal is evidence too: in its transaction, under the log's append lock (as ingest
takes it), the site signs its statement and appends it to the withdrawals' chain
(statements.py); without a usable key nothing is withdrawn (503). The database refuses a
withdrawal row whose tenant or receipt public id is not its receipt's (migrations/0015).

Erased means gone from the database's files too, once `manage.py scrubwithdrawn` has run (the
request only erases; README, "Withdrawal", says when to run it):

- SQLite keeps deleted content in free pages and in the write-ahead log. The erasing
  transaction runs with `PRAGMA secure_delete = ON` (freed space and pages are overwritten
  with zeros: cheap, and only right inside the transaction that frees them). The old pages
  stay in the write-ahead log until a checkpoint copies it into the database file;
  scrubwithdrawn's `PRAGMA wal_checkpoint(TRUNCATE)` does that and empties the log. It is not
  done in the request: it must wait for every reader still on an older snapshot, and a
  request must not wait on other requests' readers.
- PostgreSQL keeps the old row version (and its index entries and TOAST chunks) as dead tuples
  until VACUUM. scrubwithdrawn runs `VACUUM (INDEX_CLEANUP ON)` on the receipts table, as the
  role that owns it (a VACUUM cannot run in a request's transaction, and the site's role may
  not run it). `VACUUM FULL` (README) rewrites the table's files, for byte-level certainty.
  pg_wal, WAL archives and backups keep the old content until they are recycled.

The idempotency key is erased too (it may hold personal data), yet it stays spent: a producer's
retry must never publish withdrawn content again. The withdrawal row keeps a keyed hash of the
receipt's tenant and key (idempotency_key_hash: HMAC-SHA-256 under a key derived from
SECRET_KEY for this purpose alone), written with the row, and ingest answers a key whose hash
a withdrawal of the same tenant holds with 410 `withdrawn` (receipts/services.py). Without
SECRET_KEY the hash cannot be recomputed from a guess of the key. Rotating SECRET_KEY changes
every hash a new withdrawal keeps; the old ones are still matched as long as the old secret is
listed in SECRET_KEY_FALLBACKS (as Django's own signatures are), and forgotten once it is
dropped: from then on a retry of a receipt withdrawn before the rotation is stored again.
Withdrawals made before migrations/0014 kept no hash (their keys were erased already), so
nothing can refuse a retry of those.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils.crypto import salted_hmac
from receiptsite_client.redaction import redact_text

from receiptsite.evidence.kinds import OBJECT_MESSAGE, Enum, Errors, Field, Object, Text
from receiptsite.integrity.encoding import b64
from receiptsite.ledger import log, signatures
from receiptsite.ledger.verification import log_part, read_bytes, verification_json
from receiptsite.problems import Problem
from receiptsite.receipts.models import (
    ApiKey,
    LogNode,
    Receipt,
    SigningKey,
    Summary,
    Withdrawal,
    WithdrawalStatement,
    format_timestamp,
)
from receiptsite.receipts.rowsecurity import ERASE_FUNCTION
from receiptsite.withdrawal import statements

REASONS: Final = tuple(value for value, _ in Withdrawal.REASONS)
NOTE_MAX: Final = 500
MAX_BYTES: Final = 16 * 1024  # a withdrawal's body is two short fields

# The body of POST /api/receipts/<id>/withdrawal (validation refuses unknown keys; the
# OpenAPI schema is BODY.schema()).
BODY: Final = Object(
    fields=(
        Field("reason", Enum(REASONS), required=True),
        # Free text: a secret in it is redacted before it is stored.
        Field("note", Text(max_len=NOTE_MAX, free=True)),
    )
)

# The columns of a receipt row a withdrawal keeps. Every other column is erased.
KEPT: Final = (
    "id",
    "public_id",
    "tenant_id",
    "api_key_id",
    "recorded_at",
    "output_hash",
    "signature",
    "signing_key_id",
)


def parse(payload: object) -> dict[str, Any]:
    """The withdrawal body checked against BODY; Problem 422 naming every bad field."""
    errors = Errors()
    if isinstance(payload, dict):
        body = BODY.check_fields(payload, "", errors)
    else:
        errors.add("", OBJECT_MESSAGE)
    if errors.items:
        fields = ", ".join(e["field"] or "(the body)" for e in errors.items)
        raise Problem(
            422,
            "validation-error",
            "The withdrawal is not valid",
            f"{len(errors.items)} field(s) are not valid: {fields}. A withdrawal is "
            f'{{"reason": one of {", ".join(REASONS)}, "note": at most {NOTE_MAX} characters}}.',
            errors=errors.items,
        )
    return body


def erased_value(field: models.Field[Any, Any]) -> Any:
    """What an erased column holds: empty bytes, NULL where the column allows it, else ''."""
    if field.get_internal_type() == "BinaryField":
        return b""
    return None if field.null else ""


def erased_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """The columns of `model` (the receipt model, or its state in a migration) a withdrawal
    erases: all but KEPT."""
    fields = [f for f in model._meta.concrete_fields if f.column not in KEPT]
    missing = set(KEPT) - {f.column for f in model._meta.concrete_fields}
    assert not missing, f"KEPT names columns the receipt does not have: {missing}"
    return fields


def is_erased(receipt: Receipt) -> bool:
    return not receipt.raw_bytes()


# The purpose label of the key a withdrawal's idempotency key hash is made with: a key derived
# from SECRET_KEY for this alone, so that no other signature of the site can stand in for it.
KEY_HASH_PURPOSE: Final = "receiptsite.withdrawal.idempotency-key"


def idempotency_key_hash(tenant_id: int, key: str, secret: str | None = None) -> str:
    """What a withdrawal keeps of its receipt's idempotency key: HMAC-SHA-256, hex, of the
    tenant's id and the key, under a key derived from `secret` (SECRET_KEY by default) and
    KEY_HASH_PURPOSE (the module's docstring says what rotating SECRET_KEY does)."""
    return salted_hmac(
        KEY_HASH_PURPOSE, f"{tenant_id}:{key}", secret=secret, algorithm="sha256"
    ).hexdigest()


def idempotency_key_hashes(tenant_id: int, key: str) -> list[str]:
    """Every hash a withdrawal of `key` may hold: under SECRET_KEY, then under each secret of
    SECRET_KEY_FALLBACKS."""
    secret_keys = [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    return [idempotency_key_hash(tenant_id, key, secret) for secret in secret_keys]


@dataclass(frozen=True)
class Withdrawn:
    """A withdrawn receipt, as the public routes show it."""

    withdrawal: Withdrawal
    leaf_hash: bytes | None  # None: the receipt never had a place in the log

    @property
    def withdrawn_at(self) -> str:
        return format_timestamp(self.withdrawal.withdrawn_at)

    @property
    def statement(self) -> WithdrawalStatement | None:
        """The withdrawal's signed statement (None only if it was removed behind the site's
        back: checkwithdrawals says so)."""
        try:
            return self.withdrawal.statement
        except WithdrawalStatement.DoesNotExist:
            return None


def withdrawn(receipt: Receipt) -> Withdrawn | None:
    """The withdrawal of `receipt` with its kept leaf hash, or None when it is not withdrawn.
    Costs nothing for a receipt with content, one query for an erased one. Bytes erased
    without a withdrawal (behind the site's back: the database refuses it otherwise) are not a
    withdrawal: verification then fails as for any other change."""
    if not is_erased(receipt):
        return None
    # A leaf hash is the log's node at level 0, whose key is the leaf's index (node_key).
    leaf = LogNode.objects.filter(key=OuterRef("receipt__log_entry__index")).values("hash")[:1]
    found = (
        Withdrawal.objects.filter(receipt_id=receipt.pk)
        .select_related("statement__signing_key")
        .annotate(leaf=Subquery(leaf))
        .first()
    )
    if found is None:
        return None
    leaf_hash = getattr(found, "leaf", None)
    return Withdrawn(found, bytes(leaf_hash) if leaf_hash is not None else None)


def answer(withdrawal: Withdrawal) -> dict[str, str]:
    """The 201 answer of a withdrawal (and of its replays)."""
    return {
        "id": str(withdrawal.receipt_public_id),
        "withdrawn_at": format_timestamp(withdrawal.withdrawn_at),
        "reason": withdrawal.reason,
    }


def verification(receipt: Receipt, found: Withdrawn) -> dict[str, Any]:
    """The 410 answer of `GET /api/receipt/<id>/verify` for a withdrawn receipt: the kept
    output hash, signature and leaf hash, the log object of the verification JSON with its
    inclusion proof and the `log_inclusion` check (recomputed now, as the verification JSON's),
    and the withdrawal's signed statement. Whoever holds a copy of the original bytes can check
    it against these: its SHA-256 is the output hash, the signature verifies over it, and its
    leaf hash is the one the proof includes."""
    if found.leaf_hash is None:
        log_json, log_check = log_part(receipt, b"")  # says the receipt has no place in the log
    else:
        log_json, log_check = log_part(receipt, b"", leaf=found.leaf_hash)
    stated = found.statement
    key, signature = _kept_signature(receipt)
    return {
        "receipt_id": receipt.uuid,
        "status": "withdrawn",
        "withdrawn_at": found.withdrawn_at,
        "reason": found.withdrawal.reason,
        "leaf_hash": b64(found.leaf_hash) if found.leaf_hash is not None else None,
        "log": log_json,
        "output_hash": receipt.output_hash,
        "signature": {
            "algorithm": "Ed25519",
            "key_id": key.kid,
            "value": b64(signature),
            "keys_url": settings.SITE_URL + reverse("receipt-keys"),
        },
        "checks": [log_check],
        "statement": statements.served(stated) if stated is not None else None,
    }


def _kept_signature(receipt: Receipt) -> tuple[SigningKey, bytes]:
    """The signature a copy of the erased bytes is checked against: the one made when the
    receipt was stored or, once its key is compromised, the newest one a key not compromised
    appended (ledger/signatures.py; the bytes being gone, the site cannot verify it now)."""
    if receipt.signing_key.status == SigningKey.COMPROMISED:
        for later in signatures.appended(receipt):
            if later.signing_key.status != SigningKey.COMPROMISED:
                return later.signing_key, bytes(later.signature)
    return receipt.signing_key, bytes(receipt.signature)


def summary(receipt: Receipt, withdrawal: Withdrawal) -> dict[str, Any]:
    """The tenant's summary of a withdrawn receipt: the summary's fields, null where they were
    read from the erased document, and `withdrawn_at`."""
    kept: dict[str, Any] = dict(receipt.ingest_answer())
    erased = {name: None for name in Summary.__annotations__ if name not in kept}
    return {**kept, **erased, "withdrawn_at": format_timestamp(withdrawal.withdrawn_at)}


def summaries(receipts: list[Receipt]) -> list[dict[str, Any]]:
    """The summaries of a page of the tenant's list: one more query when some are erased."""
    erased = [r.pk for r in receipts if is_erased(r)]
    found = (
        {w.receipt_id: w for w in Withdrawal.objects.filter(receipt_id__in=erased)}
        if erased
        else {}
    )
    return [summary(r, found[r.pk]) if r.pk in found else shown(r)[0] for r in receipts]


def shown(receipt: Receipt) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The tenant's summary and document of a receipt that is not withdrawn. Stored bytes that
    are no JSON object any more (changed behind the site's back) are shown, never an error, as
    not verifying: the stored columns, null for `subject` (read from the document), `"status":
    "invalid"` (its verification says why) and no document."""
    document = read_bytes(receipt.raw_bytes()).document
    if document is None:
        # An empty document stands in for the unreadable one; `subject` is then null.
        return {**receipt.summary({}), "subject": None, "status": "invalid"}, None
    return dict(receipt.summary(document)), document


def verification_answer(receipt: Receipt) -> tuple[dict[str, Any], int]:
    """What the verify route answers for a receipt (the offline bundle holds the same): the
    verification JSON, or a withdrawn receipt's 410 answer."""
    if (found := withdrawn(receipt)) is not None:
        return verification(receipt, found), 410
    return verification_json(receipt), 200


# --- withdrawing -----------------------------------------------------------------------------


def receipt_withdraw(
    *,
    receipt: Receipt,
    reason: str,
    note: str = "",
    api_key: ApiKey | None = None,
    auditor: User | None = None,
) -> tuple[Withdrawal, bool]:
    """Withdraw `receipt` (by its publisher's `api_key`, or by an `auditor`) and erase its
    content, keeping only a keyed hash of its idempotency key; (the withdrawal, False). A
    receipt already withdrawn is left as it is: (the first withdrawal, True)."""
    assert reason in REASONS and len(note) <= NOTE_MAX
    assert (api_key is None) != (auditor is None)
    with transaction.atomic():
        # The statement is signed and chained under the log's lock, as ingest signs (the key
        # is read under it, and the chain cannot fork).
        log.lock()
        existing = Withdrawal.objects.filter(receipt_id=receipt.pk).first()
        if existing is not None:
            return existing, True
        try:
            with transaction.atomic():
                withdrawal = Withdrawal.objects.create(
                    receipt=receipt,
                    receipt_public_id=receipt.public_id,
                    tenant_id=receipt.tenant_id,
                    reason=reason,
                    note=redact_text(note)[0],
                    withdrawn_by=Withdrawal.PUBLISHER if api_key else Withdrawal.AUDITOR,
                    api_key=api_key,
                    auditor=auditor,
                    idempotency_key_hash=(
                        None
                        if receipt.idempotency_key is None
                        else idempotency_key_hash(receipt.tenant_id, receipt.idempotency_key)
                    ),
                )
        except IntegrityError:  # a concurrent withdrawal committed first
            return Withdrawal.objects.get(receipt_id=receipt.pk), True
        statements.state(withdrawal, _leaf_hash(receipt))
        _erase(receipt)
    return withdrawal, False


def _leaf_hash(receipt: Receipt) -> bytes | None:
    """The receipt's leaf hash in the log (the node at level 0 keyed by its index)."""
    index = receipt.log_index
    if index is None:
        return None
    node = LogNode.objects.filter(key=index).values_list("hash", flat=True).first()
    return None if node is None else bytes(node)


def _erase(receipt: Receipt) -> None:
    """The one UPDATE of a receipt row the database permits (migrations/0009)."""
    if connection.vendor == "postgresql":
        # The site's role holds no UPDATE on receipts: the owner's function erases.
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {ERASE_FUNCTION.partition('(')[0]}(%s)", [receipt.pk])
        return
    if connection.vendor == "sqlite":
        # Overwrite what the UPDATE frees (the old cells, overflow pages and index entries)
        # with zeros, rather than leave it in free space.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA secure_delete = ON")
    erased = {f.attname: erased_value(f) for f in erased_fields(Receipt)}
    Receipt.objects.filter(pk=receipt.pk).update(**erased)


def scrub(wait: float = 10.0) -> str:
    """Take withdrawn receipts' erased content out of the database's files, as far as this
    connection may (the module's docstring); `manage.py scrubwithdrawn` runs it, outside any
    transaction. Returns what was done, in words; raises DatabaseError when it could not
    (SQLite: the write-ahead log still in use by a reader after `wait` seconds)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM (INDEX_CLEANUP ON) {Receipt._meta.db_table}")
        return f"VACUUM (INDEX_CLEANUP ON) {Receipt._meta.db_table} has run."
    if connection.vendor == "sqlite":
        return _checkpoint_sqlite(wait)
    raise DatabaseError(f"no scrubbing for {connection.vendor}")


def _checkpoint_sqlite(wait: float) -> str:
    """Copy the write-ahead log into the database file and truncate it; a reader still on an
    older snapshot makes SQLite answer busy, so try again until `wait` seconds have passed."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        (mode,) = cursor.fetchone()
        if str(mode).lower() != "wal":
            return "The database keeps no write-ahead log: nothing to checkpoint."
        deadline = time.monotonic() + wait
        while True:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (busy, _frames, _done) = cursor.fetchone()
            if not busy:
                return "The write-ahead log is copied into the database file and emptied."
            if time.monotonic() >= deadline:
                raise DatabaseError(
                    "the write-ahead log is still in use by a reader; run the command again"
                )
            time.sleep(0.05)  # a reader on an older snapshot: poll until it has moved on

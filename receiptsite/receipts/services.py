"""Ingest: storing receipts, the one write path of the receipts table. One flow for a receipt:

validate and normalise (document) -> resolve links -> redact and truncate (redact) ->
canonical bytes, hash, signature (integrity) -> one transaction that stores the receipt and
appends its log leaf.
"""

from __future__ import annotations

import contextvars
import copy
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.conf import settings
from django.core.signals import request_finished
from django.db import OperationalError, transaction
from django.dispatch import receiver
from django.utils import timezone

from receiptsite import metrics
from receiptsite.evidence.declaration import columns_of
from receiptsite.evidence.document import (
    DocumentInvalid,
    Draft,
    LinkRefs,
    evidence_document,
    producer_with_links,
    validate,
)
from receiptsite.evidence.redaction import redact
from receiptsite.integrity.canonical import canonical_bytes, sha256_hex
from receiptsite.ledger import keyring, log
from receiptsite.lib.outer import once_committed
from receiptsite.receipts.models import (
    ApiKey,
    LogEntry,
    Receipt,
    format_timestamp,
)
from receiptsite.withdrawal import withdrawals as withdrawal


class IdempotencyKeyReused(Exception):
    """The key names a receipt that was stored from a different request."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(receipt.uuid)
        self.receipt = receipt


class IdempotencyKeyWithdrawn(Exception):
    """The key named a receipt that was withdrawn since (its content and key erased): the key
    stays spent, whatever the request, so that a retry never publishes withdrawn content."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(receipt.uuid)
        self.receipt = receipt


# Why an item is not stored: what a single POST raises, and a batch answers in its place.
Refusal = DocumentInvalid | IdempotencyKeyReused | IdempotencyKeyWithdrawn


@dataclass(frozen=True)
class Ingested:
    receipt: Receipt
    replayed: bool


BeforeCommit = Callable[[list[Ingested]], None]


def _answer_to_retry(
    existing: Receipt, idempotency_key: str, request_hash: str
) -> Ingested | Refusal:
    """What a request with `idempotency_key` gets when `existing` is stored (or was withdrawn)
    under it: the receipt replayed, or why not."""
    if existing.idempotency_key != idempotency_key:  # erased: found by its hash
        return IdempotencyKeyWithdrawn(existing)
    if existing.request_hash != request_hash:
        return IdempotencyKeyReused(existing)
    return Ingested(receipt=existing, replayed=True)


@dataclass
class _Batch:
    """The receipts a batch has made so far, not yet inserted: later items may link to them
    or replay them, as if each earlier item had been posted alone before."""

    by_key: dict[str, Receipt] = field(default_factory=dict)
    by_id: set[str] = field(default_factory=set)
    stored: list[tuple[Receipt, bytes]] = field(default_factory=list)

    def add(self, receipt: Receipt, data: bytes) -> None:
        self.stored.append((receipt, data))
        self.by_id.add(receipt.uuid)
        if receipt.idempotency_key is not None:
            self.by_key[receipt.idempotency_key] = receipt


@dataclass(frozen=True)
class _Named:
    """This tenant's stored receipts that some requests' links name: their ids, and the id
    stored under each idempotency key named."""

    ids: set[str] = field(default_factory=set)
    by_key: dict[str, str] = field(default_factory=dict)


# Ids and keys per look-up: SQLite takes at most 32,766 parameters in one statement, and a
# batch of BATCH_MAX_ITEMS items may name 100 children each.
_LOOKUP_CHUNK = 10_000


def _refs(refs: LinkRefs) -> tuple[list[str], list[str]]:
    """The receipt ids and the idempotency keys a document's links name."""
    ids = [i for i in [refs.parent_receipt_id, *refs.child_receipt_ids] if i]
    keys = [k for k in [refs.parent_idempotency_key, *refs.child_idempotency_keys] if k]
    return ids, keys


def _named(api_key: ApiKey, drafts: Sequence[Draft]) -> _Named:
    """The receipts the links of `drafts` name, in one query (a chunk of ids and keys each).
    A receipt of another tenant is found exactly like one that does not exist: not at all."""
    ids: set[str] = set()
    keys: set[str] = set()
    for draft in drafts:
        if draft.links is not None:
            named_ids, named_keys = _refs(draft.links)
            ids.update(named_ids)
            keys.update(named_keys)
    named = _Named()
    wanted_ids, wanted_keys = sorted(ids), sorted(keys)
    while wanted_ids or wanted_keys:
        chunk_ids, wanted_ids = wanted_ids[:_LOOKUP_CHUNK], wanted_ids[_LOOKUP_CHUNK:]
        chunk_keys, wanted_keys = wanted_keys[:_LOOKUP_CHUNK], wanted_keys[_LOOKUP_CHUNK:]
        found = Receipt.objects.named(api_key.tenant_id, ids=chunk_ids, keys=chunk_keys)
        for public_id, key in found.values_list("public_id", "idempotency_key"):
            named.ids.add(str(public_id))
            if key is not None:
                named.by_key[key] = str(public_id)
    return named


def _resolve_links(
    refs: LinkRefs, named: _Named, earlier: _Batch | None = None
) -> tuple[str | None, list[str]]:
    """Map ids and idempotency keys to ids of this tenant's receipts: the stored ones `named`
    found, and the ones made by `earlier` items of the same batch. DocumentInvalid for one
    that names no receipt of this tenant."""
    ids, keys = _refs(refs)
    by_id = named.ids
    by_key = named.by_key
    if earlier is not None:
        by_id = by_id | (earlier.by_id & set(ids))
        by_key = {**by_key, **{k: earlier.by_key[k].uuid for k in keys if k in earlier.by_key}}

    errors: list[dict[str, str]] = []
    missing = "names no receipt of this tenant"
    parent: str | None = None
    if refs.parent_receipt_id:
        parent = refs.parent_receipt_id
        if parent not in by_id:
            errors.append({"field": "/links/parent_receipt_id", "message": missing})
    elif refs.parent_idempotency_key:
        parent = by_key.get(refs.parent_idempotency_key)
        if parent is None:
            errors.append({"field": "/links/parent_idempotency_key", "message": missing})

    children: list[str] = []
    for i, child in enumerate(refs.child_receipt_ids):
        if child not in by_id:
            errors.append({"field": f"/links/child_receipt_ids/{i}", "message": missing})
        children.append(child)
    for i, key in enumerate(refs.child_idempotency_keys):
        pointer = f"/links/child_idempotency_keys/{i}"
        resolved = by_key.get(key)
        if resolved is None:
            errors.append({"field": pointer, "message": missing})
        elif resolved in children:
            errors.append({"field": pointer, "message": "names a child that is already linked"})
        else:
            children.append(resolved)
    if errors:
        raise DocumentInvalid(errors)
    return parent, children


def _prepared(
    draft: Draft, named: _Named, earlier: _Batch | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A validated draft's producer part with its links resolved, redacted; and the
    redactions. Raises DocumentInvalid for a link that names no receipt."""
    if draft.links is not None:
        parent, children = _resolve_links(draft.links, named, earlier)
        producer = producer_with_links(draft, parent, children)
    else:
        producer = draft.producer
    return redact(producer, limit=settings.TEXT_LIMIT)


def prepare(api_key: ApiKey, payload: object) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Everything before the transaction: the producer's part, redacted, and the redactions.
    Raises DocumentInvalid."""
    draft = validate(payload)
    named = _named(api_key, [draft]) if draft.links is not None else _Named()
    return _prepared(draft, named)


def receipt_ingest(
    *, api_key: ApiKey, payload: object, before_commit: BeforeCommit | None = None
) -> Ingested:
    """Store one receipt, or replay the one its idempotency key already names. A new receipt
    is passed to `before_commit` last thing in the storing transaction (the API writes its
    audit entry there).

    The receipt is made and signed before the transaction (validation, links, redaction, the
    two RFC 8785 serialisations, the signature), so that the append lock is held only to
    look up the idempotency key, insert, append and sign the checkpoint. Posts of one API key
    that wait for the lock at once in this process are stored together (group commit, below).

    Raises DocumentInvalid (422), IdempotencyKeyReused (422) or IdempotencyKeyWithdrawn
    (410); log.LogRollback or keyring.CannotSign (503) when the site must not sign, before
    anything is stored.
    """
    producer, redactions = prepare(api_key, payload)
    request_hash = sha256_hex(canonical_bytes(producer))
    early = keyring.recorded()
    idempotency_key = producer.get("idempotency_key")
    post = _Post(
        api_key=api_key,
        producer=producer,
        redactions=redactions,
        request_hash=request_hash,
        idempotency_key=idempotency_key,
        hashes=withdrawal.idempotency_key_hashes(api_key.tenant_id, idempotency_key)
        if idempotency_key is not None
        else [],
        early=early,
        made=_new_receipt(api_key, producer, redactions, request_hash, early) if early else None,
        before_commit=before_commit,
        context=contextvars.copy_context(),
    )
    group, leading = _join(post)
    if leading:
        _store(group)
    else:
        group.wait()
    if not isinstance(post.outcome, Ingested):
        raise cast(Exception, post.outcome)
    return post.outcome


# --- group commit ---------------------------------------------------------------------------
#
# Single posts of one API key that arrive while this process is storing (or waiting for the
# append lock) are stored together: the first to come (the group's leader) takes the lock on
# its own connection, in its own storing transaction, for every post that joined its group
# before it got the lock, up to GROUP_MAX; the others wait. One transaction, one insert, one
# commit (one fsync) and one signed checkpoint for all of them, as if each had been posted
# alone after the earlier ones, in the order they joined: an idempotency key two of them
# share stores one receipt. Each post's audit entry is written in that transaction, by its
# own before_commit run in its own request's context (its request id), and each waits for
# the commit, so that no 201 is answered before the checkpoint that includes it is stored.
# If the transaction fails, every post of the group gets its error, and nothing is stored.
#
# The lock is the database's (log.lock_for_append), so what holds for one process holds
# across workers and hosts: a group is one storing transaction among the others. Grouping
# needs threads in a process (gunicorn's gthread workers); a sync worker serves one request
# at a time, and each of its groups is one post. One API key: its tenant is the one the
# leader's transaction is scoped to (PostgreSQL row-level security), and the audit entries
# name it.

GROUP_MAX = 256  # posts per storing transaction; Tessera's default batch is 256 entries too
_GROUP_WAIT = 60.0  # seconds a post waits for its group's commit (gunicorn kills at 30)


@dataclass(eq=False)
class _Post:
    """A single post, made (and signed, when this process has recorded its key) before the
    lock; its outcome once its group is stored."""

    api_key: ApiKey
    producer: dict[str, Any]
    redactions: list[dict[str, Any]]
    request_hash: str
    idempotency_key: str | None
    hashes: list[str]  # the hashes a withdrawal keeps of the idempotency key
    early: keyring.ActiveKey | None
    made: tuple[Receipt, bytes] | None
    before_commit: BeforeCommit | None
    context: contextvars.Context
    outcome: Ingested | Refusal | None = None


class _Group:
    def __init__(self, api_key_id: int) -> None:
        self.api_key_id = api_key_id
        self.posts: list[_Post] = []
        self.error: BaseException | None = None
        self._settled = threading.Event()

    def settle(self, error: BaseException | None = None) -> None:
        """The group's transaction committed (or, with `error`, did not): wake its posts."""
        if not self._settled.is_set():
            self.error = error
            self._settled.set()

    @property
    def settled(self) -> bool:
        return self._settled.is_set()

    def wait(self) -> None:
        if not self._settled.wait(_GROUP_WAIT):
            raise OperationalError("the transaction storing this receipt did not end in time")
        if self.error is not None:
            raise copy.copy(self.error)  # each thread raises (and tracebacks) its own


_forming: dict[int, _Group] = {}  # by API key: the group whose leader has not the lock yet
_forming_lock = threading.Lock()
_awaiting_commit = threading.local()  # the groups this thread leads, stored, not committed


def _join(post: _Post) -> tuple[_Group, bool]:
    """The group `post` joins, and whether it leads it."""
    with _forming_lock:
        group = _forming.get(post.api_key.pk)
        if group is None or len(group.posts) >= GROUP_MAX:
            group = _forming[post.api_key.pk] = _Group(post.api_key.pk)
        group.posts.append(post)
        return group, len(group.posts) == 1


def _close(group: _Group) -> None:
    """No post joins `group` from now on."""
    with _forming_lock:
        if _forming.get(group.api_key_id) is group:
            del _forming[group.api_key_id]


def _store(group: _Group) -> None:
    """The leader's part: store every post of `group`, in one transaction."""
    stored: list[tuple[Receipt, bytes]] = []
    try:
        with transaction.atomic():
            # Appends are serialised; so, therefore, are the idempotency look-ups and the
            # inserts: concurrent requests with one key store exactly one receipt.
            current = log.lock_for_append()
            _close(group)
            posts = group.posts
            key = keyring.active_key()  # the key lock_for_append approved
            tenant_id = posts[0].api_key.tenant_id
            keyed = _stored_under(
                tenant_id, {digest: p.idempotency_key for p in posts if p.idempotency_key
                            for digest in p.hashes}
            )  # fmt: skip
            for post in posts:
                existing = (
                    keyed.get(post.idempotency_key) if post.idempotency_key is not None else None
                )
                if existing is not None:
                    post.outcome = _answer_to_retry(
                        existing, cast(str, post.idempotency_key), post.request_hash
                    )
                    continue
                if post.made is None or _stale_key(post.early, key):
                    # Not made yet (this process had not recorded its key), or signed by a key
                    # found compromised or retired while the post waited for the lock: made
                    # again, now, so that nothing is stored under a key the lock did not
                    # approve.
                    post.made = _new_receipt(
                        post.api_key, post.producer, post.redactions, post.request_hash, key
                    )
                receipt = post.made[0]
                stored.append(post.made)
                if post.idempotency_key is not None:
                    keyed[post.idempotency_key] = receipt  # a later post with it replays it
                post.outcome = Ingested(receipt=receipt, replayed=False)
            if not stored:
                group.settle()
                return
            Receipt.objects.insert([receipt for receipt, _ in stored])
            logged = log.append_many(stored, current)  # and its signed checkpoint
            for post in posts:
                outcome = post.outcome
                if isinstance(outcome, Ingested) and not outcome.replayed and post.before_commit:
                    post.context.run(post.before_commit, [outcome])
    except BaseException as error:
        _close(group)
        group.settle(error)
        raise
    _after_storing(stored, logged)
    once_committed(group.settle)
    if not group.settled:  # an outer transaction is still to commit (or roll back)
        _awaiting_commit.__dict__.setdefault("groups", []).append(group)


@receiver(request_finished)
def _settle_uncommitted(**kwargs: Any) -> None:
    """The groups this thread stored in a transaction that has ended, at the end of the
    request: any not settled by their commit were rolled back with it."""
    for group in _awaiting_commit.__dict__.pop("groups", []):
        group.settle(OperationalError("the transaction storing this receipt rolled back"))


def _new_receipt(
    api_key: ApiKey,
    producer: dict[str, Any],
    redactions: list[dict[str, Any]],
    request_hash: str,
    key: keyring.ActiveKey | None = None,
) -> tuple[Receipt, bytes]:
    """The receipt of a prepared producer's part, signed (by `key`, default the active key)
    and not yet saved; and its bytes."""
    public_id = uuid.uuid4()
    recorded_at = timezone.now()
    tenant = api_key.tenant
    document = evidence_document(
        producer,
        receipt_id=str(public_id),
        tenant_slug=tenant.slug,
        tenant_name=tenant.name,
        recorded_at=format_timestamp(recorded_at),
        key_prefix=api_key.prefix,
        redactions=redactions,
    )
    data = canonical_bytes(document)
    signature, signing_key = keyring.sign(data, key)
    receipt = Receipt(
        public_id=public_id,
        tenant=tenant,
        api_key=api_key,
        recorded_at=recorded_at,
        **columns_of(producer),
        request_hash=request_hash,
        canonical_bytes=data,
        output_hash=sha256_hex(data),
        signature=signature,
        signing_key=signing_key,
    )
    return receipt, data


def _after_storing(stored: Sequence[tuple[Receipt, bytes]], logged: log.Head) -> None:
    """What follows a storing transaction (a group's or a batch's): the count (made once the
    outermost transaction commits), the tree remembered outside the database (now committed),
    and each receipt's log entry filled in, so that its answer needs no further query."""
    metrics.count_stored(len(stored))
    log.remember(logged)
    first = logged.size - len(stored)
    for offset, (receipt, _) in enumerate(stored):
        receipt.log_entry = LogEntry(index=first + offset, receipt=receipt)
        receipt.__dict__["log_index"] = first + offset


def _stored_under(tenant_id: int, hashes: dict[str, str]) -> dict[str, Receipt]:
    """The tenant's receipts (with their log entries) stored under the keys `hashes` maps to,
    or withdrawn under them (found by the hash their withdrawal keeps, `hashes` mapping each
    to its key), by key, in one query; the newest receipt where a key has two."""
    found = Receipt.objects.stored_under(tenant_id, sorted(set(hashes.values())), list(hashes))
    by_key: dict[str, Receipt] = {}
    for receipt, withdrawn_under in found:
        key = receipt.idempotency_key or hashes.get(withdrawn_under or "")
        if key is not None:
            by_key[key] = receipt
    return by_key


def receipts_ingest(
    *, api_key: ApiKey, payloads: Sequence[object], before_commit: BeforeCommit | None = None
) -> list[Ingested | Refusal]:
    """Store a batch: each payload processed in order as if it were posted alone (stored,
    replayed, or refused with the exception receipt_ingest would raise), in one transaction
    that takes the log's lock once, inserts the new receipts together, appends their leaves
    and signs one checkpoint, remembered once.

    Everything per item is done before that transaction: validation, the links (of every item
    in one query), redaction, the two RFC 8785 serialisations and the signature; and the
    receipts already stored under the batch's idempotency keys are looked up then too. Under
    the lock they are looked up again: when a request stored or withdrew under one of those
    keys meanwhile (or the key the lock approves is not the one the items were signed with),
    the items are decided and made again, under the lock, from what is stored now.

    When the batch stores receipts, its stored and replayed items are passed to
    `before_commit` last thing in that transaction.

    Raises what receipt_ingest raises before storing anything (log.LogRollback,
    keyring.CannotSign) when the site must not sign: then nothing of the batch is stored.
    """
    tenant = api_key.tenant
    drafts: list[Draft | DocumentInvalid] = []
    for payload in payloads:
        try:
            drafts.append(validate(payload))
        except DocumentInvalid as error:
            drafts.append(error)
    named = _named(api_key, [draft for draft in drafts if isinstance(draft, Draft)])
    spent = {item.get("idempotency_key") for item in payloads if isinstance(item, dict)}
    hashes = {
        digest: key
        for key in spent
        if isinstance(key, str)
        for digest in withdrawal.idempotency_key_hashes(tenant.pk, key)
    }
    early = keyring.recorded()
    keyed = _stored_under(tenant.pk, hashes)
    decided = _decide(api_key, drafts, named, keyed, early) if early is not None else None
    with transaction.atomic():
        current = log.lock_for_append()
        key = keyring.active_key()  # the key lock_for_append approved
        now = _stored_under(tenant.pk, hashes)
        stale = _stale_key(early, key) or _state(now) != _state(keyed)
        if decided is None or stale:
            # (The links looked up again too: they may name a receipt stored meanwhile.)
            named = _named(api_key, [draft for draft in drafts if isinstance(draft, Draft)])
            decided = _decide(api_key, drafts, named, now, key)
        results, batch = decided
        if not batch.stored:
            return results
        Receipt.objects.insert([receipt for receipt, _ in batch.stored])
        logged = log.append_many(batch.stored, current)
        if before_commit is not None:
            before_commit([outcome for outcome in results if isinstance(outcome, Ingested)])
    _after_storing(batch.stored, logged)
    return results


def _stale_key(early: keyring.ActiveKey | None, key: keyring.ActiveKey) -> bool:
    """Whether what was signed before the lock, by `early` (None: nothing was), must be made
    again by `key`, the key the lock approved."""
    return early is None or early.kid != key.kid


def _state(keyed: dict[str, Receipt]) -> dict[str, tuple[int, str | None]]:
    """What the batch's decisions rest on: the receipt stored (or withdrawn) under each key."""
    return {key: (receipt.pk, receipt.idempotency_key) for key, receipt in keyed.items()}


def _decide(
    api_key: ApiKey, drafts: Sequence[Draft | DocumentInvalid], named: _Named,
    keyed: dict[str, Receipt], key: keyring.ActiveKey,
) -> tuple[list[Ingested | Refusal], _Batch]:  # fmt: skip
    """Each item of a batch, in order, as if posted alone after the earlier ones, given the
    receipts stored under its keys (`keyed`): refused, replayed, or made and signed by `key`
    (not yet saved: in the _Batch)."""
    results: list[Ingested | Refusal] = []
    batch = _Batch()
    for draft in drafts:
        if isinstance(draft, DocumentInvalid):
            results.append(draft)
            continue
        try:
            producer, redactions = _prepared(draft, named, batch)
        except DocumentInvalid as error:
            results.append(error)
            continue
        request_hash = sha256_hex(canonical_bytes(producer))
        idempotency_key: str | None = producer.get("idempotency_key")
        if idempotency_key is not None:
            existing = batch.by_key.get(idempotency_key) or keyed.get(idempotency_key)
            if existing is not None:
                results.append(_answer_to_retry(existing, idempotency_key, request_hash))
                continue
        receipt, data = _new_receipt(api_key, producer, redactions, request_hash, key)
        batch.add(receipt, data)
        results.append(Ingested(receipt=receipt, replayed=False))
    return results, batch

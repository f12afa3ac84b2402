"""The auditors' review queue: the receipts awaiting a decision, who each is assigned to, and
who holds it for review until when.

- **Awaiting a decision**: a receipt with no decision yet, or whose latest decision (the last
  one recorded) is `needs_follow_up`. A withdrawn receipt is not awaiting anything: its
  content is erased, and the withdrawal is its own signed record.
- **Assignment**: whom a receipt is for (any auditor may assign it, to any auditor, or to
  nobody). It routes work; it does not stop anyone else.
- **Reservation** (a hold): an auditor claims a receipt before reviewing it, and holds it for
  HOLD (30 minutes), renewable by its holder, released by them or by a decision recorded on it,
  and run out by the database's clock. While it holds, the queue shows the other auditors who
  holds it and until when, and another auditor's decision on it is refused
  (services.decision_record).

Two claims at once have one winner, and the database decides it: the receipt's row is made at
most once (its receipt is unique), and a claim is one conditional UPDATE of it ("if nobody
holds it, or the hold ran out, or I hold it") whose count of changed rows says whether it won.
PostgreSQL makes the second UPDATE wait on the first one's row lock and evaluates its condition
again against the committed row; SQLite runs one writing transaction at a time.

All of it is workflow state (models.ReviewAssignment), not evidence: it changes, and nothing
rests on it. The decisions stay append-only and signed (review/chain.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Now
from django.utils import timezone

from receiptsite.receipts.models import Receipt, ReviewAssignment, ReviewDecision
from receiptsite.review import states

HOLD = timedelta(minutes=30)
NEEDS_FOLLOW_UP = "needs_follow_up"
# A page of the queue, and how many receipts one page may verify to fill it when the queue is
# filtered by verification state (the state is computed for each, never stored).
PAGE = 50
SCAN = 200


def awaiting() -> QuerySet[Receipt]:
    """The receipts awaiting a decision, oldest first, each with what its row in the queue
    shows: its tenant, signing key and log entry (to verify it), its assignment and holder,
    and its latest decision's conclusion and follow-up note."""
    latest = ReviewDecision.objects.filter(receipt=OuterRef("pk")).order_by("-id")
    return (
        Receipt.objects.select_related(
            *states.STATE_RELATED,
            "assignment__assigned_to",
            "assignment__held_by",
        )
        .annotate(
            latest_conclusion=Subquery(latest.values("conclusion")[:1]),
            latest_follow_up=Subquery(latest.values("follow_up")[:1]),
        )
        .filter(Q(latest_conclusion__isnull=True) | Q(latest_conclusion=NEEDS_FOLLOW_UP))
        .filter(withdrawal__isnull=True)
        .order_by("id")
    )


@dataclass(frozen=True)
class Filters:
    """The queue's filters; empty strings filter nothing."""

    tenant: str = ""  # a tenant's slug
    workflow: str = ""  # a workflow id, exactly
    outcome: str = ""  # one of evidence.OUTCOMES, or "none" (a start receipt has none)
    state: str = ""  # states.VALID, INVALID or PENDING
    assigned: str = ""  # "me" or "nobody"


def filtered(found: QuerySet[Receipt], filters: Filters, auditor: User) -> QuerySet[Receipt]:
    """`found` filtered by everything but the verification state (SQL)."""
    if filters.tenant:
        found = found.filter(tenant__slug=filters.tenant)
    if filters.workflow:
        found = found.filter(workflow_id=filters.workflow)
    if filters.outcome == "none":
        found = found.filter(outcome__isnull=True)
    elif filters.outcome:
        found = found.filter(outcome=filters.outcome)
    if filters.assigned == "me":
        found = found.filter(assignment__assigned_to=auditor)
    elif filters.assigned == "nobody":
        found = found.filter(
            Q(assignment__isnull=True) | Q(assignment__assigned_to__isnull=True)
        )
    return found


@dataclass
class Page:
    """One page of the queue: its rows with their states, the count the SQL filters leave, how
    many receipts were verified to fill it, and where the next page starts (None: the end)."""

    rows: list[tuple[Receipt, states.State]]
    count: int
    scanned: int
    next_after: int | None


def _chunks(found: QuerySet[Receipt], after: int, size: int) -> Iterator[list[Receipt]]:
    while True:
        chunk = list(found.filter(id__gt=after)[:size])
        if not chunk:
            return
        yield chunk
        after = chunk[-1].pk


def page(found: QuerySet[Receipt], *, state: str = "", after: int = 0) -> Page:
    """The page of `found` (filtered()) after the receipt `after`, each receipt verified now.
    With a state to filter by, receipts are verified in queue order until PAGE match or SCAN
    were verified; the next page goes on from the last one verified."""
    count = found.count()
    rows: list[tuple[Receipt, states.State]] = []
    if not state:
        shown = list(found.filter(id__gt=after)[: PAGE + 1])
        more = len(shown) > PAGE
        rows = [(receipt, states.state_of(receipt)) for receipt in shown[:PAGE]]
        return Page(rows, count, len(rows), rows[-1][0].pk if more and rows else None)
    scanned, last = 0, after
    for chunk in _chunks(found, after, PAGE):
        for receipt in chunk:
            scanned, last = scanned + 1, receipt.pk
            found_state = states.state_of(receipt)
            if found_state.name == state:
                rows.append((receipt, found_state))
            if len(rows) == PAGE or scanned == SCAN:
                more = found.filter(id__gt=last).exists()
                return Page(rows, count, scanned, last if more else None)
    return Page(rows, count, scanned, None)


# --- assignment and reservation -----------------------------------------------------------


def when(moment: datetime) -> str:
    """A time as the desk says it: to the minute, in UTC."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True)
class Hold:
    """Who holds a receipt for review, until when (the row as the database left it)."""

    by: User | None
    until: datetime | None

    def held(self, now: datetime | None = None) -> bool:
        return self.by is not None and self.until is not None and self.until > (
            now or timezone.now()
        )

    def by_other_than(self, auditor: User, now: datetime | None = None) -> bool:
        return self.held(now) and self.by is not None and self.by.pk != auditor.pk


@dataclass(frozen=True)
class Claimed:
    """What a claim did: `won` when the caller holds the receipt now; `hold` either way."""

    won: bool
    hold: Hold


def _row(receipt: Receipt) -> ReviewAssignment:
    """The receipt's row in the queue, made if it has none (once: the receipt is unique, and
    get_or_create reads the other's row when two make it at once)."""
    row, _ = ReviewAssignment.objects.get_or_create(receipt=receipt)
    return row


def hold_of(receipt: Receipt, *, lock: bool = False) -> Hold:
    """Who holds the receipt now (nobody when it has no row); `lock`: inside a transaction,
    lock the row until it ends (a decision being recorded: services.decision_record)."""
    rows = ReviewAssignment.objects.filter(receipt=receipt).select_related("held_by")
    row = (rows.select_for_update(of=("self",)) if lock else rows).first()
    if row is None:
        return Hold(None, None)
    return Hold(row.held_by, row.held_until)


def claim(receipt: Receipt, auditor: User, *, hold: timedelta = HOLD) -> Claimed:
    """Claim (or, for its holder, renew) the receipt's reservation for `hold` from now, by
    the database's clock. One conditional UPDATE decides it. A receipt nobody is assigned to
    is assigned to its first claimer."""
    with transaction.atomic():
        row = _row(receipt)
        free = Q(held_by__isnull=True) | Q(held_until__isnull=True) | Q(held_until__lte=Now())
        until = ExpressionWrapper(Now() + hold, output_field=DateTimeField())
        mine = ReviewAssignment.objects.filter(pk=row.pk, held_by=auditor)
        # The holder renews (keeping held_since); anyone else takes it only if it is free.
        won = mine.filter(held_until__gt=Now()).update(held_until=until) == 1 or (
            ReviewAssignment.objects.filter(pk=row.pk)
            .filter(free)
            .update(held_by=auditor, held_since=Now(), held_until=until)
            == 1
        )
        if won:
            ReviewAssignment.objects.filter(pk=row.pk, assigned_to__isnull=True).update(
                assigned_to=auditor, assigned_by=auditor, assigned_at=Now()
            )
        return Claimed(won, hold_of(receipt))


def release(receipt: Receipt, auditor: User) -> bool:
    """Give up the auditor's own hold on the receipt; whether they held it."""
    return (
        ReviewAssignment.objects.filter(receipt=receipt, held_by=auditor).update(
            held_by=None, held_since=None, held_until=None
        )
        == 1
    )


def release_on_decision(receipt: Receipt) -> None:
    """A decision was recorded on the receipt: its review is over, whoever held it."""
    ReviewAssignment.objects.filter(receipt=receipt, held_by__isnull=False).update(
        held_by=None, held_since=None, held_until=None
    )


def assign(receipts: list[Receipt], to: User | None, *, by: User) -> int:
    """Assign the receipts to the auditor `to` (None: to nobody); how many were assigned."""
    with transaction.atomic():
        for receipt in receipts:
            _row(receipt)
        return ReviewAssignment.objects.filter(receipt__in=receipts).update(
            assigned_to=to, assigned_by=by, assigned_at=Now()
        )

"""The log's witnesses: their cosignatures, stored and read, and the checkpoints they make
witnessed (SPEC, "Witnesses"; docs/log.md).

WITNESS_POLICY_FILE (a c2sp.org/tlog-policy file, read once at start into
settings.WITNESS_POLICY) names the witnesses, their keys and the quorum. `manage.py witness`
(ledger/management/commands/witness.py) submits checkpoints to them and hands each answer to
store(), which keeps a cosignature only once it verifies under the policy's key for that
witness. Reads never write, and never take a stored row's word: every cosignature is verified
again (memoised per line and checkpoint, which are immutable), and counts only while the policy
still names its witness with that key.

A checkpoint is *witnessed* when the cosignatures of its tree meet the policy's quorum. What
readers are given (the verification JSON's `log.witnessed`, the bundle's tlog proof,
`/api/log/witnessed-checkpoint`) is the log's signed note with those cosignature lines after
its own signature line, as c2sp.org/tlog-proof carries them; one line per witness, its
earliest (the oldest time it vouches for).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from receiptsite.integrity import cosignature, merkle, note
from receiptsite.integrity.policy import Policy, Witness
from receiptsite.receipts.models import (
    Checkpoint,
    Cosignature,
    SignedCheckpoint,
    SigningKey,
    format_timestamp,
)

logger = logging.getLogger(__name__)

# A witness's clock may run a little ahead of ours; further ahead is no time to rely on.
FUTURE_TOLERANCE = 300  # seconds
# Sizes read per query when looking for the largest witnessed tree (usually the first is).
WINDOW = 16


@dataclass(frozen=True)
class Cosigned:
    """One counted cosignature: the witness (its key name) and when it cosigned."""

    name: str
    timestamp: int
    line: str

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp, UTC)


@dataclass(frozen=True)
class Witnessed:
    """A checkpoint that meets the quorum, as readers are given it."""

    size: int
    note: str  # the log's signed note, then the counted cosignature lines
    cosigners: tuple[Cosigned, ...]
    checkpoint_id: int  # the SignedCheckpoint whose log signature `note` carries


def policy() -> Policy | None:
    return settings.WITNESS_POLICY


def body_of(signed_note: str) -> str:
    """A signed note's body: its text up to the blank line before the signatures."""
    return signed_note[: signed_note.rfind("\n\n") + 1]


@functools.lru_cache(maxsize=4096)
def _verifies(line: str, body: str, vkey: str) -> int | None:
    """The timestamp of `line` when it is the valid cosignature of `body` by `vkey`."""
    read = cosignature.parse_line(line)
    if read is None:
        return None
    key = cosignature.witness_key(vkey)
    return read.timestamp if cosignature.verify(read, key, body) else None


# --- storing (the `witness` command) ----------------------------------------------------------


def store(checkpoint: SignedCheckpoint, witness: Witness, lines: Sequence[str]) -> list[str]:
    """Keep the cosignatures among `lines` (a witness's answer to `checkpoint`) that verify
    under `witness`'s key with a sane time; return the problems with the others of its key
    (lines of other keys are ignored, as tlog-witness asks). Append-only rows."""
    body = body_of(checkpoint.note)
    now = timezone.now().timestamp()
    kept: list[Cosignature] = []
    problems: list[str] = []
    for line in lines:
        read = cosignature.parse_line(line)
        if read is None or not cosignature.is_by(read, witness.key):
            continue
        timestamp = _verifies(line, body, witness.key.vkey)
        if timestamp is None:
            problems.append("a cosignature line of its key does not verify")
        elif timestamp > now + FUTURE_TOLERANCE:
            problems.append(f"its cosignature is dated {timestamp}, in the future")
        else:
            kept.append(
                Cosignature(
                    checkpoint=checkpoint,
                    tree_size=checkpoint.tree_size,
                    witness_key=witness.key.vkey,
                    line=line,
                    cosigned_at=datetime.fromtimestamp(timestamp, UTC),
                )
            )
    if not kept and not problems:
        problems.append("its answer holds no cosignature by its key")
    Cosignature.objects.bulk_create(kept)
    return problems


def _of_log(origin: str) -> Any:
    """The cosignatures of checkpoints of the log `origin` (a log continued under a new
    origin, `continuelog`, is a new log to its witnesses)."""
    return Cosignature.objects.filter(checkpoint__note__startswith=f"{origin}\n")


def cosigned_size(witness: Witness, origin: str) -> int | None:
    """The largest tree of the log `origin` this site holds a cosignature of by `witness`'s
    key (what the witness last told us it holds, across restarts of the command)."""
    found = (
        _of_log(origin)
        .filter(witness_key=witness.key.vkey)
        .order_by("-tree_size")
        .values_list("tree_size", flat=True)
        .first()
    )
    return found


def has_cosigned(witness: Witness, size: int, origin: str) -> bool:
    return _of_log(origin).filter(witness_key=witness.key.vkey, tree_size=size).exists()


# --- reading ----------------------------------------------------------------------------------

_TABLE = Cosignature._meta.db_table
_SIGNED = SignedCheckpoint._meta.db_table
_KEY = SigningKey._meta.db_table
_HEAD = Checkpoint._meta.db_table
# The cosignatures of the WINDOW largest cosigned sizes below a bound, with the note each cosigned,
# whether its key disowns it, the stored tree's root at its size, and the newest note the log signed
# (whose origin is the log's: cosignatures of a log since continued under another origin count for
# nothing here): one round trip. A cosignature signs the checkpoint's body, not the log's signature
# line: it stands beside any note of that tree the log signed (tlog-witness: a client "can move the
# valid signatures to its own view of the checkpoint"). Readers get the newest note of the tree by a
# key that still counts (after a key compromise, the new key's note of the same tree), `latest`
# here.
_WINDOW = (
    f"SELECT c.tree_size, c.witness_key, c.line, s.id, s.note, "
    f"CASE WHEN {SigningKey.disowns_sql('k', 's.signed_at')} THEN 1 ELSE 0 END, "
    f"h.root_hash, latest.id, latest.note, "
    f"(SELECT note FROM {_SIGNED} ORDER BY tree_size DESC, id DESC LIMIT 1) "
    f"FROM {_TABLE} AS c "
    f"JOIN {_SIGNED} AS s ON s.id = c.checkpoint_id "
    f"JOIN {_KEY} AS k ON k.id = s.signing_key_id "
    f"LEFT JOIN {_HEAD} AS h ON h.tree_size = c.tree_size "
    f"LEFT JOIN {_SIGNED} AS latest ON latest.id = (SELECT s2.id FROM {_SIGNED} AS s2 "
    f"JOIN {_KEY} AS k2 ON k2.id = s2.signing_key_id WHERE s2.tree_size = c.tree_size "
    f"AND NOT ({SigningKey.disowns_sql('k2', 's2.signed_at')}) ORDER BY s2.id DESC LIMIT 1) "
    f"WHERE c.tree_size IN (SELECT DISTINCT tree_size FROM {_TABLE} WHERE tree_size < %s "
    f"ORDER BY tree_size DESC LIMIT {WINDOW}) "
    f"ORDER BY c.tree_size DESC, c.id"
)


def _rows(below: int) -> Iterator[list[tuple[Any, ...]]]:
    """The cosignature rows, one list per tree size, largest first."""
    while True:
        with connection.cursor() as cursor:
            cursor.execute(_WINDOW, [below])
            rows = cursor.fetchall()
        if not rows:
            return
        group: list[tuple[Any, ...]] = []
        for row in rows:
            if group and group[0][0] != row[0]:
                yield group
                group = []
            group.append(row)
        yield group
        below = rows[-1][0]


def _witnessed(
    rules: Policy, group: list[tuple[Any, ...]], before: datetime | None, evidence: bool
) -> Witnessed | None:
    """The rows of one tree size as a Witnessed checkpoint, when they meet the quorum: counting
    each cosignature that verifies under the key the policy gives its witness (and, with
    `before`, is dated before it). The note is the latest whose log signature still counts
    (for `evidence`: any the site signed, since the witnesses date it)."""
    size = group[0][0]
    earliest: dict[str, Cosigned] = {}  # policy name -> its earliest counted cosignature
    notes: list[tuple[int, str]] = []
    for row in group:
        _size, vkey, line, checkpoint_id, text, disowned, root = row[:7]
        body = body_of(text)
        try:
            origin, noted_size, noted_root = note.parse_checkpoint(body)
        except ValueError:
            continue
        if not row[9].startswith(f"{origin}\n"):
            continue  # of a log since continued under another origin
        stored = merkle.EMPTY_ROOT if size == 0 else bytes(root) if root is not None else None
        if noted_size != size or noted_root != stored:
            # Not a tree of this log as stored: never shown as witnessed (checklog says more).
            logger.critical("witnesses: a cosigned checkpoint of %s leaves is not the log's", size)
            continue
        if evidence or not disowned:
            notes.append((checkpoint_id, text))
        read = cosignature.parse_line(line)
        witness = rules.witness_for(read) if read is not None else None
        if witness is None or witness.key.vkey != vkey:
            continue
        timestamp = _verifies(line, body, vkey)
        if timestamp is None:
            logger.error("witness %s: a stored cosignature does not verify", witness.key.name)
            continue
        if before is not None and not timestamp < before.timestamp():
            continue
        if witness.name not in earliest or timestamp < earliest[witness.name].timestamp:
            earliest[witness.name] = Cosigned(witness.key.name, timestamp, line)
    if not notes or not rules.satisfied(earliest):
        return None
    checkpoint_id, text = notes[-1]
    latest_id, latest_note = group[0][7:9]
    # The newest note of this tree by a key that counts, when its body is the cosigned one.
    if not evidence and latest_id is not None and body_of(latest_note) == body_of(text):
        checkpoint_id, text = latest_id, latest_note
    # Every note of one size has the same body (the cosignatures sign the body alone).
    cosigners = tuple(sorted(earliest.values(), key=lambda c: (c.timestamp, c.name)))
    lines = "".join(c.line + "\n" for c in cosigners)
    return Witnessed(size, text + lines, cosigners, checkpoint_id)


def _largest(before: datetime | None, evidence: bool) -> Witnessed | None:
    rules = policy()
    if rules is None:
        return None
    for group in _rows(2**62):
        found = _witnessed(rules, group, before, evidence)
        if found is not None:
            return found
    return None


def latest() -> Witnessed | None:
    """The largest checkpoint that meets the quorum now; None without a policy or before
    there is one. One query, usually."""
    return _largest(None, evidence=False)


def evidence_before(since: datetime) -> Witnessed | None:
    """The largest checkpoint that met the quorum with cosignatures all dated before `since`:
    what shows, on the witnesses' word rather than the site's, that its leaves were logged
    before then (key compromise). None without a policy, or when there is none."""
    return _largest(since, evidence=True)


def for_size(size: int, before: datetime | None) -> Witnessed | None:
    """The checkpoint of `size` leaves as witnessed (with `before`: by cosignatures dated
    before it), or None when it does not meet the quorum: for a re-signed receipt's evidence,
    judged again on every read."""
    rules = policy()
    if rules is None:
        return None
    for group in _rows(size + 1):
        if group[0][0] != size:
            return None
        return _witnessed(rules, group, before, evidence=True)
    return None


def cosigners_json(witnessed: Witnessed) -> list[dict[str, str]]:
    return [{"name": c.name, "time": format_timestamp(c.time)} for c in witnessed.cosigners]

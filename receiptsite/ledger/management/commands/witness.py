"""`manage.py witness`: have the log's checkpoints cosigned by the witnesses of
WITNESS_POLICY_FILE, as c2sp.org/tlog-witness prescribes (SPEC, "Witnesses"; docs/log.md).

A long-running process beside gunicorn (`--once`: one round, then exit). Every round it takes
the latest signed checkpoint and submits it to each witness that has not cosigned it and whose
last submission is at least WITNESS_INTERVAL seconds old: `POST <url>/add-checkpoint` with
`old <the size the witness holds>`, the RFC 6962 consistency proof from that size, a blank
line and the checkpoint. A 409 answer says the size the witness holds (`text/x.tlog.size`):
the submission is made again at once from that size. The cosignatures of a 200 are kept once
they verify under the policy's key (ledger/witnesses.py). A witness that refuses (403, 404,
422, any other status) or does not answer in time is logged and tried again after the
interval. Nothing here is on a request's path: ingest never waits for a witness.

One process at a time, whatever the number of hosts: it holds a lock (on PostgreSQL a session
advisory lock, on SQLite a file lock in VAR_DIR) and a second one waits for it, so that one
can run on every host and the others take over when it stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, close_old_connections, connection

from receiptsite.integrity import tlogwitness
from receiptsite.integrity.policy import Witness
from receiptsite.ledger import log, witnesses
from receiptsite.problems import Problem
from receiptsite.receipts.models import SignedCheckpoint

logger = logging.getLogger("receiptsite.witness")

# Seconds for one witness to answer one submission: 10, or the interval if shorter (2 at
# least), so that a slow witness never holds up the next round for long.
MAX_TIMEOUT, MIN_TIMEOUT = 10.0, 2.0
# Any fixed number (not the append lock's): the advisory lock one `witness` process holds.
WITNESS_LOCK = 0x7769746E65737321
TICK = 1.0  # seconds between two looks at the log


@dataclass
class Submitter:
    """One witness, as this process knows it: the size it holds, when it may be asked next."""

    witness: Witness
    holds: int | None = None  # None: not known yet (read from the stored cosignatures)
    next_at: float = 0.0  # time.monotonic()
    log: str = ""  # the origin `holds` is of: a log continued under a new one starts again


def origin_of(checkpoint: SignedCheckpoint) -> str:
    return checkpoint.note.partition("\n")[0]


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no answer (a timeout, a refused connection)
    content_type: str
    body: bytes
    error: str = ""


class Command(BaseCommand):
    help = (
        "Submit the latest signed checkpoint to each witness of WITNESS_POLICY_FILE "
        "(c2sp.org/tlog-witness), no more often than WITNESS_INTERVAL seconds per witness, "
        "and keep the cosignatures that verify; runs until stopped. --once: one round, then "
        "exit 0 if the latest checkpoint then meets the policy's quorum, 1 if not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once",
            action="store_true",
            help="submit once to every witness (whatever the interval) and exit",
        )

    def handle(self, *args: Any, once: bool = False, **options: Any) -> None:
        rules = settings.WITNESS_POLICY
        if rules is None:
            raise CommandError(
                "WITNESS_POLICY_FILE is not set: there is no witness to submit to"
            )
        self.stopping = False
        self.submitters = [Submitter(w) for w in rules.witnesses.values()]
        if once:
            with self.lock(wait=False):
                self.round(force=True)
                self.finish()
            return
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        names = ", ".join(w.key.name for w in rules.witnesses.values())
        logger.info("witness: submitting to %s every %ss", names, settings.WITNESS_INTERVAL)
        with self.lock(wait=True):
            while not self.stopping:
                try:
                    self.round(force=False)
                except DatabaseError as error:
                    # The database is away: try again once it is back (nothing is half done:
                    # each cosignature is stored in one statement).
                    logger.error("witness: the database does not answer: %s", error)
                    connection.close()
                self.sleep(min(TICK, settings.WITNESS_INTERVAL))
        logger.info("witness: stopped")

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, seconds))

    # --- one process at a time ---------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, wait: bool) -> Iterator[None]:
        """Hold the witness lock for the block: one submitter per site, whatever the hosts.
        `wait`: until the process holding it stops (else CommandError at once); a process
        stopped while it waits runs the block without it (its loop then does not run)."""
        with contextlib.ExitStack() as held:
            attempt = self._lock_attempt(held)
            while not attempt():
                if not wait:
                    raise CommandError("another `manage.py witness` is running for this site")
                logger.info("witness: another `manage.py witness` holds the lock; waiting")
                self.sleep(max(settings.WITNESS_INTERVAL, 5))
                if self.stopping:
                    break
            yield

    def _lock_attempt(self, held: contextlib.ExitStack) -> Callable[[], bool]:
        """What tries to take the lock once, without waiting: on PostgreSQL a session
        advisory lock (released when `held` closes), on SQLite a file lock in VAR_DIR."""
        if connection.vendor == "postgresql":
            held.callback(self._advisory_unlock)
            return self._advisory_lock
        path = Path(settings.VAR_DIR) / "witness.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        file = held.enter_context(open(path, "w"))  # noqa: SIM115 - closed by `held`

        def attempt() -> bool:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        return attempt

    def _advisory_unlock(self) -> None:
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")

    def _advisory_lock(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [WITNESS_LOCK])
            return bool(cursor.fetchone()[0])

    def _still_locked(self) -> None:
        """On PostgreSQL, take the lock again if the connection was lost meanwhile (a new
        session holds nothing): refuse to go on while another process has taken over."""
        if connection.vendor != "postgresql":
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                "AND granted AND ((classid::bigint << 32) | objid::bigint) = %s",
                [WITNESS_LOCK],
            )
            if cursor.fetchone() is not None:
                return
        if not self._advisory_lock():
            raise DatabaseError("another `manage.py witness` took the lock over")

    # --- a round -------------------------------------------------------------------------------

    def latest(self) -> SignedCheckpoint | None:
        """The checkpoint readers are served now (log.published(): the rollback guard holds),
        as its stored row; None when the log serves none."""
        try:
            signed = log.published()
        except Problem as error:
            logger.error("witness: the log serves no checkpoint to submit: %s", error.detail)
            return None
        return (
            SignedCheckpoint.objects.filter(tree_size=signed.size, note=signed.note)
            .order_by("-id")
            .first()
        )

    def round(self, force: bool) -> None:
        close_old_connections()
        self._still_locked()
        checkpoint = self.latest()
        if checkpoint is None:
            return
        now = time.monotonic()
        for submitter in self.submitters:
            if self.stopping or (not force and now < submitter.next_at):
                continue
            if witnesses.has_cosigned(
                submitter.witness, checkpoint.tree_size, origin_of(checkpoint)
            ):
                continue
            submitter.next_at = now + settings.WITNESS_INTERVAL
            self.submit(submitter, checkpoint)

    def submit(self, submitter: Submitter, checkpoint: SignedCheckpoint) -> None:
        witness = submitter.witness
        name = witness.key.name
        size = checkpoint.tree_size
        if submitter.holds is None or submitter.log != origin_of(checkpoint):
            submitter.log = origin_of(checkpoint)
            submitter.holds = witnesses.cosigned_size(witness, submitter.log) or 0
        for _attempt in range(2):  # the second: from the size a 409 named
            old = submitter.holds
            if old > size:
                logger.critical(
                    "witness %s holds a tree of %s leaves, larger than the %s this log has "
                    "signed: it saw a tree this site no longer serves (a restore from an old "
                    "backup, or a split view)",
                    name, old, size,
                )  # fmt: skip
                return
            proof = log.consistency_proof(old, size) if 0 < old < size else []
            body = tlogwitness.add_checkpoint_body(old, proof, checkpoint.note)
            answer = self.post(witness, body)
            if answer.status == 200:
                self.cosigned(submitter, checkpoint, answer)
                return
            if answer.status == 409 and answer.content_type == tlogwitness.SIZE_TYPE:
                try:
                    submitter.holds = tlogwitness.parse_size(answer.body)
                except ValueError:
                    logger.warning("witness %s answered 409 without a size", name)
                    return
                logger.info("witness %s holds %s leaves: submitting from there", name,
                            submitter.holds)  # fmt: skip
                continue
            self.refused(witness, size, answer)
            return
        logger.warning("witness %s answered 409 twice; trying again later", name)

    def post(self, witness: Witness, body: bytes) -> Answer:
        url = (witness.url or "").rstrip("/") + "/add-checkpoint"
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "text/plain; charset=utf-8",
                "User-Agent": f"receiptsite-witness ({settings.SITE_URL})",
            },
        )
        try:
            timeout = min(MAX_TIMEOUT, max(MIN_TIMEOUT, float(settings.WITNESS_INTERVAL)))
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                return Answer(response.status, _media_type(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, _media_type(error.headers), error.read())
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            return Answer(0, "", b"", str(reason) or type(error).__name__)

    def cosigned(self, submitter: Submitter, checkpoint: SignedCheckpoint, answer: Answer) -> None:
        witness = submitter.witness
        try:
            lines = tlogwitness.signature_lines(answer.body)
        except ValueError as error:
            logger.warning("witness %s answered 200 with no cosignature: %s",
                           witness.key.name, error)  # fmt: skip
            return
        problems = witnesses.store(checkpoint, witness, lines)
        if witnesses.has_cosigned(witness, checkpoint.tree_size, origin_of(checkpoint)):
            submitter.holds = checkpoint.tree_size
            logger.info("witness %s cosigned the tree of %s leaves", witness.key.name,
                        checkpoint.tree_size)  # fmt: skip
        for problem in problems:
            logger.warning("witness %s: %s", witness.key.name, problem)

    def refused(self, witness: Witness, size: int, answer: Answer) -> None:
        if answer.status == 0:
            why = f"did not answer ({answer.error})"
        else:
            # The first line of the answer, short: a witness's words, never our secrets.
            said = answer.body[:200].decode("utf-8", "replace").strip().splitlines()
            why = f"refused with {answer.status}" + (f": {said[0]}" if said else "")
        logger.warning("witness %s %s, for the tree of %s leaves; trying again in %ss",
                       witness.key.name, why, size, settings.WITNESS_INTERVAL)  # fmt: skip

    def finish(self) -> None:
        """--once: say where each witness stands, and exit 1 unless the quorum is met."""
        checkpoint = self.latest()
        if checkpoint is None:
            raise CommandError("the log serves no checkpoint to have witnessed")
        for submitter in self.submitters:
            done = witnesses.has_cosigned(
                submitter.witness, checkpoint.tree_size, origin_of(checkpoint)
            )
            self.stdout.write(
                f"{submitter.witness.key.name}: "
                + ("cosigned" if done else "not cosigned")
                + f" the tree of {checkpoint.tree_size} leaves"
            )
        witnessed = witnesses.latest()
        if witnessed is None or witnessed.size != checkpoint.tree_size:
            raise CommandError(
                f"the checkpoint of {checkpoint.tree_size} leaves does not meet the policy's "
                "quorum yet"
            )
        self.stdout.write(f"The checkpoint of {witnessed.size} leaves is witnessed.")


def _media_type(headers: Any) -> str:
    return (headers.get("Content-Type", "") if headers is not None else "").split(";")[0].strip()

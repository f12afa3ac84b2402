"""Mark a signing key compromised as of a time, activate a new key, and sign again with it what
was provably logged before that time (README, "Key compromise"), and vouch with it for the
decisions of the auditors' record the old key signed that still check out (review/chain.py)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from receiptsite import config
from receiptsite.integrity import keys, merkle, note
from receiptsite.ledger import key_history, keyring, log, witnesses
from receiptsite.lib.rfc3339 import parse_rfc3339
from receiptsite.problems import Problem
from receiptsite.receipts.models import (
    AppendedSignature,
    LogNode,
    Receipt,
    SignedCheckpoint,
    SigningKey,
    format_timestamp,
)
from receiptsite.review import chain as decisions

BATCH = 500


class Command(BaseCommand):
    help = (
        "Mark the signing key KID compromised as of --at (RFC 3339) and make a new key the "
        "active one: --new-key-file, else the key in SIGNING_KEY_FILE if that is another key, "
        "else a new key, written in place of the compromised one in SIGNING_KEY_FILE (the "
        "site takes it up at its next write, no restart). Every receipt the old key signed "
        "whose leaf is provably logged before --at is signed again by the new key: in the "
        "largest checkpoint the witness policy's quorum cosigned before then, or, with no such "
        "checkpoint, one the site signed before then (by its database's record); "
        "whatever else the old key signed, receipts and checkpoints, no longer verifies. "
        "Every review decision the old key signed that still checks out (`checkdecisions`) "
        "is vouched for by the new key, in the same transaction."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kid", help="the key's id, as the keys document lists it")
        parser.add_argument(
            "--at",
            required=True,
            metavar="TIMESTAMP",
            help="from when on the key counts as compromised (RFC 3339, e.g. "
            "2026-12-01T09:00:00Z): the earliest time it may have leaked",
        )
        parser.add_argument(
            "--new-key-file",
            metavar="PEM",
            help="the new Ed25519 private key (PKCS#8 PEM, as `openssl genpkey -algorithm "
            "ed25519` writes it)",
        )

    def handle(
        self, *args: Any, kid: str, at: str, new_key_file: str | None = None, **options: Any
    ) -> None:
        try:
            since = parse_rfc3339(at)
        except ValueError:
            raise CommandError(
                f"--at {at!r} is not an RFC 3339 timestamp (e.g. 2026-12-01T09:00:00Z)"
            ) from None
        if since > timezone.now():
            raise CommandError(f"--at {at} is in the future")
        old = SigningKey.objects.filter(kid=kid).first()
        if old is None:
            raise CommandError(f"no signing key has the id {kid!r}")
        if old.status == SigningKey.COMPROMISED:
            raise CommandError(
                f"the key {kid} is already marked compromised, as of {old.compromised_as_of()}"
            )
        new, new_path, pem = self.new_key(old, new_key_file)
        try:
            with transaction.atomic(durable=True):
                log.lock()  # no receipt is stored or checkpoint signed meanwhile
                old.refresh_from_db()  # under the lock: another run may have come first
                if old.status == SigningKey.COMPROMISED:
                    raise CommandError(f"the key {kid} was marked compromised meanwhile")
                evidence, resigned, skipped, unproven, vouched = self.compromise(
                    old, since, new
                )
        except (Problem, CommandError) as error:
            keyring.forget()
            if isinstance(error, Problem):
                raise CommandError(error.detail) from None
            raise
        replaced = pem is not None and self.replace_key_file(pem)
        if pem is not None and not replaced:
            folder = Path(settings.VAR_DIR).resolve()
            new_path = write_key(folder / f"signing-key-{new.kid[:12]}.pem", pem)
        self.report(old, since, new, new_path, evidence, resigned, skipped, unproven)
        self.report_decisions(old, new, vouched)
        if replaced:
            self.stdout.write(
                f"Wrote the new key in place of the compromised one in SIGNING_KEY_FILE "
                f"({Path(settings.SIGNING_KEY_FILE).resolve()}): every process of the site "
                "signs with it from its next write on, with no restart (other hosts: copy the "
                "file to each, or restart them with it)."
            )

    def replace_key_file(self, pem: bytes) -> bool:
        """Write the new key over SIGNING_KEY_FILE (atomically, mode 600), once the new key is
        recorded. False when there is no such file or it cannot be replaced."""
        if not settings.SIGNING_KEY_FILE:
            return False
        path = Path(settings.SIGNING_KEY_FILE).resolve()
        try:
            os.replace(write_key(path.with_name(f".{path.name}.new"), pem), path)
        except OSError as error:
            self.stderr.write(f"Cannot replace SIGNING_KEY_FILE {path}: {error.strerror}.")
            return False
        return True

    def new_key(
        self, old: SigningKey, path: str | None
    ) -> tuple[keyring.ConfiguredKey, Path | None, bytes | None]:
        """The key that takes over, the file it is in when the site is not set to it, and,
        for a key made here, its PEM (written once the new key is recorded)."""
        if path is not None:
            try:
                private = config.signing_key(path)
            except config.ConfigurationError as error:
                problem = str(error).replace("SIGNING_KEY_FILE", "--new-key-file", 1)
                raise CommandError(problem) from None
            key = keyring.configured_from(private)
            file: Path | None = Path(path).resolve()
        elif (
            settings.SIGNING_KEY is not None
            and keyring.configured().kid != old.kid
            and not SigningKey.objects.filter(
                kid=keyring.configured().kid, status=SigningKey.COMPROMISED
            ).exists()
        ):
            return keyring.configured(), None, None  # the operator rotated first
        else:
            # A new key, written in place of the compromised one in SIGNING_KEY_FILE (or, with
            # no such file or one that cannot be replaced, into VAR_DIR) after the commit.
            pem = keys.generate_private_key_pem()
            return keyring.configured_from(keys.load_private_key_pem(pem)), None, pem
        if key.kid == old.kid:
            raise CommandError("the new key is the compromised key itself")
        if settings.SIGNING_KEY is not None and keyring.configured().kid == key.kid:
            file = None
        return key, file, None

    def compromise(
        self, old: SigningKey, since: datetime, new: keyring.ConfiguredKey
    ) -> tuple[SignedCheckpoint | None, int, int, int, decisions.Vouched]:
        """Under the append lock: mark, activate, sign the tree head, sign the receipts
        again, and (under the record's lock too) vouch for the decisions. Returns the evidence
        checkpoint, the counts signed again, left out (their bytes do not verify any more) and
        not provably logged before `since`, and what was vouched for."""
        keyring.disown(old.kid)  # it signs nothing more, not even its successor's statement
        keyring.forget()
        # Chosen before anything is signed here: what this command signs is never proof. The
        # witnesses' word first (SPEC, "Key compromise": cosignatures dated before `since`),
        # and then only it; the site's own record when no witnessed checkpoint predates it.
        evidence = evidence_before(since)
        self.site_record = evidence
        self.witnessed = witnesses.evidence_before(since)
        if self.witnessed is not None:
            evidence = SignedCheckpoint.objects.select_related("signing_key").get(
                pk=self.witnessed.checkpoint_id
            )
        # Retires the key that was active, if another than `old`; `old` signs nothing more.
        active = keyring.record(new, compromising=old.kid)
        # The compromise, a statement of the keys' history signed by the key that takes over.
        key_history.key_status_record(
            kid=old.kid,
            public=bytes(old.public_key),
            status=SigningKey.COMPROMISED,
            taking_over=key_history.Signer(active.kid, active.private),
            compromised_at=since,
        )
        log.sign_head_with(active)  # the latest checkpoint is never one by the old key
        logged = evidence.tree_size if evidence is not None else 0
        # Each receipt's newest signature is by `old` when it has no appended signature and
        # `old` signed it, or when its newest appended signature is by `old`.
        newest: dict[int, int] = dict(
            AppendedSignature.objects.order_by("receipt_id", "id").values_list(
                "receipt_id", "signing_key_id"
            )
        )
        by_old = [receipt for receipt, key in newest.items() if key == old.pk]
        rows = Receipt.objects.filter(
            (Q(signing_key=old) & ~Q(pk__in=list(newest))) | Q(pk__in=by_old)
        ).values_list("pk", "log_entry__index")
        signed: list[tuple[int, int | None]] = list(rows)
        proven = [(pk, index) for pk, index in signed if index is not None and index < logged]
        resigned = skipped = 0
        for start in range(0, len(proven), BATCH):
            chunk = dict(proven[start : start + BATCH])
            made, left = self.sign_again(old, active, chunk, evidence)
            resigned, skipped = resigned + made, skipped + left
        # No decision is chained meanwhile, and none after this by the old key (chain.py
        # reads its key's status under the same lock).
        vouched = decisions.vouch(old, active)
        return evidence, resigned, skipped, len(signed) - len(proven), vouched

    def sign_again(
        self,
        old: SigningKey,
        active: keyring.ActiveKey,
        chunk: dict[int, int],
        evidence: SignedCheckpoint | None,
    ) -> tuple[int, int]:
        """Sign the receipts `chunk` names (pk: leaf index) with the new key, each only if its
        bytes are the ones logged and the old key's signature of them verifies: a row changed
        behind the site's back is never made to verify again."""
        assert evidence is not None
        leaves = {
            key: bytes(digest)
            for key, digest in LogNode.objects.filter(
                key__in=[LogNode.node_key(0, index) for index in chunk.values()]
            ).values_list("key", "hash")
        }
        last = {
            receipt: bytes(signature)
            for receipt, signature in AppendedSignature.objects.filter(
                receipt_id__in=list(chunk), signing_key=old
            )
            .order_by("id")
            .values_list("receipt_id", "signature")
        }
        made: list[AppendedSignature] = []
        for pk, data, signature in Receipt.objects.filter(pk__in=list(chunk)).values_list(
            "pk", "canonical_bytes", "signature"
        ):
            data = bytes(data)
            before = last.get(pk, bytes(signature))
            if leaves.get(LogNode.node_key(0, chunk[pk])) != merkle.leaf_hash(
                data
            ) or not keys.verify_signature(bytes(old.public_key), data, before):
                continue
            made.append(
                AppendedSignature(
                    receipt_id=pk,
                    signing_key=active.row,
                    signature=keys.sign(active.private, data),
                    evidence=evidence,
                )
            )
        AppendedSignature.objects.bulk_create(made)
        return len(made), len(chunk) - len(made)

    def report(
        self,
        old: SigningKey,
        since: datetime,
        new: keyring.ConfiguredKey,
        new_path: Path | None,
        evidence: SignedCheckpoint | None,
        resigned: int,
        skipped: int,
        unproven: int,
    ) -> None:
        write = self.stdout.write
        write(f"Marked {old.kid} compromised as of {format_timestamp(since)}.")
        write(f"The active signing key is now {new.kid}; it signed the current tree head.")
        if evidence is not None and self.witnessed is not None:
            who = ", ".join(
                f"{c.name} at {format_timestamp(c.time)}" for c in self.witnessed.cosigners
            )
            write(
                f"Signed again by {new.kid}: {resigned} receipt(s) in the checkpoint of "
                f"{evidence.tree_size} leaves that the witness policy's quorum cosigned before "
                f"then ({who})."
            )
            site = self.site_record
            if site is not None and site.tree_size > evidence.tree_size:
                write(
                    f"Not signed again: {site.tree_size - evidence.tree_size} later receipt(s) "
                    "that the site's own record, but no witness, shows logged before then."
                )
        elif evidence is not None:
            write(
                f"Signed again by {new.kid}: {resigned} receipt(s) in the checkpoint of "
                f"{evidence.tree_size} leaves signed at {format_timestamp(evidence.signed_at)} "
                "(the site's own record, stamped by its database's clock)."
            )
        else:
            write(
                "No checkpoint was signed before that time (by the database's record): no "
                "receipt was signed again."
            )
        if evidence is not None and self.witnessed is None and witnesses.policy() is not None:
            write(
                "No checkpoint was cosigned by the witness policy's quorum before then: this "
                "rests on the site's own record of when it signed, which a verifier with the "
                "policy does not take."
            )
        if skipped:
            write(
                f"Left out: {skipped} receipt(s) whose stored bytes are not the ones signed and "
                "logged (`manage.py checklog` says more); they stay invalid."
            )
        write(
            f"Not provably logged before then, so now invalid: {unproven} receipt(s) signed "
            f"by {old.kid}."
        )
        if new_path is not None:
            write(
                f"Now point SIGNING_KEY_FILE at {new_path} and restart the site. Until then it "
                "stores no receipts (503, and /healthz says why); reads keep working."
            )
        elif settings.SIGNING_KEY is not None and keyring.configured().kid == new.kid:
            write("SIGNING_KEY_FILE already names the new key.")

    def report_decisions(
        self, old: SigningKey, new: keyring.ConfiguredKey, vouched: decisions.Vouched
    ) -> None:
        write = self.stdout.write
        write(
            f"Vouched for by {new.kid}: {vouched.count} review decision(s) signed (or vouched "
            f"for) by {old.kid} that still check out (their bytes, hash, signature and place "
            "in the record); `manage.py checkdecisions` counts them again."
        )
        if vouched.left_out:
            write(
                f"Left out: {len(vouched.left_out)} review decision(s) signed (or vouched for) "
                f"by {old.kid} that do not check out; they stay reported by `manage.py "
                f"checkdecisions`, the first: {vouched.left_out[0]}."
            )


def evidence_before(since: datetime) -> SignedCheckpoint | None:
    """The largest tree the site provably signed before `since`, whose leaves were therefore
    logged before: the checkpoint with the largest tree whose `signed_at`, the database's own
    stamp (migrations/0013, never a time the inserting code chose), is before `since`; whose
    note its key signed, for the tree size of its row and the stored tree's root at that size
    (a row the site role inserted without the key proves nothing); and whose key had not been
    compromised when it signed (SigningKey.disowns). None when there is none."""
    origin = log.head().origin
    candidates = (
        SignedCheckpoint.objects.filter(signed_at__lt=since)
        .select_related("signing_key")
        .order_by("-tree_size", "-id")
    )
    for checkpoint in candidates.iterator(chunk_size=100):
        key = checkpoint.signing_key
        if key.disowns(checkpoint.signed_at):
            continue
        verifier = note.verifier_key(origin, bytes(key.public_key))
        body = note.verify_note(checkpoint.note, [verifier])
        if body is None:
            continue
        try:
            _, size, root = note.parse_checkpoint(body)
        except ValueError:
            continue
        if size == checkpoint.tree_size and root == log.root_at(size):
            return checkpoint
    return None


def write_key(file: Path, pem: bytes) -> Path:
    """`file`, made to hold `pem` and readable by its owner only."""
    file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(pem)
    return file

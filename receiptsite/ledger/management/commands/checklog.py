"""The log monitor: recompute the tree from the stored receipts and hold the site to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from receiptsite.integrity import cosignature, keys, merkle, note
from receiptsite.integrity.encoding import b64
from receiptsite.ledger import key_history, log, signatures, witnesses
from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import (
    AppendedSignature,
    Checkpoint,
    Cosignature,
    LogEntry,
    LogNode,
    SignedCheckpoint,
    SigningKey,
    format_timestamp,
)


class Command(BaseCommand):
    help = (
        "Recompute the transparency log from the stored receipts and compare it with the "
        "stored tree and the latest signed checkpoint, and check the keys' history (every "
        "key's status as its signed statements say); with --against, prove that an earlier "
        "checkpoint (saved by anyone) is consistent with today's tree. Exits 1 on any "
        "mismatch, 2 when run as a role that row-level security hides rows from (run it as "
        "the tables' owner)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--against",
            metavar="CHECKPOINT_FILE",
            help="a signed checkpoint saved earlier from /api/log/checkpoint",
        )

    def handle(self, *args: Any, against: str | None = None, **options: Any) -> None:
        rowsecurity.refuse_hidden_rows("checklog")  # the wrong role: exit 2, first
        problems: list[str] = []
        leaves: list[bytes] = []
        stored_leaves = dict(
            LogNode.objects.filter(key__lt=LogNode.node_key(1, 0)).values_list("key", "hash")
        )
        rows = LogEntry.objects.order_by("index").values_list(
            "index", "receipt__canonical_bytes", "receipt__withdrawal__id"
        )
        withdrawn = 0
        for index, data, withdrawal in rows.iterator(chunk_size=2000):
            if index != len(leaves):
                problems.append(f"the log has no leaf {len(leaves)} (next stored is {index})")
                break
            if withdrawal is not None and not bytes(data):
                # A withdrawn receipt's content is erased (withdrawal/withdrawals.py): its leaf
                # is the one kept in the log, and the tree is recomputed with it.
                withdrawn += 1
                leaves.append(bytes(stored_leaves.get(LogNode.node_key(0, index), b"")))
                continue
            leaves.append(merkle.leaf_hash(bytes(data)))
        size = len(leaves)

        for index, leaf in enumerate(leaves):
            if bytes(stored_leaves.get(LogNode.node_key(0, index), b"")) != leaf:
                problems.append(f"leaf {index}: the receipt's bytes are not the ones logged")

        current = log.head()
        if current.size != size:
            problems.append(f"the latest checkpoint has size {current.size}, the log {size}")
        elif merkle.root_from_leaves(leaves) != current.root:
            problems.append(f"the root of the {size} stored receipts differs from the checkpoint's")
        for tree_size, root in Checkpoint.objects.values_list("tree_size", "root_hash").iterator():
            if tree_size <= size and merkle.root_from_leaves(leaves[:tree_size]) != bytes(root):
                problems.append(f"the stored checkpoint of size {tree_size} has a wrong root")
                break
        try:
            log.guard(current)
        except log.LogRollback as error:
            problems.append(error.reason)
        problems += self.check_latest_signed(leaves, current)
        problems += check_appended_signatures()
        problems += check_cosignatures(leaves)
        statements, key_problems = key_history.check()
        problems += key_problems

        if against:
            problems += self.check_against(Path(against), leaves, current)

        if problems:
            raise CommandError("the log does not check out:\n- " + "\n- ".join(problems))
        self.stdout.write(
            f"OK: {size} leaves recomputed; root {b64(current.root)} matches the checkpoint."
            + (f" {withdrawn} withdrawn receipt(s) count with their kept leaf hash."
               if withdrawn else "")
            + f" The keys' history ({statements} signed statement(s)) checks out, and every"
            " key agrees with it."
        )

    def check_latest_signed(self, leaves: list[bytes], current: log.Head) -> list[str]:
        """The checkpoint reads serve: signed by its key, for the recomputed tree, current."""
        latest = (
            SignedCheckpoint.objects.select_related("signing_key")
            .order_by("-tree_size", "-id")
            .first()
        )
        if latest is None:
            return ["no checkpoint has been signed (`manage.py signcheckpoint` signs one)"]
        key = latest.signing_key
        verifier = note.verifier_key(current.origin, bytes(key.public_key))
        body = note.verify_note(latest.note, [verifier])
        if body is None:
            return ["the latest signed checkpoint does not verify under the key that signed it"]
        _, size, root = note.parse_checkpoint(body)
        if size > len(leaves) or merkle.root_from_leaves(leaves[:size]) != root:
            return [f"the latest signed checkpoint ({size} leaves) is not of the stored log"]
        problems: list[str] = []
        if key.status == SigningKey.COMPROMISED:
            if key.disowns(latest.signed_at):
                problems.append(
                    f"the latest signed checkpoint is by the key {key.kid}, signed after it was "
                    f"compromised (as of {key.compromised_as_of()}): it proves nothing"
                )
            else:
                problems.append(
                    f"the latest signed checkpoint is by the compromised key {key.kid} "
                    "(`manage.py signcheckpoint` signs the tree with the active key)"
                )
        if size < len(leaves):
            problems.append(
                f"the latest signed checkpoint has {size} leaves, the log {len(leaves)} (did a "
                "process stop between storing and signing? `manage.py signcheckpoint` signs "
                "the current tree)"
            )
        return problems

    def check_against(self, path: Path, leaves: list[bytes], current: log.Head) -> list[str]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            return [f"cannot read {path}: {error}"]
        text = final_newline(text)
        # Signed under its own log's name: this log's, or one this log continues.
        named = text.partition("\n")[0]
        listed = list(SigningKey.objects.all())
        try:
            verifiers = [
                note.verifier_key(named, bytes(key.public_key))
                for key in listed
                if key.status != SigningKey.COMPROMISED
            ]
            body = note.verify_note(text, verifiers)
        except ValueError:  # the first line is no key name: not a checkpoint of ours
            body = None
        if body is None:
            body, problem = self.by_a_compromised_key(path, text, listed, named)
            if body is None:
                return [problem]
        origin, size, root = note.parse_checkpoint(body)
        if origin != current.origin:
            kept, said = log.followed(
                log.Head(origin=origin, size=size, root=root), current.origin, log.continuations()
            )
            if kept is None:
                return [f"{path} is of the log {origin!r}, not {current.origin!r}: {said}"]
            self.stdout.write(f"{path} is of the log {origin}: {said}.")
        if size > len(leaves):
            return [f"{path} has {size} leaves, but the log now has only {len(leaves)}"]
        if size == 0:
            return [] if root == merkle.EMPTY_ROOT else [f"{path} has a wrong empty root"]
        proof = log.consistency_proof(size, len(leaves))
        ours = merkle.root_from_leaves(leaves)
        if not merkle.verify_consistency(size, len(leaves), proof, root, ours):
            return [f"the log of {len(leaves)} leaves is NOT consistent with {path} ({size})"]
        self.stdout.write(f"Consistent with the checkpoint of size {size} in {path}.")
        return []

    def by_a_compromised_key(
        self, path: Path, text: str, listed: list[SigningKey], origin: str
    ) -> tuple[str | None, str]:
        """A checkpoint signed only by a compromised key counts when the site's own records
        show that it signed exactly this note before the key was compromised; otherwise it
        proves nothing (anyone holding the key could have made it)."""
        for key in listed:
            if key.status != SigningKey.COMPROMISED:
                continue
            try:
                body = note.verify_note(text, [note.verifier_key(origin, bytes(key.public_key))])
            except ValueError:
                body = None
            if body is None:
                continue
            signed = SignedCheckpoint.objects.filter(signing_key=key, note=text).order_by("id")
            record = signed.first()
            if record is not None and not key.disowns(record.signed_at):
                self.stdout.write(
                    f"{path} is signed by the compromised key {key.kid}, but this site signed "
                    f"it at {format_timestamp(record.signed_at)}, before the compromise."
                )
                return body, ""
            return None, (
                f"{path} is signed by the key {key.kid}, compromised as of "
                f"{key.compromised_as_of()}, and this site has no record of signing it before "
                "then: it proves nothing"
            )
        return None, f"{path} is not a checkpoint signed by one of this site's keys"


def final_newline(text: str) -> str:
    """A saved checkpoint as the site signed it when the only difference is its final newline:
    one missing (what `$(...)`, `printf %s` or an editor leaves) or one more (`jq -r` adds one
    to a value that already ends with it). Anything else is left as it is, to be refused."""
    if not text.endswith("\n"):
        return text + "\n"
    if text.endswith("\n\n") and not text.endswith("\n\n\n"):
        return text[:-1]
    return text


def check_appended_signatures() -> list[str]:
    """Each signature `compromisekey` appended verifies under its key, over the receipt's
    bytes, and rests on a checkpoint that includes the receipt and that the policy's witnesses
    cosigned before the key it took over from was compromised, or that the site's own record
    shows signed before then by a key not compromised then (signatures.witnessed_before,
    signatures.rests_on_proof: the rules the verification JSON applies). A receipt whose
    content was erased by a withdrawal has no bytes to check."""
    problems: list[str] = []
    listed = SigningKey.objects.in_bulk()
    rows = AppendedSignature.objects.order_by("receipt_id", "id").select_related(
        "evidence", "receipt", "receipt__log_entry"
    )
    previous: AppendedSignature | None = None
    for appended in rows.iterator(chunk_size=2000):
        receipt = appended.receipt
        # The key it took over from: the receipt's newest signature before it.
        replaced = listed[receipt.signing_key_id]
        if previous is not None and previous.receipt_id == receipt.pk:
            replaced = listed[previous.signing_key_id]
        previous = appended
        appended.evidence.signing_key = listed[appended.evidence.signing_key_id]
        data = bytes(receipt.canonical_bytes)
        public = bytes(listed[appended.signing_key_id].public_key)
        if data and not keys.verify_signature(public, data, bytes(appended.signature)):
            problems.append(f"appended signature {appended.pk} does not verify")
        elif not (
            signatures.rests_on_proof(appended.evidence, replaced, receipt.log_index)
            or signatures.witnessed_before(appended.evidence, replaced, receipt.log_index)
        ):
            problems.append(
                f"appended signature {appended.pk} rests on no checkpoint from before the "
                "compromise"
            )
    return problems


def check_cosignatures(leaves: list[bytes]) -> list[str]:
    """Every stored witness cosignature verifies, under the witness key it was stored with,
    over the checkpoint it names, and that checkpoint is a tree of this log (its size, and the
    stored root at that size, which the check of every stored size holds to the recomputed
    leaves): the site stores a cosignature only once it verifies, so one that does not was
    changed or added behind the site's back (ledger/witnesses.py)."""
    problems: list[str] = []
    roots: dict[int, bytes | None] = {}
    rows = Cosignature.objects.select_related("checkpoint").order_by("id")
    for row in rows.iterator(chunk_size=2000):
        body = witnesses.body_of(row.checkpoint.note)
        try:
            _, size, root = note.parse_checkpoint(body)
            key = cosignature.witness_key(row.witness_key)
        except ValueError:
            problems.append(f"cosignature {row.pk}: its checkpoint or witness key does not read")
            continue
        read = cosignature.parse_line(row.line)
        if read is None or not cosignature.verify(read, key, body):
            problems.append(f"cosignature {row.pk} (by {key.name}) does not verify")
        elif size != row.tree_size or size > len(leaves) or root != roots.setdefault(
            size, log.root_at(size)
        ):
            problems.append(f"cosignature {row.pk} (by {key.name}) is of no tree of this log")
    return problems

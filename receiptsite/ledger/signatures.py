"""A receipt's signature, as the verification JSON shows and checks it.

A receipt is signed once, when it is stored (Receipt.signature, by Receipt.signing_key). When
that key is compromised, `manage.py compromisekey` signs again, with the key that replaces it,
every receipt whose leaf a checkpoint signed before the compromise includes, and stores those
signatures as AppendedSignature rows (append-only, like the log). When the site signed a
checkpoint is its own record, stamped by its database's clock (receipts/migrations/0013), and
the words say so. A signature counts when it verifies now under a published key that is not
compromised, and, for an appended one, when its checkpoint still proves what it was taken for
(rests_on_proof); the one shown is the newest that counts, or, when none does, the newest there
is, with a check that says why it fails.

Only a receipt whose own key is compromised can have appended signatures, so the others cost
no query here; such a receipt costs one (its appended signatures, newest first).
"""

from __future__ import annotations

from dataclasses import dataclass

from receiptsite.integrity import keys
from receiptsite.ledger import witnesses
from receiptsite.ledger.witnesses import Witnessed
from receiptsite.receipts.models import (
    AppendedSignature,
    Receipt,
    SignedCheckpoint,
    SigningKey,
    format_timestamp,
)

SIGNATURE = "signature"


@dataclass(frozen=True)
class Shown:
    """The signature the verification JSON shows, and its check."""

    key: SigningKey
    value: bytes
    passed: bool
    detail: str
    # The compromised key that makes the check fail, when that is why it fails.
    compromised: SigningKey | None = None
    # For a signature appended that counts: the checkpoint it rests on (its `evidence`), and,
    # when the witnesses' cosignatures show it predates the compromise, that checkpoint as
    # they witnessed it (ledger/witnesses.py).
    evidence: SignedCheckpoint | None = None
    witnessed: Witnessed | None = None


def _named(key: SigningKey) -> str:
    if key.status == SigningKey.COMPROMISED:
        return f"key {key.kid}, marked compromised as of {key.compromised_as_of()}"
    return f"the published key {key.kid} ({key.status})"


def appended(receipt: Receipt) -> list[AppendedSignature]:
    """The receipt's appended signatures, newest first, with their keys and evidence."""
    return list(
        AppendedSignature.objects.filter(receipt_id=receipt.pk)
        .select_related("signing_key", "evidence", "evidence__signing_key")
        .order_by("-id")
    )


def rests_on_proof(evidence: SignedCheckpoint, replaced: SigningKey, index: int | None) -> bool:
    """Whether `evidence`, the checkpoint a signature appended in place of one by `replaced`
    rests on, shows by the site's own record that the receipt (leaf `index`) was logged before
    `replaced` was compromised: it includes the leaf, it was signed before that compromise,
    and its own key had not been compromised when it signed. Both by SigningKey.disowns,
    against the time the database recorded for the signing (`checklog` holds every appended
    signature to it)."""
    return (
        index is not None
        and index < evidence.tree_size
        and not replaced.disowns(evidence.signed_at)
        and not evidence.signing_key.disowns(evidence.signed_at)
    )


def witnessed_before(
    evidence: SignedCheckpoint, replaced: SigningKey, index: int | None
) -> Witnessed | None:
    """`evidence` as the policy's witnesses cosigned it before `replaced` was compromised,
    when they did and it includes leaf `index`: the stronger proof, anyone's to check
    (SPEC, "Key compromise"). Judged again on every read; None without a policy."""
    if index is None or not index < evidence.tree_size or replaced.compromised_at is None:
        return None
    return witnesses.for_size(evidence.tree_size, replaced.compromised_at)


def shown(receipt: Receipt, data: bytes) -> Shown:
    """The signature to show for `receipt`, whose stored bytes are `data`."""
    original: SigningKey = receipt.signing_key
    value = bytes(receipt.signature)
    verifies = keys.verify_signature(bytes(original.public_key), data, value)
    if original.status != SigningKey.COMPROMISED:
        # The words of docs/verification.md and EXAMPLES.md, for the everyday case.
        if verifies:
            return Shown(
                original, value, True, "The Ed25519 signature verifies under a published key."
            )
        # The key is sound: what changed is what was signed (the bytes, or the signature
        # stored with them). The words blame a key only when it is compromised (below).
        return Shown(
            original,
            value,
            False,
            f"The Ed25519 signature does not verify over the stored bytes under "
            f"{_named(original)}: the stored bytes, or the signature, are not the ones that "
            "were signed.",
        )
    later = appended(receipt)
    # The key each appended signature took over from: the one before it, else the receipt's.
    replaced = [signature.signing_key for signature in later[1:]] + [original] if later else []
    for signature, before in zip(later, replaced, strict=True):
        key = signature.signing_key
        again = bytes(signature.signature)
        if key.status == SigningKey.COMPROMISED or not keys.verify_signature(
            bytes(key.public_key), data, again
        ):
            continue
        witnessed = witnessed_before(signature.evidence, before, receipt.log_index)
        if witnessed is not None or rests_on_proof(signature.evidence, before, receipt.log_index):
            return Shown(
                key,
                again,
                True,
                _resigned(original, signature, witnessed),
                evidence=signature.evidence,
                witnessed=witnessed,
            )
    if not later:
        why = "" if verifies else " (and that signature does not verify either)"
        return Shown(
            original,
            value,
            False,
            f"The receipt is signed by {_named(original)}{why}, and no checkpoint signed "
            "before then includes it, so it cannot be shown to have been logged before the "
            "key was compromised: its signature cannot be told from a forgery.",
            compromised=original,
        )
    newest = later[0]
    key = newest.signing_key
    again = bytes(newest.signature)
    if key.status == SigningKey.COMPROMISED:
        return Shown(
            key,
            again,
            False,
            f"The receipt was signed by {_named(original)}, and again by {_named(key)}; no "
            "signature by a key that is not compromised verifies.",
            compromised=key,
        )
    if keys.verify_signature(bytes(key.public_key), data, again):
        return Shown(
            key,
            again,
            False,
            f"The receipt was signed by {_named(original)}; the signature {_named(key)} "
            "appended rests on a checkpoint that does not show, by the witnesses' cosignatures "
            "or the site's own record, "
            f"that the receipt was logged before key {replaced[0].kid} was compromised: it "
            "proves nothing.",
            compromised=replaced[0],
        )
    return Shown(
        key,
        again,
        False,
        f"The receipt was signed by {_named(original)}; the signature {_named(key)} "
        "appended does not verify: the stored bytes are not the ones signed.",
    )


def _resigned(
    original: SigningKey, signature: AppendedSignature, witnessed: Witnessed | None
) -> str:
    key = signature.signing_key
    if witnessed is not None:
        who = ", ".join(
            f"{c.name} at {format_timestamp(c.time)}" for c in witnessed.cosigners
        )
        return (
            f"The Ed25519 signature by {_named(key)} verifies. The receipt was first signed by "
            f"{_named(original)}; the checkpoint of {witnessed.size} leaves, which includes "
            f"it, was cosigned before then by the witnesses {who}, so key {key.kid} signed it "
            f"again at {format_timestamp(signature.signed_at)}."
        )
    return (
        f"The Ed25519 signature by {_named(key)} verifies. The receipt was first signed by "
        f"{_named(original)}; by the site's own record (its database's clock), the "
        f"checkpoint of {signature.evidence.tree_size} leaves it signed at "
        f"{format_timestamp(signature.evidence.signed_at)}, before then, already included "
        f"it, so key {key.kid} signed it again at {format_timestamp(signature.signed_at)}."
    )

"""The offline bundle (`GET /run/<id>/bundle.json`): everything a verifier needs in one file.

`{"bundle": "receipt-bundle/v1", "verification": …, "keys": …, "tlog_proof": …}`: the
verification JSON and the keys document exactly as their own routes serve them at this moment,
and the verification's log proof once more in the c2sp.org/tlog-proof text format (against the
witnessed checkpoint, cosignatures included, when there is one), so that standard tlog tooling
can check the inclusion too. Nothing here computes a check of its own.
"""

from __future__ import annotations

from typing import Any

from receiptsite.integrity import tlogproof
from receiptsite.integrity.encoding import b64decode
from receiptsite.ledger.keys_document import keys_document_json
from receiptsite.receipts.models import Receipt
from receiptsite.withdrawal.withdrawals import verification_answer

FORMAT = "receipt-bundle/v1"


def tlog_proof(log_part: dict[str, Any] | None) -> str | None:
    """The verification's `log` part as a c2sp.org/tlog-proof text (None while it has none):
    against the witnessed checkpoint, with its cosignature lines, when there is one (an
    offline verifier with the witness policy then needs nothing else), else against the
    latest checkpoint."""
    if log_part is None:
        return None
    against = log_part.get("witnessed") or log_part
    return tlogproof.format_proof(
        log_part["index"],
        [b64decode(h) for h in against["inclusion_proof"]],
        against["checkpoint"],
    )


def bundle_json(receipt: Receipt) -> tuple[dict[str, Any], int]:
    """The bundle of a receipt fetched as the verify route fetches it (verifiable()), and its
    status: 200, or 410 for a withdrawn receipt, whose bundle holds the verify route's 410
    answer (the kept leaf hash and its proof: its place in the log can still be shown)."""
    verification, status = verification_answer(receipt)
    body = {
        "bundle": FORMAT,
        "verification": verification,
        "keys": keys_document_json(),
        "tlog_proof": tlog_proof(verification["log"]),
    }
    return body, status


def filename(receipt: Receipt) -> str:
    return f"receipt-{receipt.uuid}.bundle.json"

"""receiptsite-client: publish execution receipts to a receiptsite and check them.

Never imports Django or the site: it speaks to a site over HTTP only. The core (this package,
client, outbox, document, transport, redaction, handoff, verify) imports no agent framework
either; each adapter module (langchain, crewai, openai_agents) imports its own.
"""

from __future__ import annotations

from receiptsite_client.client import Client, handoff_text
from receiptsite_client.document import new_idempotency_key, prepare
from receiptsite_client.outbox import (
    FAILED,
    PENDING,
    PUBLISHED,
    Entry,
    IdempotencyKeyReused,
    ReceiptStatus,
)

__all__ = [
    "FAILED",
    "PENDING",
    "PUBLISHED",
    "Client",
    "Entry",
    "IdempotencyKeyReused",
    "ReceiptStatus",
    "handoff_text",
    "new_idempotency_key",
    "prepare",
]

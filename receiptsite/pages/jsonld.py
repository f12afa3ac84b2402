"""The receipt page's machine-readable facts: a schema.org `DigitalDocument` in JSON-LD, so that
tools reading receipt pages find them without scraping.

It is a data block (`<script type="application/ld+json">`), which browsers never execute, so
the CSP's `script-src 'self'` (no `unsafe-inline`) neither blocks nor needs to allow it. Its
text is escaped as Django's `json_script` escapes: `<`, `>` and `&` as `\\u003C`, `\\u003E`,
`\\u0026`, so nothing a producer wrote (a `</script>` in a subject name) can end the block.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from receiptsite.receipts.models import Receipt, format_timestamp

_ESCAPES = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def receipt_facts(receipt: Receipt, doc: dict[str, Any]) -> dict[str, Any]:
    """The page's JSON-LD object: the columns the site vouches for (id, recorded_at, hash),
    and the names the document gives."""
    # A document changed behind the site's back may hold anything: the page still renders.
    subject = _object(doc.get("subject"))
    tenant = _object(doc.get("tenant"))
    facts: dict[str, Any] = {
        "@context": "https://schema.org",
        "@type": "DigitalDocument",
        "@id": receipt.url,
        "url": receipt.url,
        "identifier": receipt.uuid,
        "name": f"Execution receipt: {subject.get('name', '')}",
        "dateCreated": format_timestamp(receipt.recorded_at),
        "encodingFormat": "application/json",
        "additionalProperty": {
            "@type": "PropertyValue",
            "propertyID": "sha256",
            "name": "SHA-256 of the receipt's canonical bytes (RFC 8785)",
            "value": receipt.output_hash,
        },
    }
    if tenant.get("name"):
        facts["publisher"] = {"@type": "Organization", "name": tenant["name"]}
    return facts


def script_text(facts: dict[str, Any]) -> SafeString:
    """The JSON for inside `<script type="application/ld+json">…</script>`, escaped."""
    text = json.dumps(facts, ensure_ascii=False, separators=(",", ":")).translate(_ESCAPES)
    return mark_safe(text)  # noqa: S308 -- escaped just above

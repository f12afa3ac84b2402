"""What a producer's document becomes before anything is written or sent: a copy with an
idempotency key, metadata cut to an allowlist, secrets in free text redacted and long texts
cut, with the site's own patterns and limit (receiptsite_client.redaction, which the site
imports).

The site refuses an identifier (any string that is not free text) that looks like a secret:
it cannot be redacted without breaking what it correlates. Such a document is never sent; its
stored copy holds `[REDACTED]` in place of the value, so the secret reaches neither the disk nor
the network, and the entry is failed at once, naming the field.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, Final

from receiptsite_client.redaction import (
    DEFAULT_LIMIT,
    REDACTED,
    find_secrets,
    redact_text,
    truncate,
)

# The free-text fields of receipt/v1 (JSON Pointers; "*" is every entry of a list, or every
# value of the metadata object), and whether each is cut to the text limit. The site's
# declaration (receiptsite.evidence.declaration) is the source; a test compares the two.
FREE_TEXT: Final[dict[str, bool]] = {
    "/input_summary": True,
    "/result": True,
    "/observed/*": False,
    "/not_observed/*": False,
    "/attempt/retry_reason": False,
    "/metadata/*": False,
}

SECRET_IDENTIFIER: Final = "looks like a secret"


@dataclass(frozen=True)
class Prepared:
    document: dict[str, Any]
    # JSON Pointers of identifiers that looked like secrets (their values now [REDACTED]).
    refused: tuple[str, ...] = ()

    @property
    def refusal(self) -> str | None:
        if not self.refused:
            return None
        fields = ", ".join(self.refused)
        return (
            f"not sent: {fields} {SECRET_IDENTIFIER} (the site refuses a secret in a field "
            f"that is not free text); the value was replaced by {REDACTED} before it was stored"
        )


def new_idempotency_key() -> str:
    return f"rsc-{uuid.uuid4()}"


def prepare(
    document: object,
    *,
    limit: int = DEFAULT_LIMIT,
    metadata_allowlist: Collection[str] | None = None,
) -> Prepared:
    """A redacted copy of `document`, ready to store and send.

    TypeError for a document that is not a JSON object, or holds values JSON cannot carry;
    everything else (a missing field, a wrong type) is left for the site to judge.
    """
    if not isinstance(document, dict):
        raise TypeError(f"a receipt document is a dict, not {type(document).__name__}")
    try:
        doc: dict[str, Any] = json.loads(json.dumps(document, allow_nan=False))
    except ValueError as error:
        raise TypeError(f"the document cannot be sent as JSON: {error}") from error

    if doc.get("idempotency_key") is None:
        doc["idempotency_key"] = new_idempotency_key()

    metadata = doc.get("metadata")
    if isinstance(metadata, dict) and metadata_allowlist is not None:
        allowed = set(metadata_allowlist)
        doc["metadata"] = {k: v for k, v in metadata.items() if k in allowed}

    for _pointer, container, key, cut in free_texts(doc):
        text, _removed = redact_text(container[key])
        if cut:
            text, _cut = truncate(text, limit)
        container[key] = text

    refused: list[str] = list(_rename_secret_keys(doc, ""))
    places = {(id(container), key) for _, container, key, _ in free_texts(doc)}
    for pointer, container, key in _identifiers(doc, ""):
        if (id(container), key) in places:
            continue
        if find_secrets(container[key]):
            refused.append(pointer)
            container[key] = new_idempotency_key() if pointer == "/idempotency_key" else REDACTED
    return Prepared(doc, tuple(refused))


def free_texts(doc: dict[str, Any]) -> Iterator[tuple[str, Any, Any, bool]]:
    """(pointer, container, key, cut) of every free-text string in the document."""
    for pattern, cut in FREE_TEXT.items():
        parts = pattern.strip("/").split("/")
        yield from _walk(doc, parts, "", cut)


def _walk(node: Any, parts: list[str], at: str, cut: bool) -> Iterator[tuple[str, Any, Any, bool]]:
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, list):
            keys: list[Any] = list(range(len(node)))
        elif isinstance(node, dict):
            keys = list(node)
        else:
            return
    elif isinstance(node, dict) and head in node:
        keys = [head]
    else:
        return
    for key in keys:
        here = f"{at}/{_escape(str(key))}"
        if rest:
            yield from _walk(node[key], rest, here, cut)
        elif isinstance(node[key], str):
            yield here, node, key, cut


def _rename_secret_keys(node: Any, at: str) -> Iterator[str]:
    """Object keys that look like secrets (the site refuses them as unknown keys anyway) are
    replaced, so that they are not stored either; yields their pointers."""
    children: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key in list(node):
            if find_secrets(key):
                yield f"{at}/{REDACTED}"
                value = node.pop(key)
                node[REDACTED] = value
                key = REDACTED
            children.append((f"{at}/{_escape(key)}", node[key]))
    elif isinstance(node, list):
        children = [(f"{at}/{index}", value) for index, value in enumerate(node)]
    for here, value in children:
        yield from _rename_secret_keys(value, here)


def _identifiers(node: Any, at: str) -> Iterator[tuple[str, Any, Any]]:
    """(pointer, container, key) of every string in the document, free text included."""
    items: list[tuple[Any, Any]]
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return
    for key, value in items:
        here = f"{at}/{_escape(str(key))}"
        if isinstance(value, str):
            yield here, node, key
        else:
            yield from _identifiers(value, here)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")

"""Naming a receipt as an auditor does: by what the pages show of it, never by the database's
internal number. Three ways, wherever an auditor searches or picks a receipt (the decision
form, the admin's searches of receipts and decisions):

- its id, a UUID, in any case, with or without its hyphens;
- its short id: the first 8 characters of the id, which the pages show beside a link (or any
  longer start of the id);
- a link that names it: its page `/run/<id>`, or any other route of it (`/api/receipt/<id>/
  verify`, `/run/<id>/handoff.txt`, ...), with or without the site's address.

A short id is looked up as a range of ids (every UUID that starts with it lies between the two
ids that start with it and continue with 0s and with fs), so it reads the receipts' unique
index on both databases, as the whole id does."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from django.db.models import Q

from receiptsite.capability import RECEIPT_ID_PATTERN

SHORT_ID_LENGTH = 8
_IN_TEXT = re.compile(RECEIPT_ID_PATTERN)
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class Named:
    """What a text names: one whole id, or the start of ids (`prefix`, lowercase hex)."""

    id: uuid.UUID | None = None
    prefix: str = ""

    def q(self, field: str = "public_id") -> Q:
        """The receipts it names, as a filter on `field` (a UUIDField)."""
        if self.id is not None:
            return Q(**{field: self.id})
        low = uuid.UUID(self.prefix.ljust(32, "0"))
        high = uuid.UUID(self.prefix.ljust(32, "f"))
        return Q(**{f"{field}__gte": low, f"{field}__lte": high})


def short_id(public_id: uuid.UUID | str) -> str:
    """The short id the pages show of a receipt."""
    return str(public_id)[:SHORT_ID_LENGTH]


def named(text: str) -> Named | None:
    """What `text` names (a whole id, a link, or a short id), or None when it names no
    receipt's id in any of those ways."""
    text = text.strip()
    if not text:
        return None
    if "/" in text:
        # A link: the id in it, wherever the route puts it.
        found = _IN_TEXT.search(text)
        return Named(id=uuid.UUID(found.group(0))) if found else None
    bare = text.lower()
    try:
        return Named(id=uuid.UUID(bare))
    except ValueError:
        pass
    hexed = bare.replace("-", "")
    if not (SHORT_ID_LENGTH <= len(hexed) < 32 and _HEX.fullmatch(hexed)):
        return None
    # The start of an id, without its hyphens or with them where an id has them.
    hyphenated = "-".join(
        part for part in (hexed[:8], hexed[8:12], hexed[12:16], hexed[16:20], hexed[20:]) if part
    )
    if "-" in bare and not hyphenated.startswith(bare.rstrip("-")):
        return None
    return Named(prefix=hexed)

"""A logging filter that keeps capability URLs out of the logs.

A receipt link is a capability: whoever holds it can read the receipt. So no log line may hold
a receipt id in full: Django's "Not Found: /run/<id>" warnings, the development server's and
gunicorn's access lines included. Every UUID in a line is cut to its first 8 hex digits.
"""

from __future__ import annotations

import logging
import re

UUID_RE = re.compile(
    r"([0-9a-fA-F]{8})-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)


def mask(text: str) -> str:
    return UUID_RE.sub(r"\1-…", text)


class MaskCapabilityURLs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler's own error path
            return True
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        # Django's request logger puts the request on the record; handlers that format it
        # (e.g. AdminEmailHandler) would print the path again.
        if hasattr(record, "request"):
            record.request = None
        return True

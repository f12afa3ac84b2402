"""The site's one logging configuration, shared by Django (settings.LOGGING) and gunicorn
(gunicorn.conf.py's logconfig_dict), and the filter that keeps capability URLs out of it.

A receipt link is a capability: whoever holds it can read the receipt. So no log line may hold
a receipt id in full: Django's "Not Found: /run/<id>" warnings, the development server's and
gunicorn's access lines and gunicorn's "Error handling request /run/<id>" included. Every
handler below passes MaskCapabilityURLs, which cuts every UUID in a line to its first 8 hex
digits.

Events go to stderr and gunicorn's access lines to stdout, one line each, so that the process
supervisor (systemd, a container runtime) collects them; no log files to rotate.
"""

from __future__ import annotations

import logging
import re
from typing import Any

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


def logging_config(level: str) -> dict[str, Any]:
    """The dictConfig for `level` (a name such as "INFO", see config.log_level)."""
    masked = {"filters": ["capability_urls"], "class": "logging.StreamHandler"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"capability_urls": {"()": "receiptsite.logconfig.MaskCapabilityURLs"}},
        "formatters": {
            "generic": {
                "format": "%(asctime)s [%(process)d] [%(levelname)s] %(name)s: %(message)s",
                "datefmt": "[%Y-%m-%d %H:%M:%S %z]",
            },
            "access": {"format": "%(message)s"},
        },
        "handlers": {
            "console": {**masked, "formatter": "generic", "stream": "ext://sys.stderr"},
            "access": {**masked, "formatter": "access", "stream": "ext://sys.stdout"},
        },
        "root": {"handlers": ["console"], "level": level},
        # Django's and gunicorn's own loggers come with handlers of their own (Django's
        # DEFAULT_LOGGING, gunicorn's defaults, which logconfig_dict replaces key by key):
        # theirs are replaced here, so that every line passes the mask.
        "loggers": {
            "django": {"handlers": ["console"], "level": level, "propagate": False},
            "django.server": {"handlers": ["console"], "level": level, "propagate": False},
            "gunicorn.error": {"handlers": ["console"], "level": level, "propagate": False},
            # The access log is on or off, not a level: every request is one line.
            "gunicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }

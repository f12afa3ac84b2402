"""The site's one logging configuration, shared by Django (settings.LOGGING) and gunicorn
(gunicorn.conf.py's logconfig_dict): one JSON object per line, with capabilities and
credentials cut out.

A receipt link is a capability: whoever holds it can read the receipt. So no log line may hold
a receipt id in full, nor most of one (any run of 16 or more hex digits is cut to its first 8):
Django's "Not Found: /run/<id>" warnings, the development server's and gunicorn's access lines
and gunicorn's "Error handling request /run/<id>" included, and however the id was spelt in the
request (any case, with its hyphens written `%2D`, its digits percent-encoded: Django decodes
the path before routing, so each of these is served). An API key is a credential: it is cut to
its public prefix, and the Authorization header is never logged. Every handler below passes
MaskCapabilityURLs, and JSONFormatter masks the whole line once more, exception text included.

Each line is one JSON object: `time` (UTC, RFC 3339), `level`, `logger`, `pid`, `message`, and
`request_id` when a request is being served (RequestIDMiddleware sets it in `request_id`, a
context variable; an access line takes it from the response's X-Request-ID header, since
gunicorn logs after the answer). Access lines add `method`, `path` (masked), `status` and
`duration_ms`. Events go to stderr and gunicorn's access lines to stdout, one line each, so that
the process supervisor (systemd, a container runtime) collects them; no log files to rotate.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

# The request being served in this thread (set and reset by RequestIDMiddleware).
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)

# One hex digit as a URL may spell it: itself, or percent-encoded (%30-%39, %41-%46, %61-%66).
_HEX = r"(?:[0-9a-fA-F]|%3[0-9]|%[46][1-6])"
# A UUID's separator: a hyphen, percent-encoded or not, or none at all.
_SEP = r"(?:-|%2[dD])?"
# Any run of 16 or more hex digits, separators allowed between: a receipt id (32 digits),
# but also most of one (a request for an id one digit short would otherwise log 31 of its
# 32 digits). Its first 8 digits are kept, as much of an id as a log line may hold.
ID_RUN_MIN = 16
HEX_RUN_RE = re.compile(rf"({_HEX}(?:{_SEP}{_HEX}){{7}})(?:{_SEP}{_HEX}){{{ID_RUN_MIN - 8},}}")
# An API key: "rk_", its public prefix (12 hex digits), "_", its secret.
API_KEY_RE = re.compile(r"\b(rk_[0-9a-fA-F]{12})_[A-Za-z0-9_-]+")
# A bearer credential of any kind, wherever it might be quoted.
BEARER_RE = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+")
# The request ids the site makes itself (uuid4().hex): left whole in `request_id`, so that a
# line can be matched with the X-Request-ID a client quotes. Any other id is masked like text.
SITE_REQUEST_ID_RE = re.compile(r"[0-9a-f]{32}")
# Request headers and environ entries gunicorn hands its access log as atoms: never kept.
_SECRET_ATOM_RE = re.compile(r"(?i)authorization|cookie|api[-_]?key")
# An atom named in a %-style line format.
_ATOM_RE = re.compile(r"%\(([^)]*)\)")


def mask(text: str) -> str:
    text = API_KEY_RE.sub(r"\1_…", text)
    text = HEX_RUN_RE.sub(r"\1-…", text)
    return BEARER_RE.sub(r"\1 …", text)


def _masked_request_id(value: object) -> str | None:
    if not isinstance(value, str) or not value or value == "-":
        return None
    return value if SITE_REQUEST_ID_RE.fullmatch(value) else mask(value)


class MaskCapabilityURLs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # Django's request logger puts the request on the record; handlers that format it
        # (e.g. AdminEmailHandler) would print the path again. Its id is all we keep of it
        # (Django logs a 4xx/5xx after the middleware has returned, so the context variable is
        # already reset by then).
        rid = getattr(record, "request_id", None)
        request = getattr(record, "request", None)
        if request is not None:
            rid = rid or getattr(request, "request_id", None)
            record.request = None
        rid = rid or request_id.get()
        args = record.args
        if isinstance(args, MutableMapping) and record.name == "gunicorn.access":
            # Gunicorn's access atoms: every request header, response header and environ entry
            # rides along (some 60 of them). Only the atoms the line's format names are kept,
            # a secret one as "-": the rest (the Authorization header, cookies) are never
            # printed, and go, so that nothing reading the record later (an error reporter's
            # logging integration) finds them. The kept values are masked with the message.
            rid = args.get("{x-request-id}o") or rid
            record.access = _access_fields(args)
            record.args = {
                key: "-" if _SECRET_ATOM_RE.search(key) else _atom(args, key)
                for key in _format_atoms(str(record.msg))
            }
        elif isinstance(args, MutableMapping):
            for key, value in args.items():
                if _SECRET_ATOM_RE.search(str(key)):
                    args[key] = "-"  # what gunicorn prints for an atom it does not have
                elif isinstance(value, str):
                    args[key] = mask(value)
        record.request_id = rid
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler's own error path
            return True
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


@functools.lru_cache(maxsize=8)
def _format_atoms(line_format: str) -> tuple[str, ...]:
    """The atoms an access line's format names (`%(h)s`, `%({x-request-id}o)s`, ...)."""
    return tuple(dict.fromkeys(_ATOM_RE.findall(line_format)))


def _atom(atoms: Mapping[str, Any], key: str) -> Any:
    # As gunicorn looks an atom up (glogging.SafeAtoms): headers and environ entries by their
    # lower-case name, "-" for one it does not have.
    if key in atoms:
        return atoms[key]
    return atoms.get(key.lower(), "-") if key.startswith("{") else "-"


class JSONFormatter(logging.Formatter):
    """One JSON object per line (see the module's docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": mask(record.getMessage()),
        }
        line.update(getattr(record, "access", None) or {})
        if (rid := _masked_request_id(getattr(record, "request_id", None))) is not None:
            line["request_id"] = rid
        if record.exc_info:
            line["exception"] = mask(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exception"] = mask(record.exc_text)
        if record.stack_info:
            line["stack"] = mask(self.formatStack(record.stack_info))
        return json.dumps(line, ensure_ascii=False, default=str)


def _access_fields(atoms: MutableMapping[str, Any]) -> dict[str, Any]:
    """The parts of gunicorn's access atoms a reader filters on."""
    fields: dict[str, Any] = {
        "method": atoms.get("m"),
        "path": mask(str(atoms.get("U") or "")),
    }
    try:
        fields["status"] = int(str(atoms.get("s")))
    except ValueError:
        fields["status"] = atoms.get("s")
    duration = atoms.get("D")
    if isinstance(duration, int):
        fields["duration_ms"] = round(duration / 1000, 3)
    return fields


def logging_config(level: str) -> dict[str, Any]:
    """The dictConfig for `level` (a name such as "INFO", see config.log_level)."""
    masked = {"filters": ["capability_urls"], "class": "logging.StreamHandler"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"capability_urls": {"()": "receiptsite.logconfig.MaskCapabilityURLs"}},
        "formatters": {"json": {"()": "receiptsite.logconfig.JSONFormatter"}},
        "handlers": {
            "console": {**masked, "formatter": "json", "stream": "ext://sys.stderr"},
            "access": {**masked, "formatter": "json", "stream": "ext://sys.stdout"},
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

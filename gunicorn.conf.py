"""Gunicorn configuration for production: `python -m receiptsite.serve` (receiptsite/serve.py:
`gunicorn receiptsite.wsgi -c gunicorn.conf.py`, the site's settings checked first).

Gunicorn reads this file (it is the default `./gunicorn.conf.py`, so `-c` may be left out when
serving from the repository root). Everything comes from the environment, like the site's own
settings:

| variable          | meaning                                                                  |
|-------------------|--------------------------------------------------------------------------|
| `WEB_CONCURRENCY` | number of worker processes; default 2 × CPU cores + 1, at most 12        |
| `BIND`            | address(es) to listen on, comma-separated (`0.0.0.0:8000`, `unix:/run/x`)|
| `PORT`            | used when `BIND` is unset: listen on `127.0.0.1:$PORT`                   |
| `TRUSTED_PROXIES` | proxies (addresses, CIDR ranges) whose `X-Forwarded-Proto` is believed   |
| `LOG_LEVEL`       | the level of every log, gunicorn's and Django's (default `info`, any case)|
| `GUNICORN_CONTROL_SOCKET` | path of gunicorn's control socket; unset: no control socket       |
| `METRICS_DIR`     | the workers' metrics files (emptied at start); unset: a private folder    |

The default address is loopback (127.0.0.1:8000): the site is meant to sit behind a reverse
proxy on the same host that terminates TLS. In a container, set `BIND=0.0.0.0:8000`.

The site's own settings are read here too, in the master, before any worker starts: a variable
the site cannot use (a missing signing key, a malformed RATE_LIMITS, ...) stops gunicorn with
one line naming it, and the workers, forked from the master, inherit exactly what was checked.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import gunicorn.util
from django.core.exceptions import ImproperlyConfigured

from receiptsite.config import ConfigurationError, stop_line


def _cores() -> int:
    # The CPUs this process may actually run on (a container's cpuset), not the host's count.
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- the site's settings ------------------------------------------------------------------------

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receiptsite.settings")
try:
    site = importlib.import_module(os.environ["DJANGO_SETTINGS_MODULE"])
except ImproperlyConfigured as error:
    # Gunicorn reports an exception in its configuration file with a traceback; SystemExit
    # is the one way out that prints just the message.
    raise SystemExit(stop_line(error)) from None


# --- processes --------------------------------------------------------------------------------

# Sync workers: each request holds one worker for its whole length, which suits a site whose
# requests are short database transactions. 2 × cores + 1 is gunicorn's own rule of thumb; the
# cap keeps a large host from opening more database connections than PostgreSQL's default
# max_connections (100) comfortably serves when several sites share it. An explicit
# WEB_CONCURRENCY is taken as given.
# WEB_CONCURRENCY is read and checked with the site's settings (receiptsite/config.py); gunicorn
# itself parses it too, when it is imported, before this file runs: receiptsite/serve.py reads the
# settings before it imports gunicorn, so that a bad value is named in one line.
workers = site.WEB_CONCURRENCY or min(2 * _cores() + 1, 12)

# The application is loaded in each worker after the fork (no preload_app): a database
# connection opened in the master would otherwise be shared by every worker. (The settings,
# read above in the master, open nothing; the workers inherit them, signing key included, so
# every worker signs with the key the master checked.)
preload_app = False

# --- listening ----------------------------------------------------------------------------------

bind = [
    address.strip()
    for address in (os.environ.get("BIND") or f"127.0.0.1:{os.environ.get('PORT') or 8000}").split(
        ","
    )
    if address.strip()
]
backlog = 2048

# Only the proxies of TRUSTED_PROXIES (addresses and CIDR ranges, parsed and checked with the
# site's settings) may tell gunicorn the request came over HTTPS, and only by X-Forwarded-Proto
# (gunicorn's default also believes X-Forwarded-Ssl and X-Forwarded-Protocol, which the proxy
# of the README neither sets nor clears). Unset means nobody: gunicorn's own default would
# trust 127.0.0.1. The site makes the same decision itself (ForwardedProtoMiddleware), so that
# it holds under any server.
forwarded_allow_ips = ",".join(str(network) for network in site.TRUSTED_PROXIES)
secure_scheme_headers = {"X-FORWARDED-PROTO": "https"}

# --- timeouts -----------------------------------------------------------------------------------

# A request is a few short queries plus one Ed25519 signature, and a database that cannot be
# reached fails within DATABASE_TIMEOUT (the connect timeout, 5 s by default) as a 503. A worker
# silent for 30 s is therefore stuck (say, on an open connection to a database server that
# stopped answering, which no connect timeout covers), and is killed and replaced.
timeout = 30
# On SIGTERM (a deploy), workers get this long to finish the requests they hold: a receipt being
# stored is committed and answered, not cut off.
graceful_timeout = 30
# Keep-alive between the proxy and gunicorn (sync workers ignore it; harmless there).
keepalive = 5
# Recycle each worker now and then, so that a slow leak cannot grow without bound; the jitter
# keeps all workers from restarting at once. Rarely: starting a worker costs about a second of
# CPU (Django and the site imported, the static files indexed), and at a few hundred requests
# a second, recycling every 2,000 took a fifth of the site's CPU.
max_requests = 50000
max_requests_jitter = 5000


def post_worker_init(worker: Any) -> None:
    """Once a worker has loaded the site: everything loaded so far (Django, the site, their
    modules, about 100,000 objects) is moved out of the garbage collector's reach
    (gc.freeze). A full collection then looks only at what was made since, instead of pausing
    every thread of the worker for tens of milliseconds each time (seen: 70 ms pauses, one
    every 500 pages), which lands in the tail of whatever requests the worker holds."""
    gc.freeze()


# The heartbeat file of each worker: in memory when available, since a slow or full disk must
# not make the master think its workers hang.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"

# --- metrics ------------------------------------------------------------------------------------

# /metrics sums what every worker counted (receiptsite/metrics): prometheus_client's
# multiprocess mode, in which each process keeps its values in files of one folder, named by
# PROMETHEUS_MULTIPROC_DIR. That variable must be set before a worker imports
# prometheus_client, so the master sets it when it starts (on_starting), before it forks any
# worker; nothing in the master imports prometheus_client before then. The folder must start
# empty (values left by another run would be added in): by default a new private folder
# (mode 700), in memory when /dev/shm is there (like the heartbeat files), made per master, so
# that two masters (the old and the new during a deploy, two sites on one host) never add up
# each other's counts, and removed when the master exits. METRICS_DIR names a folder instead
# (made if missing); its metrics files are removed when the master starts. A reload (HUP)
# keeps the folder and the counts; a re-exec (USR2) is a new master, with a folder of its own.
_metrics_dir = os.environ.get("METRICS_DIR", "").strip()
if _metrics_dir:
    try:
        Path(_metrics_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(_metrics_dir, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as error:
        raise SystemExit(stop_line(ConfigurationError(
            "METRICS_DIR", f"names {_metrics_dir}, which cannot be used as a folder for the "
            f"workers' metrics ({error.strerror or error})",
        ))) from None  # fmt: skip


def _remove_folder(path: str, master: int) -> None:
    # atexit runs in every process that exits through Python, the workers forked from the
    # master included: only the master that made the folder removes it.
    if os.getpid() == master:
        shutil.rmtree(path, ignore_errors=True)


def on_starting(server: Any) -> None:
    if _metrics_dir:
        folder = _metrics_dir
        for stale in Path(folder).glob("*.db"):
            stale.unlink(missing_ok=True)
    else:
        folder = tempfile.mkdtemp(
            prefix="receiptsite-metrics-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        )
        # Also when the master stops before serving (an address it cannot bind).
        atexit.register(_remove_folder, folder, os.getpid())
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder


def child_exit(server: Any, worker: Any) -> None:
    # prometheus_client's bookkeeping for a worker that is gone (its live gauges' files); its
    # counts stay, summed in with the others'.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


# --- control socket ---------------------------------------------------------------------------

# Gunicorn 25.1+ opens a control socket (for `gunicornc`: change the worker count, reload, shut
# down) at one fixed path per user ($XDG_RUNTIME_DIR/gunicorn.ctl or ~/.gunicorn/gunicorn.ctl).
# Two masters of one user (a second site, the old and the new master during a deploy, the live
# tests) would fight over that one path, and it is an administrative door nobody asked for: off
# unless GUNICORN_CONTROL_SOCKET names a path for this instance. (Older gunicorns ignore both.)
control_socket_disable = not os.environ.get("GUNICORN_CONTROL_SOCKET")
if os.environ.get("GUNICORN_CONTROL_SOCKET"):
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]

# --- requests gunicorn refuses itself ---------------------------------------------------------

# The request line (method, path and query string, version) may be up to 8190 bytes, gunicorn's
# maximum (its default is 4094); headers stay at gunicorn's defaults (100 of them, 8190 bytes
# each). Bodies are bounded by the site itself (RECEIPT_MAX_BYTES, BATCH_MAX_BYTES).
limit_request_line = 8190

# A request gunicorn cannot accept (a request line over that limit: 414; too many or too large
# headers: 431; a request that is not HTTP: 400) is answered by gunicorn before the site sees it,
# with an HTML page of its own. Every error of the site's API is problem+json, and at this
# point nobody knows which route was meant; so gunicorn's one writer of those pages
# (gunicorn.util.write_error, called as util.write_error by its workers, the same from
# gunicorn 23 to 27) is replaced here, in the master, before any worker forks: every such
# answer is problem+json, whatever the path. tests/live/test_http_edges.py checks it live.
_PROBLEMS = {
    400: ("bad-request", "Bad request"),
    403: ("forbidden", "Forbidden"),
    414: ("uri-too-long", "The request line is too long"),
    417: ("expectation-failed", "Expectation failed"),
    431: ("request-header-fields-too-large", "The request headers are too large"),
    501: ("not-implemented", "Not implemented"),
}


def _write_problem(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    slug, title = _PROBLEMS.get(status_int, ("server-error", "Server error"))
    if status_int == 414:
        detail = f"The request line (method, path and query) is over {limit_request_line} bytes."
    else:
        detail = mesg or reason
    body = json.dumps(
        {
            "type": f"{site.SITE_URL}/problems/{slug}",
            "title": title,
            "status": status_int,
            "detail": detail,
        },
        ensure_ascii=False,
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/problem+json\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"X-Request-ID: {uuid.uuid4().hex}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    # Counted like the site's own problems (receiptsite_problems_total), in the worker, where
    # the site is loaded, before the answer goes out (a scrape after it sees the count), and
    # never in its way.
    with contextlib.suppress(Exception):
        from receiptsite import metrics

        metrics.count_problem(slug, status_int)
    gunicorn.util.write_nonblock(sock, head.encode("latin-1") + body)


gunicorn.util.write_error = _write_problem

# --- logs ---------------------------------------------------------------------------------------

# One logging configuration for gunicorn and Django: settings.LOGGING, made by
# receiptsite.logconfig. Gunicorn writes two logs of its own that Django never sees: the access
# log (every request line, with the path and the Referer, which is often a receipt page) and the
# error log ("Error handling request /run/<id>"). A receipt link is a capability, so their
# handlers, like Django's, pass receiptsite.logconfig.MaskCapabilityURLs, which cuts every run
# of 16 or more hex digits (a UUID, or most of one) in a line to its first 8 (and an API key to
# its prefix). Every line is one JSON object with the request id; the access log goes to stdout,
# everything else to stderr.
loglevel = site.LOG_LEVEL.lower()
accesslog = None  # the access handler comes from logconfig_dict, with the filter
# The access line's `message`: client, time, request line, status, size, duration in
# microseconds, referer, user agent. The JSON line around it (receiptsite.logconfig) adds the
# method, the masked path, the status, the duration in ms and the request id as fields of their
# own.
access_log_format = '%(h)s %(t)s "%(r)s" %(s)s %(b)s %(D)sus "%(f)s" "%(a)s"'
logconfig_dict = site.LOGGING

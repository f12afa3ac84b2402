#!/usr/bin/env python
"""The site under load: a real gunicorn, a real database, wrk on loopback.

Run from the repository root:

    .venv/bin/python bench/run.py                          # PostgreSQL, 100,000 receipts
    .venv/bin/python bench/run.py --database sqlite
    .venv/bin/python bench/run.py --receipts 1000000       # the large run
    .venv/bin/python bench/run.py --sizes 10000,1000000    # how reads scale with the data set
    .venv/bin/python bench/run.py --front nginx            # every route through nginx, over TLS
    .venv/bin/python bench/run.py --repeat 3               # the targets judged in 3 rounds

What it does, in order:

1. A database of its own: on PostgreSQL (the default) a database `bench_run_<random>` created
   on the local server (`--database-url` names another server or name) and dropped at exit
   (bench/_common.py); with `--database sqlite`, a file in a temporary directory. A signing
   key, LOG_STATE_FILE, SECRET_KEY and VAR_DIR in that directory too. `migrate`, static files
   collected, two tenants with one API key each.
2. The fill: `--receipts` receipts (or each size of `--sizes` in turn, filling up to the next
   size between measurements) that verify, made in `--fill-processes` processes and written
   with COPY (PostgreSQL) or executemany (SQLite) in the shape the site writes them: Receipt,
   LogEntry, every complete-subtree LogNode and one Checkpoint per tree size, whose hashes come
   from an independent tree builder (bench/_fill.py's, which log_scaling.py uses too). A
   receipt whose body holds a secret is built by the site's own functions, as an ingest builds
   it (document.validate, links, redact.redact, document.evidence_document, canonical_bytes);
   the others by the same steps with json.dumps(sort_keys=True) for the RFC 8785 bytes (the
   pure-Python serialiser would take most of the fill's time), and one in SITE_SAMPLE both
   ways, which must agree to the byte. Every receipt is signed with the site's key (keyring,
   integrity.keys.sign) and its stored columns come from evidence.columns_of. The final head is
   then signed with the site's code (log.sign_head(), which also writes LOG_STATE_FILE), and a
   few random receipts must verify "valid" in-process. The contents vary as a real tenant's do:
   workflows of a dozen receipts (tool starts and ends, retries, a completion linking its
   children, a confirmation or hand-off naming its parent), sessions of four workflows, two
   dozen subjects of unequal popularity, every phase and outcome, one receipt in ten of a
   second tenant, about 1.8 KB of canonical bytes each, now and then a secret the site redacts.
3. The site: `gunicorn receiptsite.wsgi -c gunicorn.conf.py -k gthread -w 2 --threads 4`
   (`--workers`, `--threads`) with RATE_LIMITS=off, and for the baseline the same command
   line serving bench/raw_wsgi.py (a fixed 2 KB JSON answer), one at a time.
4. Before the load, one answer of each route is checked properly: verify says "valid", the
   page is 200 with the receipt and without the tamper warning, each list answer is the
   receipts the same filter selects in the database, ingest is 201 and what it stored
   verifies. Then wrk (`-t 2 -c 16`, `--duration` seconds per route after `--warmup`
   seconds) drives each route from its own process: the Lua scripts in bench/wrk/ pick a
   random stored id (or filter value) per request, give every POST new idempotency keys, and
   count every answer outside 2xx. While wrk runs, the VmHWM of each gunicorn worker is read
   from /proc/<pid>/status (workers are recycled after max_requests, so all of them are
   followed).
5. Printed: requests/s, receipts/s (ingest: how much the stored log grew during the timed
   run, so a batch still being stored at the end counts), p50 and p99 latency, non-2xx
   answers and socket errors, the peak RSS per worker, each figure's ratio to the raw
   baseline of the same run,
   the targets and whether each holds; with `--sizes`, the read latencies at each size and
   the largest size's as a ratio to the smallest; the query plans (EXPLAIN, or EXPLAIN QUERY
   PLAN on SQLite) of the SQL that verify, the page and each list filter run, captured from
   one request each in-process (django.test.utils.CaptureQueriesContext).

With `--repeat N`, the targets' routes (the raw baseline, `/healthz`, verify, the page, single
and batch ingest) are measured N times at the largest size, each round with its own raw
baseline and gunicorns, one after another; each target is judged within each round and printed
with every round's figure and in how many rounds it held. One run moves by a sixth or more on
a shared machine, more than most changes: a target judged over rounds says more than one run.
The lists are measured in the first round only; each round's ingest adds to the data set.

The script exits 1 only if a result is wrong: a check before the load fails, a non-2xx answer
during it, ingest answers for more receipts than the log grew by, a receipt that does not
verify. It has no timing thresholds: a missed target is printed, not an error. wrk is
Debian's package `wrk`; when it is missing the script installs it with apt-get as root, and
otherwise stops with a line saying how (scripts/test installs it before the tests).

With `--front nginx`, every route is measured through Debian's nginx (/usr/sbin/nginx) serving
the shipped deploy/nginx/receiptsite.conf, rendered by bench/_nginx.py (as tests/live/
test_nginx.py renders it: the run's ports, a self-signed certificate for receipts.test, the
gunicorn of step 3 as the upstream, STATIC_ROOT, the log and cache folders in the temporary
directory; Debian's stock worker_processes auto and worker_connections 768) in front of the
same gunicorn, over TLS: the site runs with SITE_URL=https://receipts.test:<port>,
ALLOWED_HOSTS=receipts.test and TRUSTED_PROXIES=127.0.0.1, wrk connects to
https://127.0.0.1:<port> with Host receipts.test:<port> (its SNI is 127.0.0.1: nginx has that
one server on the port), and the checks of step 4 go through nginx too. The baseline is then
nginx serving a static 2 KB file (the raw baseline's answer, written into STATIC_ROOT) through
the same nginx and TLS, in the same run, instead of the raw WSGI application; the RSS and `wk`
columns are those of the server that answered: for the file, nginx's children (its workers, and
its cache manager and loader), for every route, gunicorn's workers. The targets are judged
against the raw WSGI baseline, so only without --front.

This file is the command line and the order of the run; the parts are in bench/siteload/:
dataset.py (what the receipts hold), fill.py (the fill, on bench/_fill.py), server.py (the
settings, the database set up, gunicorn), load.py (wrk and what it counts), routes.py (each
route's check and load), figures.py (the tables, ratios and targets) and plans.py (EXPLAIN).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import _nginx  # noqa: E402
import raw_wsgi  # noqa: E402
from _common import Wrong, fail  # noqa: E402
from siteload import figures, server  # noqa: E402
from siteload.dataset import DAYS, SLOTS, Shape  # noqa: E402
from siteload.figures import Measure  # noqa: E402
from siteload.fill import Filler  # noqa: E402
from siteload.load import Load, find_wrk  # noqa: E402
from siteload.plans import print_plans  # noqa: E402
from siteload.routes import Routes  # noqa: E402
from siteload.server import Server  # noqa: E402

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/"
RAW_BASELINE = figures.RAW
STATIC_BASELINE = "nginx static 2 KB file"  # --front nginx's baseline
STATIC_FILE = "bench-2kb.json"  # written into STATIC_ROOT: raw_wsgi.BODY, served by nginx
# The live table's header; through nginx its ratios are to the static file (x 2KB).
FRONT_HEADER = figures.HEADER.replace("x raw:", "x 2KB:")


def parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] < SLOTS * 10:
        raise argparse.ArgumentTypeError(f"sizes must be at least {SLOTS * 10}")
    return sizes


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument(
        "--database-url",
        default="",
        help="with --database postgresql: postgres://user@host:port/NAME, NAME created for the "
        f"run and dropped at exit (default {DEFAULT_SERVER}bench_run_<random>)",
    )
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--receipts", type=int, default=100_000, help="receipts in the data set")
    parser.add_argument(
        "--sizes", type=parse_sizes, default=None,
        help="comma-separated data-set sizes: reads measured at each (overrides --receipts)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (-w)")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker (--threads)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (-c)")
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (-t)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of load per route")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of untimed load first")
    parser.add_argument(
        "--fill-processes", type=int, default=os.cpu_count() or 1,
        help="processes building and signing the documents of the fill",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=8785)
    parser.add_argument(
        "--repeat", type=int, default=1,
        help="rounds of the targets' routes at the largest size (the raw baseline, /healthz, "
        "verify, the page, ingest), each judged against its own baseline: how often each "
        "target holds, not one run's word",
    )  # fmt: skip
    parser.add_argument(
        "--front", choices=("direct", "nginx"), default="direct",
        help="direct: wrk to gunicorn, the raw WSGI app the baseline (the default); nginx: "
        "through Debian's nginx serving deploy/nginx/receiptsite.conf over TLS, nginx serving "
        "a static 2 KB file the baseline",
    )  # fmt: skip
    return parser


def again(
    count: int, routes: Routes, env: dict[str, str], flags: list[str], tmp: Path, size: int
) -> list[dict[str, Measure]]:
    """`count` more rounds of the targets' routes (--repeat), each with its own raw baseline
    and gunicorns, as the first round measured them; the lists only in the first. The data
    set grows by what each round's ingest stores."""
    rounds = []
    for number in range(2, count + 2):
        print(f"\nround {number} of {count + 1}:")
        measured: dict[str, Measure] = {}
        with server.raw_server(env, flags, tmp) as raw:
            measured[RAW_BASELINE] = routes.baseline(raw)
        with server.site_server(env, flags, tmp) as site:
            measured["/healthz"] = routes.healthz(site)
            measured.update(routes.reads(site, size, lists=False))
            measured.update(routes.ingests(site, size))
        rounds.append(measured)
    return rounds


def front_nginx(tmp: Path, env: dict[str, str]) -> _nginx.Nginx:
    """The nginx of --front nginx, not started yet (it is, in front of each gunicorn of the
    site), and the site's settings for it: its https URL, its host, nginx trusted."""
    missing = [p for p in (_nginx.NGINX, "openssl") if not shutil.which(p)]
    if missing:
        sys.exit(f"--front nginx needs Debian's nginx and openssl ({', '.join(missing)} missing): "
                 "sudo apt-get install -y nginx openssl")  # fmt: skip
    folder = tmp / "nginx"
    folder.mkdir()
    nginx = _nginx.Nginx(
        _nginx.make_certificate(folder), static_root=Path(env["STATIC_ROOT"]), tmp=folder,
        worker_processes="auto", worker_connections=768,  # Debian's stock nginx.conf's
    )  # fmt: skip
    env.update(
        SITE_URL=f"https://{_nginx.HOST}:{nginx.https_port}",
        ALLOWED_HOSTS=_nginx.HOST,
        TRUSTED_PROXIES="127.0.0.1",  # the address nginx connects to gunicorn from
    )
    # The checks' urllib requests (siteload.server.http) to nginx, spoken as to its host.
    urllib.request.install_opener(urllib.request.build_opener(_nginx.HostHandler(nginx)))
    return nginx


def through(site: Server, url: str, process: subprocess.Popen[bytes] | None = None) -> Server:
    """The gunicorn `site` as wrk and the checks reach it at `url`; the peak RSS followed is of
    its workers, or of `process`'s (nginx's, for the static file it serves itself)."""
    fronted = copy.copy(site)  # the same gunicorn, started and stopped by `site` alone
    fronted.url = url
    if process is not None:
        fronted.process = process
    return fronted


@contextlib.contextmanager
def reached(site: Server, nginx: _nginx.Nginx | None) -> Iterator[Server]:
    """The site as the load reaches it: directly, or through nginx, started in front of this
    gunicorn (its upstream) and stopped after (its logs kept, for a wrong result)."""
    if nginx is None:
        yield site
        return
    nginx.upstream = site.url.removeprefix("http://")
    try:
        nginx.start()
        yield through(site, f"https://127.0.0.1:{nginx.https_port}")
    finally:
        nginx.stop()


def static_baseline(routes: Routes, nginx: _nginx.Nginx, site: Server) -> Measure:
    """nginx serving a 2 KB file from STATIC_ROOT (the raw baseline's answer) over the same TLS:
    what nginx costs with no gunicorn behind it, --front nginx's baseline."""
    (nginx.static_root / STATIC_FILE).write_bytes(raw_wsgi.BODY)
    path = f"/static/{STATIC_FILE}"
    status, body = server.http(site.url + path)
    if status != 200 or body != raw_wsgi.BODY:
        fail(f"nginx answered {path} with {status} and {len(body)} bytes, not the 2,048 written")
    return routes.load.run(
        through(site, site.url, nginx.process), STATIC_BASELINE, "paths.lua",
        {"BENCH_PATHS": str(routes.paths_file("static", [path]))},
    )  # fmt: skip


@contextlib.contextmanager
def plans_settings(nginx: _nginx.Nginx | None) -> Iterator[None]:
    """The settings of the plans' in-process requests (the test Client asks 127.0.0.1 over
    plain http): the site's own, or, when the site is https behind nginx, the same with that
    host allowed and no redirect to https. Neither changes the SQL a route runs."""
    if nginx is None:
        yield
        return
    from django.conf import settings
    from django.test.utils import override_settings

    with override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "127.0.0.1"],
                           SECURE_SSL_REDIRECT=False):  # fmt: skip
        yield


def print_front_results(results: dict[str, Measure], largest: int) -> None:
    static = results[STATIC_BASELINE]
    print(f"\nresults at {largest:,} receipts through nginx (ratios, x 2KB, to nginx serving a "
          "static 2 KB file over the same TLS in this run):")  # fmt: skip
    print(FRONT_HEADER)
    for m in results.values():
        print(figures.format_row(m, static))


def main() -> int:
    parser = arguments()
    args = parser.parse_args()
    sizes = args.sizes or parse_sizes(str(args.receipts))
    if args.wrk_threads > args.connections:
        parser.error("--wrk-threads must not exceed --connections")
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    if args.repeat > 1 and args.front == "nginx":
        parser.error("--repeat is for the direct front: the targets are judged there")
    wrk = find_wrk()
    started = time.perf_counter()
    if args.database == "postgresql":
        url = args.database_url or f"{DEFAULT_SERVER}bench_run_{secrets.token_hex(4)}"
    elif args.database_url:
        parser.error("--database-url is for --database postgresql")
    else:
        url = ""

    tmp = Path(tempfile.mkdtemp(prefix="receiptsite-bench-run-"))
    database_url, description = _common.own_database(url, tmp, keep=args.keep_database)
    env = server.site_environment(database_url, tmp)
    nginx = front_nginx(tmp, env) if args.front == "nginx" else None
    site = server.set_up_site(env)
    shape = Shape(
        seed=args.seed,
        total=sizes[-1],
        epoch=datetime.now(UTC).replace(microsecond=0) - timedelta(days=DAYS + 1),
    )
    flags = server.gunicorn_flags(args.workers, args.threads, args.connections)
    rng = random.Random(args.seed)  # one sequence for the fill's checks, the load and the plans
    load = Load(wrk, args.wrk_threads, args.connections, args.duration, args.warmup)
    if nginx is not None:  # every request's Host nginx's server_name
        load.scripts = _nginx.wrk_scripts(nginx, load.scripts, tmp / "wrk-nginx")
    routes = Routes(tmp=tmp, shape=shape, site=site, rng=rng, load=load)
    print(f"bench/run.py: {_common.machine()}, {description}")
    print(
        f"gunicorn -c gunicorn.conf.py {' '.join(flags)}; wrk -t{args.wrk_threads} "
        f"-c{args.connections}, {args.duration} s per route after {args.warmup} s warm-up; "
        f"sizes {', '.join(f'{s:,}' for s in sizes)}; 1-minute load {os.getloadavg()[0]:.1f}"
    )
    if nginx is not None:
        print(
            f"through {_nginx.version()} serving deploy/nginx/receiptsite.conf (worker_processes "
            f"{nginx.worker_processes}, worker_connections {nginx.worker_connections}), TLS, "
            f"Host {_nginx.HOST}; baseline: nginx serving a static 2 KB file"
        )
    filler = Filler(shape, site, max(1, args.fill_processes))
    by_size: dict[int, dict[str, Measure]] = {}
    results: dict[str, Measure] = {}
    rounds = [results]  # with --repeat, the later rounds' figures of the targets' routes
    try:
        for size in sizes:
            print(f"\nfill to {size:,} receipts ({filler.processes} processes):")
            before = filler.builder.size
            seconds = filler.fill(size)
            filler.check_some(rng)
            print(f"  filled in {seconds:.1f} s ({(size - before) / seconds:,.0f} receipts/s); "
                  "5 random receipts verify in-process")  # fmt: skip
            from django.db import connections

            # The gunicorns open their own; none of this process stays open beside them.
            connections.close_all()
            # Every route at the largest size; at a smaller one only the reads, for the scaling.
            last = size == sizes[-1]
            print(f"\n{figures.HEADER if nginx is None else FRONT_HEADER}")
            if last and nginx is None:
                with server.raw_server(env, flags, tmp) as raw:
                    results[RAW_BASELINE] = routes.baseline(raw)
            with server.site_server(env, flags, tmp) as site_server, \
                    reached(site_server, nginx) as site_reached:  # fmt: skip
                if last and nginx is not None:
                    results[STATIC_BASELINE] = static_baseline(routes, nginx, site_reached)
                if last:
                    results["/healthz"] = routes.healthz(site_reached)
                by_size[size] = routes.reads(site_reached, size)
                if last:
                    results.update(by_size[size])
                    results.update(routes.ingests(site_reached, size))
            if last and nginx is None:
                rounds += again(args.repeat - 1, routes, env, flags, tmp, size)
            connections.close_all()
        largest = sizes[-1]
        if nginx is None:
            figures.print_results(results, largest, len(rounds))
            reads = [r for r in by_size[largest] if r in results]
            if len(rounds) > 1:
                figures.print_targets_over(rounds, reads)
            else:
                figures.print_targets(results, reads)
        else:
            print_front_results(results, largest)
            print("\ntargets: not judged through nginx (they are ratios to the raw WSGI "
                  "baseline: run without --front)")  # fmt: skip
        if len(sizes) > 1:
            figures.print_scaling(by_size)
        with plans_settings(nginx):
            print_plans(shape, largest, rng, site.keys[0])
        # Every table measured (by_size's largest holds the first round's reads again).
        tables = [*rounds, *by_size.values()]
        wrong = list({id(m): m for s in tables for m in s.values() if m.non2xx}.values())
        if wrong:
            fail(
                "answers outside 2xx under load: "
                + ", ".join(f"{m.route} {m.non2xx} (first {m.first_non2xx})" for m in wrong)
            )
    except Wrong as error:
        print(f"\nWRONG RESULT: {error}", file=sys.stderr)
        for name in ("site", "raw"):
            path = tmp / f"{name}.stderr"
            if path.exists() and path.stat().st_size:
                print(f"--- {name} gunicorn stderr (end) ---\n{path.read_text()[-2000:]}",
                      file=sys.stderr)  # fmt: skip
        if nginx is not None:  # its own logs, but the access log (one line per request)
            for path in [*sorted((nginx.tmp / "logs").glob("*error.log")), nginx.tmp / "nginx.out"]:
                if path.exists() and path.stat().st_size:
                    print(f"--- nginx {path.name} (end) ---\n{path.read_text()[-2000:]}",
                          file=sys.stderr)  # fmt: skip
        return 1
    sockets = sum(m.socket_errors for s in tables for m in s.values())
    if sockets:
        print(f"\n{sockets} socket errors under load (see the sockerr column)")
    print(f"\nevery checked answer was right; total run time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

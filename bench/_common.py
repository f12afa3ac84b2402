"""Shared set-up for the benchmarks: a throwaway database of their own, Django configured with
tests.settings, the exception a wrong result raises, and small statistics helpers.

The database is always the benchmark's own:

- SQLite (default): a file in a fresh temporary directory, deleted afterwards.
- PostgreSQL (`--database-url postgres://user@host:port/NAME`): the database NAME is created on
  that server and dropped afterwards. If NAME already exists the script stops without touching
  it, so a benchmark can never write into somebody else's database.

Nothing here touches the repository's var/ folder: DATABASE_URL is always set, and
tests.settings keeps the signing key and LOG_STATE_FILE in a temporary directory.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parent.parent


class Wrong(Exception):
    """A result is wrong (a root, an index, a proof, an answer): the script exits 1."""


def fail(message: str) -> NoReturn:
    raise Wrong(message)


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default="",
        help="postgres://user@host:port/NAME to run on PostgreSQL: NAME is created for the run "
        "and dropped afterwards (it must not exist). Default: a temporary SQLite file.",
    )
    parser.add_argument(
        "--keep-database",
        action="store_true",
        help="do not delete the temporary database at the end (prints where it is)",
    )


def _postgres_admin_connect(url: str):  # type: ignore[no-untyped-def]
    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(
        host=parts.hostname or None,
        port=parts.port or None,
        user=unquote(parts.username or "") or None,
        password=unquote(parts.password or "") or None,
        dbname="postgres",
        autocommit=True,
        connect_timeout=5,
    )


def own_database(url: str, temp_dir: Path, *, keep: bool = False) -> tuple[str, str]:
    """The benchmark's own database: a SQLite file in `temp_dir` when `url` is empty, else the
    PostgreSQL database `url` names, created now (it must not exist) and dropped at exit unless
    `keep`. Returns (DATABASE_URL, a description). Stops the script on a bad or taken name."""
    url = url.strip()
    if not url:
        db_file = temp_dir / "bench.sqlite3"
        url = f"sqlite:///{db_file}"
        description = f"SQLite file {db_file}"
    elif url.startswith(("postgres://", "postgresql://")):
        name = unquote(urlsplit(url).path.lstrip("/"))
        if not name or not name.replace("_", "").isalnum():
            sys.exit(f"choose a plain database name for the benchmark, not {name!r}")
        with _postgres_admin_connect(url) as admin:
            exists = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [name]
            ).fetchone()
            if exists:
                sys.exit(
                    f"database {name!r} already exists on that server; the benchmark only uses a "
                    "database it creates itself: choose another name"
                )
            admin.execute(f'CREATE DATABASE "{name}"')
            version = admin.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        description = f"PostgreSQL {version}, database {name} (created for this run)"
        if not keep:
            atexit.register(_drop_postgres, url, name)
    else:
        sys.exit("--database-url must be postgres://... (SQLite is the default)")

    if keep:
        atexit.register(print, f"(kept: DATABASE_URL={url})")
    else:
        atexit.register(shutil.rmtree, temp_dir, True)
    return url, description


def setup_django(args: argparse.Namespace, *, migrate: bool = True) -> str:
    """Create the benchmark's database, configure Django, migrate. Returns a description."""
    temp_dir = Path(tempfile.mkdtemp(prefix="receiptsite-bench-"))
    url, description = own_database(args.database_url, temp_dir, keep=args.keep_database)

    os.environ["DATABASE_URL"] = url
    os.environ["RATE_LIMITS"] = "off"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
    return description


def _drop_postgres(url: str, name: str) -> None:
    from django.db import connections

    connections.close_all()
    with _postgres_admin_connect(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def machine() -> str:
    import platform

    import django

    return (
        f"Python {platform.python_version()}, Django {django.get_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}"
    )


# --- statistics ----------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in [0, 1])."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(value: float, base: float) -> str:
    return f"x{value / base:.2f}" if base else "-"

"""bench/run.py end to end, tiny: a few hundred receipts on SQLite, one second of wrk per route.
It must exit 0 (every checked answer right, no answer outside 2xx under load) and print a row
of figures for every route, the targets and the query plans; with `--front nginx`, a row for
nginx's static file and for every route through nginx. No figure is judged here: speed figures
come from the benchmark itself, run on a quiet machine.

wrk and nginx are Debian's packages, installed by the test command's set-up (scripts/test), not
here: without them the tests fail and say so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"

ROUTES = [
    "raw WSGI baseline",
    "/healthz",
    "verify",
    "page",
    "list",
    "list workflow_id",
    "list phase",
    "list subject_name",
    "list session_id",
    "list outcome",
    "list since/until",
    "ingest single",
    "ingest batch",
]
NUMBER = r"[\d,]+(?:\.\d+)?"

pytestmark = [pytest.mark.live, pytest.mark.any_database]


def figure(text: str) -> float:
    """A printed figure: 1,011.9 is 1011.9 (run.py groups thousands)."""
    return float(text.replace(",", ""))


def require(program: str) -> None:
    # A failure, not a skip: a suite without wrk (or nginx) would quietly stop checking the
    # benchmark. And not an install: run.py installs wrk for a person who runs it directly, as
    # root, but the test command installs both before any test runs.
    if shutil.which(program) is None:
        name = Path(program).name
        pytest.fail(
            f"{name} is not installed. The test command's set-up installs Debian's {name}: run "
            f"the tests with scripts/test (as root), or install it: sudo apt-get install -y {name}",
            pytrace=False,
        )


def run_benchmark(*extra: str) -> str:
    """bench/run.py, tiny; its output, once it has exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE_URL"))}
    done = subprocess.run(
        [str(PYTHON if PYTHON.exists() else sys.executable), "bench/run.py", "--database",
         "sqlite", "--receipts", "300", "--duration", "1", "--warmup", "0", *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    output = done.stdout
    assert done.returncode == 0, f"{output[-4000:]}\n{done.stderr[-4000:]}"
    return output


def check_rows(table: str, routes: list[str]) -> None:
    for route in routes:
        # route, req/s, receipts/s (or -), p50, p99, non-2xx, socket errors, RSS, workers, load,
        # CPU per request, then the ratios of req/s, p50, p99, RSS and CPU to the baseline.
        row = re.search(
            rf"^{re.escape(route)}\s+({NUMBER})\s+({NUMBER}|-)\s+({NUMBER})\s+({NUMBER})\s+(\d+)"
            rf"\s+(\d+)\s+({NUMBER})\s+(\d+)\s+({NUMBER})\s+({NUMBER}) \|(\s+x{NUMBER}){{5}}$",
            table,
            re.MULTILINE,
        )
        assert row, f"no row of figures for {route!r} in:\n{table}"
        assert row.group(5) == "0", f"{route}: answers outside 2xx under load"
        assert figure(row.group(7)) > 0, f"{route}: no worker's peak RSS was read"
        if figure(row.group(1)) > 0:  # CPU per answered request (none under a slow run)
            assert figure(row.group(10)) > 0, f"{route}: no worker's CPU time was read"
        if route.startswith("ingest"):
            assert row.group(2) != "-", f"{route}: no receipts/s"
    assert figure(re.search(rf"^verify\s+({NUMBER})", table, re.MULTILINE)[1]) > 0  # type: ignore[index]


def test_the_load_benchmark_runs_and_prints_every_route() -> None:
    """With --repeat 2: the targets' routes are measured in a second round, with its own raw
    baseline, and each target is judged in every round that measured it."""
    require("wrk")
    output = run_benchmark("--repeat", "2")
    table = output.split("results at 300 receipts", 1)[1].split("targets", 1)[0]
    check_rows(table, ROUTES)
    second = output.split("round 2 of 2:", 1)[1].split("results at 300 receipts", 1)[0]
    for route in ("raw WSGI baseline", "/healthz", "verify", "page", "ingest single",
                  "ingest batch"):  # fmt: skip
        assert re.search(rf"^  {re.escape(route)}\s+{NUMBER}", second, re.MULTILINE), route
    assert not re.search(r"^  list ", second, re.MULTILINE)  # the lists: the first round only
    for target, rounds in (
        ("ingest single     receipts/s >= 0.1 x raw WSGI baseline req/s", 2),
        ("ingest batch      receipts/s >= 0.35 x raw WSGI baseline req/s", 2),
        ("ingest single     p99 <= 1000 ms", 2), ("ingest batch      p99 <= 1000 ms", 2),
        ("/healthz          req/s >= 0.5 x raw WSGI baseline req/s", 2),
        ("verify            req/s >= 0.6 x /healthz req/s", 2),
        ("page              req/s >= 0.5 x /healthz req/s", 2),
        ("/healthz          p99 <= 2.5 x its p50", 2),
        ("page              p99 <= 2.5 x its p50", 2),
        ("list since/until  p99 <= 2.5 x its p50", 1),
    ):
        figures = " ".join([rf"(?:x{NUMBER}|{NUMBER} ms|-)"] * rounds)
        line = rf"^  {re.escape(target)}: {figures}: holds in [0-{rounds}] of {rounds} rounds$"
        assert re.search(line, output, re.MULTILINE), target
    plans = output.split("query plans at 300 receipts", 1)[1]
    for route in ("verify", "page", "list workflow_id", "list since/until"):
        assert re.search(rf"^  {re.escape(route)} \(", plans, re.MULTILINE), route
    assert "SEARCH" in plans or "SCAN" in plans  # SQLite's EXPLAIN QUERY PLAN lines
    assert "every checked answer was right" in output


def test_the_load_benchmark_runs_through_nginx() -> None:
    """The same run through the shipped nginx configuration, over TLS: a row for nginx serving
    its static 2 KB file (the baseline) and for every route, each with its ratios to it."""
    require("wrk")
    require("/usr/sbin/nginx")
    output = run_benchmark("--front", "nginx")
    table = output.split("results at 300 receipts through nginx", 1)[1].split("targets", 1)[0]
    check_rows(table, ["nginx static 2 KB file", *(r for r in ROUTES if r != "raw WSGI baseline")])
    assert not re.search(r"^ *raw WSGI baseline ", output, re.MULTILINE)  # not measured
    assert "every checked answer was right" in output

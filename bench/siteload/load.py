"""The load of bench/run.py: wrk driving one route of a running gunicorn, and what it counts.

`Load.run()` runs wrk (`-t`, `-c`, `--warmup` seconds untimed, then `--duration` seconds) with
one of the Lua scripts in bench/wrk/, which reads its requests from the environment and ends
with one `BENCH_RESULT {json}` line (bench/wrk/report.lua); meanwhile `PeakRss` follows the
VmHWM of every gunicorn worker. For ingest routes the stored log's size before and after the
timed run gives the receipts stored. `find_wrk()` finds wrk, and installs Debian's package when
the script runs as root without it (for a person running the benchmark directly; the test
command installs it beforehand).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import fail

from siteload.figures import Measure, format_row
from siteload.server import BENCH, Server


def find_wrk() -> str:
    """wrk's path; Debian's package installed first when it is missing and this is root."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk is missing: apt-get install -y wrk")
        done = subprocess.run(["apt-get", "install", "-y", "wrk"], capture_output=True)
        found = shutil.which("wrk")
        if done.returncode == 0 and found:
            return found
        sys.exit(f"apt-get install -y wrk failed: {done.stderr.decode(errors='replace')[-500:]}")
    sys.exit("bench/run.py needs wrk: install it with `sudo apt-get install -y wrk` (Debian)")


class PeakRss:
    """VmHWM of every worker of a server, read every 0.2 s while a measurement runs, and the
    CPU time (user + system) the workers spent during it."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peaks: dict[int, int] = {}  # pid -> kB
        self._cpu: dict[int, tuple[int, int]] = {}  # pid -> (clock ticks first seen, last seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> None:
        for pid in self.server.workers():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        kb = int(line.split()[1])
                        self.peaks[pid] = max(self.peaks.get(pid, 0), kb)
                # utime and stime, the 14th and 15th fields of /proc/<pid>/stat (after the
                # command's parenthesis, which may hold spaces).
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                ticks = int(fields[11]) + int(fields[12])
                self._cpu[pid] = (self._cpu.get(pid, (ticks, 0))[0], ticks)

    @property
    def cpu_seconds(self) -> float:
        """The workers' CPU time between the first read and the last (a worker that started
        during the run counts from when it was first seen)."""
        return sum(last - first for first, last in self._cpu.values()) / _CLOCK_TICKS

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._read()

    def __enter__(self) -> PeakRss:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _log_counts() -> tuple[int, int]:
    """The stored log's size, which every receipt stored grows by one; and how many signed
    checkpoints are stored, which every storing transaction grows by one."""
    from django.db import connection

    from receiptsite.ledger import log
    from receiptsite.receipts.models import SignedCheckpoint

    size, signed = log.head().size, SignedCheckpoint.objects.count()
    connection.close()  # no connection of this process stays open beside the site's
    return size, signed


@dataclass
class Load:
    wrk: str
    threads: int
    connections: int
    duration: int
    warmup: int
    scripts: Path = field(default_factory=lambda: BENCH / "wrk")
    runs: int = 0  # wrk invocations so far

    def run(self, server: Server, route: str, script: str, env: dict[str, str],
            per_request: int = 0) -> Measure:  # fmt: skip
        if self.warmup:
            self._wrk(server, script, env, self.warmup)
        before = _log_counts() if per_request else (0, 0)
        with PeakRss(server) as rss:
            result = self._wrk(server, script, env, self.duration)
        after = _log_counts() if per_request else (0, 0)
        stored, signed = after[0] - before[0], after[1] - before[1]
        measure = Measure(
            route=route,
            requests=result["requests"],
            seconds=result["duration_us"] / 1e6,
            receipts_per_request=per_request,
            stored=stored,
            p50_ms=result["p50_us"] / 1000,
            p99_ms=result["p99_us"] / 1000,
            non2xx=result["non2xx"],
            first_non2xx=result["first_non2xx"],
            socket_errors=sum(result[k] for k in ("connect", "read", "write", "timeout")),
            rss_mib=max(rss.peaks.values(), default=0) / 1024,
            cpu_ms=rss.cpu_seconds * 1000 / result["requests"] if result["requests"] else 0.0,
            workers_seen=len(rss.peaks),
            load=os.getloadavg()[0],
        )
        if measure.stored < measure.requests * per_request:
            fail(
                f"{route}: {measure.requests} answered requests of {per_request} receipts, but "
                f"the log grew by {measure.stored}: answers that stored nothing"
            )
        few = "  (few requests: a longer --duration is firmer)" if measure.requests < 20 else ""
        print(f"  {format_row(measure, None)}{few}", flush=True)
        if per_request and signed:
            # Group commit (receipts/services.py): concurrent single posts share a checkpoint.
            print(f"    {stored:,} receipts stored under {signed:,} signed checkpoints: "
                  f"{stored / signed:.1f} per storing transaction", flush=True)  # fmt: skip
        return measure

    def _wrk(
        self, server: Server, script: str, env: dict[str, str], seconds: int
    ) -> dict[str, Any]:
        command = [
            self.wrk, f"-t{self.threads}", f"-c{self.connections}", f"-d{seconds}s",
            "--timeout", "60s", "-s", str(self.scripts / script), server.url,
        ]  # fmt: skip
        self.runs += 1
        if "BENCH_RUN" in env:  # new idempotency keys in every run, warm-up or timed
            env = {**env, "BENCH_RUN": f"{env['BENCH_RUN']}-{self.runs}"}
        done = subprocess.run(
            command, env={**os.environ, **env}, capture_output=True, timeout=seconds + 120
        )
        for line in done.stdout.decode(errors="replace").splitlines():
            if line.startswith("BENCH_RESULT "):
                result: dict[str, Any] = json.loads(line.removeprefix("BENCH_RESULT "))
                return result
        fail(
            f"wrk printed no result (exit {done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')}\n{done.stderr.decode(errors='replace')}"
        )

"""The figures of bench/run.py: one route's measurement and how the run prints them.

- `Measure`: what wrk and the run counted for one route (requests, receipts stored, p50 and
  p99 latency, answers outside 2xx, socket errors, the workers' peak RSS, the load average);
- `HEADER` and `format_row()`: the table's columns, with each figure's ratio to the raw WSGI
  baseline of the same run;
- `print_results()`, `print_targets()` and `print_scaling()`: the tables at the largest size,
  each target marked holds or MISSED (a missed target is a figure, not an error), and with
  several sizes each read's latency at the largest as a ratio to the smallest.
"""

from __future__ import annotations

from dataclasses import dataclass

import _common


@dataclass
class Measure:
    route: str
    requests: int = 0
    seconds: float = 0.0
    receipts_per_request: int = 0  # ingest routes: receipts per request
    stored: int = 0  # ingest routes: receipts the log grew by during the timed run
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    non2xx: int = 0
    first_non2xx: str = ""
    socket_errors: int = 0
    rss_mib: float = 0.0  # the largest VmHWM of a worker
    cpu_ms: float = 0.0  # the workers' CPU time (user + system) per answered request
    workers_seen: int = 0
    load: float = 0.0  # 1-minute load average after the run

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def receipts_per_second(self) -> float:
        # Counted in the database, not from wrk's completed requests: a batch still being
        # stored when the run ends has stored most of its receipts.
        return self.stored / self.seconds if self.seconds else 0.0


HEADER = (
    f"{'route':<24} {'req/s':>9} {'rcpt/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non2xx':>6} "
    f"{'sockerr':>7} {'RSS MiB':>7} {'wk':>3} {'load':>5} {'cpu ms':>7} | x raw: {'req/s':>6} "
    f"{'p50':>6} {'p99':>6} {'RSS':>6} {'cpu':>6}"
)


def format_row(m: Measure, raw: Measure | None) -> str:
    receipts = f"{m.receipts_per_second:9,.0f}" if m.receipts_per_request else f"{'-':>9}"
    line = (
        f"{m.route:<24} {m.rps:9,.1f} {receipts} {m.p50_ms:8.2f} {m.p99_ms:8.2f} {m.non2xx:>6} "
        f"{m.socket_errors:>7} {m.rss_mib:7.1f} {m.workers_seen:>3} {m.load:5.1f} {m.cpu_ms:7.2f}"
    )
    if raw is not None:
        ratios = ((m.rps, raw.rps), (m.p50_ms, raw.p50_ms), (m.p99_ms, raw.p99_ms),
                  (m.rss_mib, raw.rss_mib), (m.cpu_ms, raw.cpu_ms))  # fmt: skip
        line += " |        " + " ".join(f"{_common.ratio(a, b):>6}" for a, b in ratios)
    return line


def verdict(holds: bool, *measures: Measure) -> str:
    """holds or MISSED; no verdict from a run in which no request completed."""
    empty = [m.route for m in measures if not (m.requests or m.stored)]
    if empty:
        return f"no verdict: nothing of {', '.join(empty)} completed (a longer --duration)"
    return "holds" if holds else "MISSED"


def _figure(m: Measure, name: str) -> float:
    return {"req/s": m.rps, "receipts/s": m.receipts_per_second, "p50": m.p50_ms,
            "p99": m.p99_ms}[name]  # fmt: skip


@dataclass(frozen=True)
class Target:
    """`route`'s `figure` at least `share` x `base`'s requests/s (`base` a route of the run,
    or RAW); for `figure` "p99", at most `share` x the route's own p50 (`base` "p50") or at
    most `share` ms (`base` "ms")."""

    route: str
    figure: str  # "req/s", "receipts/s" or "p99"
    share: float
    base: str

    def name(self) -> str:
        latency = self.figure == "p99"
        against = {"ms": f"{self.share:g} ms", "p50": f"{self.share:g} x its p50"}.get(
            self.base, f"{self.share:g} x {self.base} req/s"
        )
        return f"{self.route:<17} {self.figure} {'<=' if latency else '>='} {against}"

    def outcome(self, results: dict[str, Measure]) -> tuple[float, float, float, str]:
        """The route's figure, its bound, the base the bound is a share of (1 for "ms") and
        the verdict (holds, MISSED or no verdict), in one run's `results`."""
        m = results[self.route]
        if self.base == "ms":
            base = 1.0
        elif self.base == "p50":
            base = m.p50_ms
        else:
            base = results[self.base].rps
        value, bound = _figure(m, self.figure), self.share * base
        holds = value <= bound if self.figure == "p99" else value >= bound
        others = [results[self.base]] if self.base in results else []
        return value, bound, base, verdict(holds, m, *others)

    def judge(self, results: dict[str, Measure]) -> str:
        value, bound, base, said = self.outcome(results)
        unit = "" if self.figure != "p99" else " ms"
        return (
            f"  {self.name()}: {value:,.1f}{unit} vs {bound:,.1f}{unit}"
            + ("" if self.base == "ms" else f" ({_common.ratio(value, base)})")
            + f": {said}"
        )

    def judge_over(self, rounds: list[dict[str, Measure]]) -> str:
        """The target in each round that measured its route, each figure as its ratio to the
        base of its own round (or in ms), and in how many rounds it held."""
        kept = [r for r in rounds if self.route in r and (self.base in ("ms", "p50")
                                                          or self.base in r)]  # fmt: skip
        outcomes = [self.outcome(r) for r in kept]
        shown = [
            f"{value:,.0f} ms" if self.base == "ms" else _common.ratio(value, base)
            for value, _, base, _ in outcomes
        ]
        held = sum(said == "holds" for *_, said in outcomes)
        return f"  {self.name()}: {' '.join(shown)}: holds in {held} of {len(outcomes)} rounds"


RAW = "raw WSGI baseline"
# The targets the run judges, all in the same run at 16 connections: ingest in receipts/s
# (counted in the database) as a share of the raw WSGI baseline's requests/s, a write's p99
# (its checkpoint included) under a second, the framework's floor (/healthz) as a share of
# the raw baseline, verify and the page as shares of /healthz.
TARGETS = (
    Target("ingest single", "receipts/s", 0.10, RAW),
    Target("ingest batch", "receipts/s", 0.35, RAW),
    Target("ingest single", "p99", 1000, "ms"),
    Target("ingest batch", "p99", 1000, "ms"),
    Target("/healthz", "req/s", 0.5, RAW),
    Target("verify", "req/s", 0.6, "/healthz"),
    Target("page", "req/s", 0.5, "/healthz"),
)
# And every read's p99 within TAIL x its own p50: /healthz, verify, the page and the lists.
TAIL = 2.5


def print_targets(results: dict[str, Measure], reads: list[str]) -> None:
    print("\ntargets (16 connections unless told otherwise):")
    for target in TARGETS:
        print(target.judge(results))
    for route in ["/healthz", *reads]:
        print(Target(route, "p99", TAIL, "p50").judge(results))


def print_targets_over(rounds: list[dict[str, Measure]], reads: list[str]) -> None:
    """With --repeat: each target in every round, judged within its round (each round has
    its own raw baseline), and in how many rounds it held."""
    print(f"\ntargets over {len(rounds)} rounds (16 connections unless told otherwise; each "
          "figure is its ratio to the base of its own round):")  # fmt: skip
    for target in TARGETS:
        print(target.judge_over(rounds))
    for route in ["/healthz", *reads]:
        print(Target(route, "p99", TAIL, "p50").judge_over(rounds))


def print_results(results: dict[str, Measure], largest: int, rounds: int = 1) -> None:
    raw = results[RAW]
    which = "this run" if rounds == 1 else f"round 1 of {rounds}, whose rows these are"
    print(f"\nresults at {largest:,} receipts (ratios to the raw baseline of {which}):")
    print(HEADER)
    for m in results.values():
        print(format_row(m, raw))


def print_scaling(by_size: dict[int, dict[str, Measure]]) -> None:
    """Each read's p50 at every size, and at the largest as a ratio to the smallest."""
    sizes = sorted(by_size)
    smallest, largest = sizes[0], sizes[-1]
    print(f"\nscaling: latency at {largest:,} as a ratio to {smallest:,} receipts "
          "(target: p50 within x1.25)")  # fmt: skip
    print(f"  {'route':<22} " + " ".join(f"{f'p50 @{s:,}':>13}" for s in sizes)
          + f" {'p50 ratio':>9} {'p99 ratio':>9}")  # fmt: skip
    for route in by_size[smallest]:
        first, final = by_size[smallest][route], by_size[largest][route]
        ratio = final.p50_ms / first.p50_ms if first.p50_ms else float("inf")
        print(
            f"  {route:<22} "
            + " ".join(f"{by_size[s][route].p50_ms:13.2f}" for s in sizes)
            + f" {ratio:>9.2f} {_common.ratio(final.p99_ms, first.p99_ms):>9} "
            f"{verdict(ratio <= 1.25, first, final)}"
        )

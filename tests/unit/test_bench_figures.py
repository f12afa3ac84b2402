"""bench/run.py's targets (bench/siteload/figures.py): one run judged as it is, and with
--repeat each target judged within each round, against that round's own baseline. Figures
made up here: what is tested is the arithmetic and the words, not a speed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/ is no package: its files are top-level modules (as tests/live/test_nginx.py imports
# them). Appended, so that none of bench/'s names hides another module.
sys.path.append(str(REPO / "bench"))
from siteload.figures import RAW, Measure, Target  # noqa: E402

pytestmark = pytest.mark.unit

FLOOR = Target("/healthz", "req/s", 0.5, RAW)
TAIL = Target("/healthz", "p99", 2.5, "p50")
WRITE = Target("ingest batch", "p99", 1000, "ms")


def round_of(raw: float, healthz: float, p50: float = 5.0, p99: float = 10.0) -> dict[str, Measure]:
    """One round: `raw` and `healthz` requests in one second each, /healthz's latencies, and
    a batch whose p99 is 900 ms."""
    return {
        RAW: Measure(RAW, requests=int(raw), seconds=1.0),
        "/healthz": Measure("/healthz", requests=int(healthz), seconds=1.0, p50_ms=p50,
                            p99_ms=p99),  # fmt: skip
        "ingest batch": Measure("ingest batch", requests=20, seconds=1.0, p50_ms=500,
                                p99_ms=900, receipts_per_request=100, stored=2000),  # fmt: skip
    }


def test_one_run_is_judged_against_its_own_baseline() -> None:
    assert FLOOR.judge(round_of(4000, 2400)) == (
        "  /healthz          req/s >= 0.5 x raw WSGI baseline req/s: 2,400.0 vs 2,000.0 "
        "(x0.60): holds"
    )
    assert FLOOR.judge(round_of(6000, 2400)).endswith("(x0.40): MISSED")
    assert TAIL.judge(round_of(4000, 2400, p50=5, p99=13)).endswith(
        "13.0 ms vs 12.5 ms (x2.60): MISSED"
    )
    assert WRITE.judge(round_of(4000, 2400)).endswith("900.0 ms vs 1,000.0 ms: holds")


def test_rounds_are_each_judged_against_their_own_baseline() -> None:
    # The same /healthz figure holds against the first round's baseline and misses against
    # the second's: each round is its own comparison, never one round's figure against
    # another's baseline.
    rounds = [round_of(4000, 2400), round_of(6000, 2400), round_of(4400, 2300, p99=20)]
    assert FLOOR.judge_over(rounds) == (
        "  /healthz          req/s >= 0.5 x raw WSGI baseline req/s: x0.60 x0.40 x0.52: "
        "holds in 2 of 3 rounds"
    )
    assert TAIL.judge_over(rounds).endswith(": x2.00 x2.00 x4.00: holds in 2 of 3 rounds")
    assert WRITE.judge_over(rounds).endswith(": 900 ms 900 ms 900 ms: holds in 3 of 3 rounds")


def test_a_route_measured_in_some_rounds_only_is_judged_in_those() -> None:
    rounds = [round_of(4000, 2400), {RAW: Measure(RAW, requests=5000, seconds=1.0)}]
    assert FLOOR.judge_over(rounds).endswith(": x0.60: holds in 1 of 1 rounds")


def test_a_round_in_which_nothing_completed_gives_no_verdict() -> None:
    rounds = [round_of(4000, 2400), round_of(4000, 0)]
    assert FLOOR.judge_over(rounds).endswith("holds in 1 of 2 rounds")
    assert "no verdict" in FLOOR.judge(round_of(4000, 0))

"""The slow suite: many seeded runs with bursts of kills. CI runs a bounded count
(WEIR_STRESS_RUNS, default 2); the long version:

    WEIR_STRESS_RUNS=50 python3 -m pytest -m stress -s
"""

from __future__ import annotations

import os

import pytest

from tests.chaos import ChaosRun, keyed_sum_with_kills

pytestmark = [pytest.mark.ray, pytest.mark.stress]

RUNS = int(os.environ.get("WEIR_STRESS_RUNS", "2"))


SUMMARY: list[ChaosRun] = []


@pytest.mark.parametrize("seed", range(1000, 1000 + RUNS))
def test_bursts_of_kills_lose_and_duplicate_nothing(ray_cluster, tmp_path, seed):
    """Bursts of 3-5 kills (ray.kill or SIGKILL). A run whose first kill came before
    any checkpoint completed is inconclusive: it is re-run with another seed."""
    for attempt in range(3):
        run_seed = seed + 100_000 * attempt
        print(f"seed={run_seed}  (replay: pytest -m stress -k {seed})")
        run = keyed_sum_with_kills(
            run_seed, str(tmp_path / f"out-{attempt}"), "file://" + str(tmp_path / f"chk-{attempt}"),
            kills=8, pause_s=(0.5, 2.5), burst=rng_burst(run_seed))
        assert (run.verdict.lost, run.verdict.duplicated, run.verdict.keys_wrong) == (0, 0, 0), f"seed={run_seed}"
        assert run.restarts <= len(run.killed)
        SUMMARY.append(run)
        if run.conclusive:
            break
    assert run.conclusive, f"seed={seed}: three inconclusive runs in a row"


def rng_burst(seed: int) -> int:
    return 3 + seed % 3


def test_zz_print_the_figures():
    """The figures README quotes (runs, lost, duplicated, inconclusive, recovery)."""
    if not SUMMARY:
        pytest.skip("no stress run in this session")
    recoveries = sorted(r for run in SUMMARY for r in run.recovery_s)
    p = lambda q: recoveries[min(len(recoveries) - 1, int(q * len(recoveries)))] if recoveries else float("nan")  # noqa: E731
    print(
        f"\nstress: {len(SUMMARY)} runs, {sum(len(r.killed) for r in SUMMARY)} kills, "
        f"lost {sum(r.verdict.lost for r in SUMMARY if r.verdict)}, duplicated {sum(r.verdict.duplicated for r in SUMMARY if r.verdict)}, "
        f"inconclusive {sum(not r.conclusive for r in SUMMARY)}, recovery p50 {p(0.5):.2f} s p99 {p(0.99):.2f} s"
    )

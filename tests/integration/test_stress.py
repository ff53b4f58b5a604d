"""The slow suite: many seeded runs with bursts of kills. CI runs a bounded count
(WEIR_STRESS_RUNS, default 2); the long version:

    WEIR_STRESS_RUNS=50 python3 -m pytest -m stress -s
"""

from __future__ import annotations

import os

import pytest

from tests.chaos import keyed_sum_with_kills

pytestmark = [pytest.mark.ray, pytest.mark.stress]

RUNS = int(os.environ.get("WEIR_STRESS_RUNS", "2"))


@pytest.mark.parametrize("seed", range(1000, 1000 + RUNS))
def test_bursts_of_kills_lose_and_duplicate_nothing(ray_cluster, tmp_path, seed):
    print(f"seed={seed}  (replay: pytest -m stress -k {seed})")
    run = keyed_sum_with_kills(
        seed, str(tmp_path / "out"), "file://" + str(tmp_path / "chk"), kills=5, pause_s=(0.5, 2.5), burst=2)
    assert (run.verdict.lost, run.verdict.duplicated, run.verdict.keys_wrong) == (0, 0, 0), f"seed={seed}"
    assert run.restarts <= len(run.killed)

"""The slow suite: many seeded runs with bursts of kills. CI runs a bounded count
(WEIR_STRESS_RUNS, default 1); the long version:

    WEIR_STRESS_RUNS=50 python3 -m pytest -m stress -s
"""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.chaos import ChaosRun, keyed_sum_with_kills, kill_random_task, mixed_chaos
from tests.regions import outputs, two_pipelines
from weir import EmbeddedRocksDBStateBackend, RestartStrategy

pytestmark = [pytest.mark.ray, pytest.mark.stress]

RUNS = int(os.environ.get("WEIR_STRESS_RUNS", "1"))
DRILL_KILLS = int(os.environ.get("WEIR_DRILL_KILLS", "5"))  # one past the old limit of 3 restarts; the long version: 50


SUMMARY: list[ChaosRun] = []


@pytest.mark.parametrize("seed", range(1000, 1000 + RUNS))
def test_bursts_of_kills_lose_and_duplicate_nothing(ray_cluster, tmp_path, seed):
    """Bursts of 3-5 kills (ray.kill or SIGKILL), the first once a checkpoint completed."""
    print(f"seed={seed}  (replay: pytest -m stress -k {seed})")
    run = keyed_sum_with_kills(
        seed,
        str(tmp_path / "out"),
        "file://" + str(tmp_path / "chk"),
        kills=8,
        pause_s=(0.5, 2.5),
        burst=rng_burst(seed),
        unpace_gate=str(tmp_path / "kills-done"),  # then the rest at full speed
    )
    assert (run.verdict.lost, run.verdict.duplicated, run.verdict.keys_wrong) == (0, 0, 0), f"seed={seed}"
    assert run.killed and 1 <= run.restarts <= len(run.killed), (
        f"seed={seed}: no kill landed, or a kill cost several restarts"
    )
    SUMMARY.append(run)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_failover_drill_under_the_default_restart_strategy_ends_exact(ray_cluster, tmp_path, backend):
    """A user rehearsing failover kills task actors of one job again and again,
    without setting a restart strategy. Before, the default allowed 3 restarts in
    the job's life and the 4th kill failed the job for good. On RocksDB (its
    folders in one of this test's), each killed process left its whole
    ``weir-rocksdb-*`` folder behind, hard links to checkpoint files included
    (0.9 GB a kill at 50M keys); now none is left once the job ended."""
    seed = 4242
    print(f"seed={seed} kills={DRILL_KILLS} backend={backend}  (WEIR_DRILL_KILLS=50 for the long drill)")
    rocks_dir = tmp_path / "rocksdb"
    state_backend = None
    if backend == "rocksdb":
        state_backend = EmbeddedRocksDBStateBackend()
        state_backend.set_db_storage_path(str(rocks_dir))
    run = keyed_sum_with_kills(
        seed,
        str(tmp_path / "out"),
        "file://" + str(tmp_path / "chk"),
        records=20_000 * 3 * DRILL_KILLS,
        kills=DRILL_KILLS,
        pause_s=(0.5, 1.5),
        rate=20_000,
        default_restarts=True,
        state_backend=state_backend,
        unpace_gate=str(tmp_path / "kills-done"),  # then the rest at full speed
    )
    assert len(run.killed) == DRILL_KILLS, f"the job ended after {len(run.killed)} kills"
    assert (run.verdict.lost, run.verdict.duplicated, run.verdict.keys_wrong) == (0, 0, 0), run.verdict
    assert 1 <= run.restarts <= DRILL_KILLS
    if backend == "rocksdb":
        assert os.listdir(rocks_dir) == [], "a killed task's RocksDB folder was left behind"


@pytest.mark.parametrize("seed", range(2000, 2000 + RUNS))
def test_kills_across_regions_lose_and_duplicate_nothing(ray_cluster, tmp_path, seed):
    """Region failover under fire: two independent pipelines (four regions) while
    four kills hit random tasks, so regions restart alone, at once, or again
    while on their way back."""
    rng = random.Random(seed)
    env = two_pipelines(f"file://{tmp_path}/chk", str(tmp_path / "a"), str(tmp_path / "b"), rate=3_000, delay_s=0.2)
    env.set_restart_strategy(RestartStrategy.fixed_delay(20, 0.2))
    client = env.execute_async(f"region-chaos-{seed}")
    while not any(m.get("records_in") for m in client.metrics()):
        assert not client.status().is_terminal, "the job ended before it read a record"
        time.sleep(0.05)
    killed = []
    for _ in range(4):
        time.sleep(rng.uniform(0.2, 0.8))
        if name := kill_random_task(client, rng):
            killed.append(name)
    result = client.wait(300)
    print(f"seed={seed} killed={killed} restarts={result.restarts}")
    assert outputs(str(tmp_path / "a"), "a") == (0, 0, []), f"seed={seed}"
    assert outputs(str(tmp_path / "b"), "b") == (0, 0, []), f"seed={seed}"
    assert killed and 1 <= result.restarts <= len(killed)


def rng_burst(seed: int) -> int:
    return 3 + seed % 3


def test_zz_print_the_figures():
    """The figures README quotes (runs, lost, duplicated, recovery)."""
    if not SUMMARY:
        pytest.skip("no stress run in this session")
    recoveries = sorted(r for run in SUMMARY for r in run.recovery_s)
    p = lambda q: recoveries[min(len(recoveries) - 1, int(q * len(recoveries)))] if recoveries else float("nan")  # noqa: E731
    print(
        f"\nstress: {len(SUMMARY)} runs, {sum(len(r.killed) for r in SUMMARY)} kills, "
        f"lost {sum(r.verdict.lost for r in SUMMARY if r.verdict)}, duplicated {sum(r.verdict.duplicated for r in SUMMARY if r.verdict)}, "
        f"recovery p50 {p(0.5):.2f} s p99 {p(0.99):.2f} s"
    )


MIXED: list = []


@pytest.mark.parametrize("seed", range(3000, 3000 + RUNS))
def test_mixed_chaos_loses_and_duplicates_nothing(ray_cluster, tmp_path, seed):
    """Task kills, coordinator kills, savepoints, rescales, stops with and without
    drain, cancels, in one seeded schedule (see tests.chaos.mixed_chaos): every
    incarnation ends in one terminal state, nothing hangs, and the committed
    output has every record once, in order per file."""
    print(f"seed={seed}  (replay: pytest -m stress -k 'mixed and {seed}')")
    run = mixed_chaos(seed, tmp_path)
    assert run.verdict.exact, f"seed={seed}: {run.verdict}"
    assert run.ending in ("FINISHED",), f"seed={seed}: ended {run.ending}"
    MIXED.append(run)


def test_zz_print_the_mixed_figures():
    if not MIXED:
        pytest.skip("no mixed chaos run in this session")
    actions: dict[str, int] = {}
    for run in MIXED:
        for action, outcome in run.actions:
            key = f"{action} {'refused' if outcome.startswith('refused') else 'done'}"
            actions[key] = actions.get(key, 0) + 1
    print(
        f"\nmixed chaos: {len(MIXED)} runs, {sum(r.incarnations for r in MIXED)} incarnations, "
        f"lost {sum(r.verdict.lost for r in MIXED)}, duplicated {sum(r.verdict.duplicated for r in MIXED)}, "
        f"out of order {sum(r.verdict.out_of_order for r in MIXED)}; actions {dict(sorted(actions.items()))}"
    )

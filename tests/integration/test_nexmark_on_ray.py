"""Nexmark's window queries on a real local Ray cluster, each through three
killed task actors (a random task of the job, by ``ray.kill`` or SIGKILL, each
once a checkpoint has completed since the last restart): what the sink committed
is exactly what the plain-Python reference computes from the same events.
``python3 -m bench.nexmark.kills`` runs every query so (docs/benchmarks.md)."""

from __future__ import annotations

import os

import pytest

from bench.nexmark import generator, kills

pytestmark = pytest.mark.ray

SEEDS = [int(s) for s in os.environ.get("WEIR_KILL_SEEDS", "1").split(",")]  # which tasks die, and when


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    """The same events as Parquet, for the reference."""
    folder = str(tmp_path_factory.mktemp("nexmark"))
    generator.write(folder, kills.EVENTS, kills.CONFIG)
    return folder


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("query", ["q5", "q8", "q7"])
def test_a_nexmark_query_on_ray_is_exact_through_three_task_kills(
    query, seed, ray_cluster, data, checkpoint_dir, out_dir
):
    print(f"kill seed {seed} (WEIR_KILL_SEEDS={seed} replays it)")
    run = kills.through_kills(query, data, 2, 3, seed, out_dir, checkpoint_dir)
    print(f"{query}: killed {run.killed}; {run.verdict}")

"""Nexmark's window queries on a real local Ray cluster, each through three
killed task actors (a random task of the job, by ``ray.kill`` or SIGKILL, each
once a checkpoint has completed since the last restart): what the sink committed
is exactly what the plain-Python reference computes from the same events."""

from __future__ import annotations

import os
import random
import time

import pytest

from bench.nexmark import generator, queries, reference
from tests.chaos import kill_random_task
from weir import JobStatus, RestartStrategy

pytestmark = pytest.mark.ray

CONFIG = generator.GeneratorConfig(seed=13, events_per_second=500)  # 72,000 events: 144 s of event time
EVENTS = 72_000
WALL_RATE = 9_000  # events per second of wall time: about 8 s a job, windows firing all along
KILLS = 3
SEEDS = [int(s) for s in os.environ.get("WEIR_KILL_SEEDS", "1").split(",")]  # which tasks die, and when


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    """The same events as Parquet, for the reference."""
    folder = str(tmp_path_factory.mktemp("nexmark"))
    generator.write(folder, EVENTS, CONFIG)
    return folder


def _completed(client) -> int:
    return max((c["checkpoint_id"] for c in client.checkpoints() if c["status"] == "COMPLETED"), default=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("query", ["q5", "q8", "q7"])
def test_a_nexmark_query_on_ray_is_exact_through_three_task_kills(
    query, seed, ray_cluster, data, checkpoint_dir, out_dir
):
    print(f"kill seed {seed} (WEIR_KILL_SEEDS={seed} replays it)")
    rng = random.Random(seed)
    source = queries.GeneratedInput(EVENTS, CONFIG, events_per_second=WALL_RATE)
    env = queries.build(query, source, 2, out_dir, checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(2 * KILLS, 0.2))
    client = env.execute_async(f"nexmark-{query}-kills", executor="ray")
    killed: list[str] = []
    seen = 0
    deadline = time.monotonic() + 60
    while len(killed) < KILLS:
        assert time.monotonic() < deadline, f"killed only {killed} in 60 s"
        assert not client.status().is_terminal, f"the job ended after only {killed}"
        done = _completed(client)
        if done > seen and client.status() is JobStatus.RUNNING:
            victim = kill_random_task(client, rng)
            if victim is not None:
                killed.append(victim)
                seen = done
        time.sleep(rng.uniform(0.1, 0.4))
    result = client.wait(120)
    assert result.restarts >= KILLS, (killed, result.restarts)
    verdict = reference.check(query, queries.read_output(out_dir), reference.QUERIES[query](data))
    print(f"{query}: killed {killed}; {verdict}")

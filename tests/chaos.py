"""Killing task actors of a running job at seeded random moments."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import ray

from actors.cluster import NAMESPACE
from connectors.files import FileSink, read_committed
from runtime import JobStatus, RestartStrategy, StreamExecutionEnvironment
from tests.checker import Verdict, check_running_sums


@dataclass
class ChaosRun:
    seed: int
    killed: list[str] = field(default_factory=list)
    restarts: int = 0
    verdict: Verdict | None = None


def kill_random_task(client, rng: random.Random) -> str | None:
    names = client.tasks()
    if not names or client.status() is not JobStatus.RUNNING:
        return None
    name = rng.choice(names)
    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE))
    except ValueError:
        return None  # replaced meanwhile
    return name


def keyed_sum_with_kills(
    seed: int, out_dir: str, checkpoint_dir: str, records: int = 2_000_000, kills: int = 3,
    pause_s: tuple[float, float] = (0.3, 1.5), burst: int = 1,
) -> ChaosRun:
    """The README's keyed-sum job (parallelism 2, checkpoints every 500 ms) while
    ``kills`` task actors die, ``burst`` at a time, ``pause_s`` apart."""
    rng = random.Random(seed)
    run = ChaosRun(seed)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(kills + 5, 0.2))
    (env.from_sequence(0, records - 1)
        .map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir, format="jsonl")))
    client = env.execute_async(f"chaos-{seed}")
    while len(run.killed) < kills and not client.status().is_terminal:
        time.sleep(rng.uniform(*pause_s))
        for _ in range(min(burst, kills - len(run.killed))):
            name = kill_random_task(client, rng)
            if name:
                run.killed.append(name)
    result = client.wait(600)
    run.restarts = result.restarts
    run.verdict = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 1000, 2 * i) for i in range(records)))
    print(f"seed={seed} kills={len(run.killed)} restarts={run.restarts} lost={run.verdict.lost} duplicated={run.verdict.duplicated}")
    return run

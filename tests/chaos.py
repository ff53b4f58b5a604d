"""Killing task actors of a running job at seeded random moments: ``ray.kill`` or
SIGKILL of the worker process, in bursts, and timing each recovery (from the last
kill of a burst to the first output a new attempt committed)."""

from __future__ import annotations

import os
import random
import re
import signal
import time
from dataclasses import dataclass, field

import ray

from connectors.files import FileSink, committed_files, read_committed
from runtime import JobStatus, RestartStrategy, StreamExecutionEnvironment
from runtime.errors import WeirError
from tests.checker import Verdict, check_running_sums

_ATTEMPT = re.compile(r"part-([0-9a-f]+)-")
RECORDS = 600_000


@dataclass
class ChaosRun:
    seed: int
    killed: list[str] = field(default_factory=list)
    restarts: int = 0
    verdict: Verdict | None = None
    conclusive: bool = False  # a checkpoint had completed before the first kill
    recovery_s: list[float] = field(default_factory=list)


def kill_random_task(client, rng: random.Random) -> str | None:
    """Kill one task actor of the running job: half the time ``ray.kill``, half
    the time SIGKILL of its worker process (this machine's cluster)."""
    names = client.tasks()
    if not names or client.status() is not JobStatus.RUNNING:
        return None
    name = rng.choice(names)
    try:
        _, vertex, subtask = name.rsplit("/", 2)
        actor = client.task_actor(vertex, int(subtask))
        if rng.random() < 0.5:
            ray.kill(actor)
            return f"{name} (ray.kill)"
        os.kill(ray.get(actor.pid.remote(), timeout=5), signal.SIGKILL)
        return f"{name} (SIGKILL)"
    except (WeirError, ray.exceptions.RayError, ProcessLookupError):
        return None  # replaced or gone meanwhile


def _attempts(out_dir: str) -> set[str]:
    return {m.group(1) for p in committed_files(out_dir) if (m := _ATTEMPT.search(os.path.basename(p)))}


def keyed_sum_with_kills(
    seed: int, out_dir: str, checkpoint_dir: str, records: int = RECORDS, kills: int = 3,
    pause_s: tuple[float, float] = (0.3, 1.5), burst: int = 1, rate: int = 60_000,
) -> ChaosRun:
    """A keyed running sum (parallelism 2, checkpoints every 500 ms, the source
    limited to ``rate`` records/s) while ``kills`` task actors die, ``burst`` at a
    time, ``pause_s`` apart; after each burst, waits for the job to commit output
    from a new attempt and records how long that took."""
    rng = random.Random(seed)
    run = ChaosRun(seed)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(kills + 5, 0.2))
    (env.from_generator(lambda i: i, count=records, records_per_second=rate)
        .map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir, format="jsonl")))
    client = env.execute_async(f"chaos-{seed}")
    while not any(m.get("records_in") for m in client.metrics()):  # the tasks are up and reading
        assert not client.status().is_terminal, "the job ended before it read a record"
        time.sleep(0.05)
    while len(run.killed) < kills and not client.status().is_terminal:
        time.sleep(rng.uniform(*pause_s))
        if not run.killed:
            run.conclusive = any(c["status"] == "COMPLETED" for c in client.checkpoints())
        before = _attempts(out_dir)
        killed_at = None
        for _ in range(min(burst, kills - len(run.killed))):
            name = kill_random_task(client, rng)
            if name:
                run.killed.append(name)
                killed_at = time.monotonic()
            time.sleep(rng.uniform(0, 0.3))
        while killed_at is not None and not client.status().is_terminal:
            if _attempts(out_dir) - before:
                run.recovery_s.append(time.monotonic() - killed_at)
                break
            time.sleep(0.05)
    result = client.wait(600)
    run.restarts = result.restarts
    run.verdict = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 1000, 2 * i) for i in range(records)))
    print(f"seed={seed} kills={len(run.killed)} restarts={run.restarts} lost={run.verdict.lost} "
          f"duplicated={run.verdict.duplicated} conclusive={run.conclusive} "
          f"recovery_s={[round(r, 2) for r in run.recovery_s]}")
    return run

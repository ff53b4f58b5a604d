"""Two independent pipelines in one job, for region failover: kill a task of one
and watch the other keep processing while the first is away."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from weir import JobClient, RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed

N = 6_000  # records per pipeline


def two_pipelines(
    checkpoint_dir: str, out_a: str, out_b: str, rate: float = 1_500.0, delay_s: float = 1.5
) -> StreamExecutionEnvironment:
    """Pipelines "a" and "b", each a rate-limited generator -> map -> file sink with
    parallelism 2: four regions, one per pipeline and subtask. A restart waits
    ``delay_s``: the window in which the other regions must go on."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, delay_s))
    for name, out in (("a", out_a), ("b", out_b)):
        (
            env.from_generator(lambda i: i, count=N, records_per_second=rate)
            .name(name)
            .map(lambda i, name=name: f"{name}{i}")
            .sink_to(FileSink(out))
        )
    return env


@dataclass
class Window:
    """What the untouched pipeline read while the killed task was away."""

    killed: str
    other_before: int
    other_after: int
    away_s: float
    probed: Any = None  # what ``probe`` returned while the task was away


def _records_in(client: JobClient, vertex: str) -> int:
    return sum(m["records_in"] for m in client.metrics() if m["task"].startswith(f"{vertex}/"))


def kill_and_watch(
    client: JobClient, kill: tuple[str, int], other: str, probe: Callable[[], Any] | None = None
) -> Window:
    """Kill task ``kill`` once both pipelines read and a checkpoint completed;
    measure ``other``'s records from when the killed task is gone until its
    replacement is deployed (calling ``probe`` in between, until it answers
    something: the job's published view may lag the task's removal by a tick)."""
    while not (
        _records_in(client, kill[0])
        and _records_in(client, other)
        and any(c["status"] == "COMPLETED" for c in client.checkpoints())
    ):
        assert not client.status().is_terminal, "the job ended before the kill"
        time.sleep(0.02)
    name = client.kill_task(*kill)
    task = f"{kill[0]}/{kill[1]}"
    while any(t.endswith(task) for t in client.tasks()):  # until it is gone (ended, or taken down)
        time.sleep(0.01)
    gone, before = time.monotonic(), _records_in(client, other)
    probed = probe() if probe is not None else None
    while not any(t.endswith(task) for t in client.tasks()):
        assert not client.status().is_terminal, "the job ended during the recovery"
        if probe is not None and not probed:
            probed = probe()
        time.sleep(0.01)
    return Window(name, before, _records_in(client, other), time.monotonic() - gone, probed)


def outputs(out_dir: str, prefix: str) -> tuple[int, int, list[str]]:
    """(lost, duplicated, unpublished files left) of one pipeline's output."""
    got = read_committed(out_dir)
    expected = {f"{prefix}{i}" for i in range(N)}
    return (
        len(expected - set(got)),
        len(got) - len(set(got)),
        sorted(n for n in os.listdir(out_dir) if n.startswith(".")),
    )

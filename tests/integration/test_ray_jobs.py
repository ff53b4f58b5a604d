"""Jobs on a real local Ray cluster: exactly-once under task-actor kills, failing
user functions, the job client, and the actors' names."""

from __future__ import annotations

import os
import time

import pytest
import ray

from tests.chaos import RECORDS, keyed_sum_with_kills
from tests.checker import check_running_sums
from tests.pausing import GatedGenerator
from weir import (
    DiscardingSink,
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    JobCancelledError,
    JobExecutionError,
    JobStatus,
    RestartStrategy,
    StreamExecutionEnvironment,
    UserFunctionError,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.errors import UnknownTaskError

pytestmark = pytest.mark.ray

SEEDS = [int(s) for s in os.environ.get("WEIR_KILL_SEEDS", "1").split(",")]


def _keyed_sum_env(checkpoint_dir: str, restarts: int = 10) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(restarts, 0.2))
    return env


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
@pytest.mark.parametrize("seed", SEEDS)
def test_keyed_sum_is_exact_when_task_actors_are_killed(ray_cluster, checkpoint_dir, out_dir, tmp_path, seed, backend):
    print(f"seed={seed}  (replay: WEIR_KILL_SEEDS={seed} pytest tests/integration/test_ray_jobs.py -k exact_when)")
    # Paced while the kills land, then at full speed: the paced seconds left after them tested nothing.
    gate = str(tmp_path / "kills-done")
    run = keyed_sum_with_kills(seed, out_dir, checkpoint_dir, kills=3, state_backend=backend(), unpace_gate=gate)
    assert run.verdict.lost == 0, f"seed={seed}"
    assert run.verdict.duplicated == 0, f"seed={seed}"
    assert run.verdict.keys_wrong == 0 and run.verdict.outputs == RECORDS
    assert run.restarts == len(run.killed)
    assert len(run.killed) >= 2, f"seed={seed}: the job ended before the kills landed"


def test_a_function_that_raises_once_restarts_from_the_checkpoint(ray_cluster, checkpoint_dir, out_dir, tmp_path):
    marker = str(tmp_path / "raised")

    def to_kv(i):
        if i == 150_000 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("transient failure on 150000")
        return (i % 100, i)

    n = 300_000
    env = _keyed_sum_env(checkpoint_dir)
    (
        env.from_sequence(0, n - 1)
        .map(to_kv)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir))
    )
    result = env.execute("raises-once")
    assert os.path.exists(marker)
    assert result.restarts == 1
    assert check_running_sums(map(tuple, read_committed(out_dir)), ((i % 100, i) for i in range(n))).exact


def test_a_function_that_always_raises_fails_with_the_users_traceback(ray_cluster, checkpoint_dir):
    def parse(i):
        return int(f"x{i}")

    env = _keyed_sum_env(checkpoint_dir, restarts=2)
    env.from_sequence(0, 99).map(parse).name("parse").sink_to(DiscardingSink())
    with pytest.raises(JobExecutionError) as info:
        env.execute("always-raises")
    text = str(info.value)
    assert "job 'always-raises' failed after 2 restart(s) (restart strategy allows 2)" in text
    assert "map function of operator 'parse' raised ValueError: invalid literal for int() with base 10: 'x" in text
    assert 'in parse\n    return int(f"x{i}")' in text
    cause = info.value.cause
    assert isinstance(cause, UserFunctionError) and cause.operator == "parse"
    assert isinstance(cause.user_exception, ValueError)
    assert info.value.__cause__ is cause and isinstance(cause.__cause__, ValueError)  # chained again after Ray


def test_job_client_status_tasks_checkpoints_metrics_and_cancel(ray_cluster, checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        env.from_generator(lambda i: (i % 7, 1), records_per_second=20_000)
        .key_by(lambda kv: kv[0])
        .sum(1)
        .name("count")
        .sink_to(DiscardingSink())
    )
    client = env.execute_async("client-api")
    deadline = time.monotonic() + 60
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        assert time.monotonic() < deadline, client.checkpoints()
        time.sleep(0.2)
    assert client.status() is JobStatus.RUNNING
    assert sorted(client.tasks()) == [
        "client-api/count/0",
        "client-api/count/1",
        "client-api/source-generator/0",
        "client-api/source-generator/1",
    ]
    for name in client.tasks():  # task actors are pooled and unnamed: the client leads from a task to its actor
        _, vertex, subtask = name.split("/")
        assert ray.get(client.task_actor(vertex, int(subtask)).ping.remote())
    done = next(c for c in client.checkpoints() if c["status"] == "COMPLETED")
    assert (
        done["duration_ms"] >= 0
        and done["size_bytes"] > 0
        and done["location"].endswith(f"chk-{done['checkpoint_id']}")
    )
    metrics = {m["task"]: m for m in client.metrics()}
    assert metrics["source-generator/0"]["records_out"] > 0
    assert metrics["count/0"]["records_in"] + metrics["count/1"]["records_in"] > 0
    assert {"backpressured_s", "state"} <= metrics["count/0"].keys()
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert client.status() is JobStatus.CANCELED


def test_a_finished_task_leaves_the_jobs_tasks_and_cannot_be_killed(ray_cluster, checkpoint_dir, tmp_path):
    """A task that finished (its source ran out) gives its slot back to the job:
    ``tasks()`` no longer names it and ``task_actor`` refuses it, so a kill meant
    for a running task (``weir kill``, a chaos test) never lands on a spare slot,
    where it would kill no task and restart nothing."""
    gate = str(tmp_path / "open-to-end-the-long-source")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    short = env.from_collection([1, 2, 3]).name("short")
    long = env.from_source(GatedGenerator(lambda i: i, 100, gate, free=10), source_name="long")
    short.union(long).map(lambda i: i + 1).name("plus").sink_to(DiscardingSink())
    client = env.execute_async("finished-task")
    deadline = time.monotonic() + 60
    while "finished-task/short/0" in (tasks := client.tasks()) or len(tasks) != 2:  # up, then "short" ends
        assert time.monotonic() < deadline, f"the finished source is still listed: {tasks}"
        time.sleep(0.05)
    with pytest.raises(UnknownTaskError, match=r"has no task short/0 running \(it finished\)"):
        client.task_actor("short", 0)
    with pytest.raises(UnknownTaskError, match=r"has no task plus/1 running \(the job has no such task\)"):
        client.task_actor("plus", 1)
    assert ray.get(client.task_actor("source-long", 0).ping.remote())
    open(gate, "w").close()
    assert client.wait(60).restarts == 0


def test_ten_tasks_run_on_two_cores(ray_cluster, checkpoint_dir, out_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(5)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (env.from_sequence(0, 9_999).map(lambda i: (i % 10, 1)).key_by(lambda kv: kv[0]).sum(1).sink_to(FileSink(out_dir)))
    result = env.execute("ten-tasks")  # 10 task actors with 0.1 CPU each on a 2-CPU cluster
    assert sorted(m["task"] for m in result.metrics) == sorted(
        [f"source-sequence/{i}" for i in range(5)] + [f"sum/{i}" for i in range(5)]
    )
    finals = {}
    for k, c in read_committed(out_dir):
        finals[k] = max(finals.get(k, 0), c)
    assert finals == {k: 1000 for k in range(10)}

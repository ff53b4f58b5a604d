"""``execute_and_collect`` on Ray: the collect sink's task actor publishes on a Ray
queue the driver owns; a killed actor shows no record twice; limit and close
cancel the job and release the queue."""

from __future__ import annotations

import time

import pytest
import ray

from tests.checker import check_running_sums
from weir import CloseableIterator, JobStatus, RestartStrategy, StreamExecutionEnvironment
from weir.runtime.errors import JobExecutionError, JobForgottenError

pytestmark = pytest.mark.ray


def _env(checkpoint_dir: str, p: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.2))
    return env


def _queue_actors() -> int:
    # From the GCS: the state API needs the dashboard, which the test cluster does not run.
    return sum(
        1
        for a in ray._private.state.actors().values()
        if a["ActorClassName"] == "_QueueActor" and a["State"] == "ALIVE"
    )


def test_a_bounded_job_collects_every_record_once_on_ray(ray_cluster, checkpoint_dir):
    env = _env(checkpoint_dir)
    with (
        env.from_collection(range(20_000))
        .map(lambda i: i + 1)
        .execute_and_collect("ray-collect", executor="ray") as results
    ):
        assert isinstance(results, CloseableIterator)
        assert sorted(results) == list(range(1, 20_001))
        assert results.job_client.status() is JobStatus.FINISHED


def test_a_killed_task_actor_shows_no_record_twice(ray_cluster, checkpoint_dir, tmp_path):
    n, gate = 60_000, tmp_path / "killed"

    def record(i: int) -> tuple[int, int]:
        # Past the first 10,000 records the input crawls until the test has killed a task,
        # so the job cannot end first however slowly this machine runs it.
        if i >= 10_000 and not gate.exists():
            time.sleep(0.002)
        return i % 10, i

    env = _env(checkpoint_dir)
    stream = (
        env.from_generator(record, count=n, records_per_second=5_000)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    collected = []
    with stream.execute_and_collect("ray-collect-kill", executor="ray") as results:
        killed, next_look = None, 0.0
        for r in results:
            collected.append(r)
            # One look at the tasks per 0.2 s, not per record: each look is a call to the
            # coordinator, and records come a checkpoint's worth at a time.
            if killed is None and len(collected) >= 2_000 and time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.2
                # tasks() lists the current attempt's tasks; reduce runs until the input ends.
                if reducers := sorted(t for t in results.job_client.tasks() if "/reduce/" in t):
                    *_, vertex, subtask = reducers[0].split("/")  # <job>/<vertex>/<subtask>
                    killed = results.job_client.kill_task(vertex, int(subtask))
                    gate.touch()
        assert killed is not None, "the job ended before the test could kill one of its tasks"
        assert results.job_client.wait().restarts >= 1
    verdict = check_running_sums(collected, ((i % 10, i) for i in range(n)))
    assert (verdict.lost, verdict.duplicated, verdict.keys_wrong, verdict.outputs) == (0, 0, 0, n)


def test_limit_cancels_an_endless_job_and_releases_the_queue(ray_cluster, checkpoint_dir):
    before = _queue_actors()
    env = _env(checkpoint_dir, p=1)
    assert env.from_generator(lambda i: i, records_per_second=5_000).execute_and_collect(
        "ray-collect-limit", limit=100, executor="ray"
    ) == list(range(100))
    deadline = time.monotonic() + 30
    while _queue_actors() > before:
        assert time.monotonic() < deadline, "the collect queue's actor outlived the iterator"
        time.sleep(0.2)
    assert ray.is_initialized()


def _forgotten(client) -> None:
    """Waits until the job's coordinator has forgotten the job (its record lingered)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            client.tasks()
        except JobForgottenError:
            return
        assert time.monotonic() < deadline, "the coordinator kept the job's record past its linger"
        time.sleep(0.2)


def test_a_reader_slower_than_the_jobs_record_still_gets_every_record_and_the_end(
    ray_cluster, checkpoint_dir, monkeypatch
):
    # A notebook reads a few records, leaves for longer than weir keeps an ended job's
    # record, then reads on: the end comes from the job's result in checkpoint storage.
    monkeypatch.setenv("WEIR_JOB_LINGER_S", "1")
    env = _env(checkpoint_dir, p=1)
    with (
        env.from_collection(range(1000))
        .map(lambda i: i * 2)
        .execute_and_collect("ray-collect-forgotten", executor="ray") as results
    ):
        first = next(results)
        _forgotten(results.job_client)
        assert sorted([first, *results]) == list(range(0, 2000, 2))
        assert results.job_client.status() is JobStatus.FINISHED
        assert results.job_client.wait().status is JobStatus.FINISHED


def test_a_failed_job_read_after_its_record_is_gone_still_raises_its_error(ray_cluster, checkpoint_dir, monkeypatch):
    monkeypatch.setenv("WEIR_JOB_LINGER_S", "1")
    env = _env(checkpoint_dir, p=1).set_restart_strategy(RestartStrategy.no_restart())

    def explode(i: int) -> int:
        if i == 700:
            raise ValueError("record 700 is bad")
        return i

    with (
        env.from_collection(range(1000))
        .map(explode)
        .execute_and_collect("ray-collect-forgotten-failed", executor="ray") as results
    ):
        _forgotten(results.job_client)
        with pytest.raises(JobExecutionError, match="record 700 is bad"):
            list(results)

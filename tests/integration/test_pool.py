"""The slot pool: jobs run on task actors started ahead of time, reuse them
across one driver's jobs without leaking a user's modules, and replace killed
ones (an ended job whose coordinator dies: test_coordinator_recovery.py)."""

from __future__ import annotations

import os
import time

import pytest
import ray

from weir import JobStatus, StreamExecutionEnvironment
from weir.actors.pool import get_pool
from weir.connectors.files import FileSink, read_committed

pytestmark = pytest.mark.ray


def _probe(folder: str):
    def probe(i: int) -> tuple[int, int, int]:
        import sys

        if folder not in sys.path:
            sys.path.insert(0, folder)
        import weir_pool_probe  # a user's module: the test edits it between jobs

        return i, os.getpid(), weir_pool_probe.VALUE

    return probe


def _run_probe(folder: str, out: str, name: str) -> list[tuple[int, int, int]]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.from_collection(list(range(20))).map(_probe(folder)).sink_to(FileSink(out, format="jsonl"))
    assert env.execute(name).status is JobStatus.FINISHED
    return sorted(map(tuple, read_committed(out)))


def test_slots_serve_later_jobs_and_a_users_edited_module_is_imported_afresh(ray_cluster, tmp_path):
    module = tmp_path / "weir_pool_probe.py"
    module.write_text("VALUE = 1\n")
    first = _run_probe(str(tmp_path), str(tmp_path / "out-0"), "pool-probe-0")
    assert [v for _, _, v in first] == [1] * 20
    first_pids = {pid for _, pid, _ in first}
    module.write_text("VALUE = 2\n")
    os.utime(module, (time.time() + 5, time.time() + 5))  # a new mtime, whatever the clock's granularity
    seen: set[int] = set()
    for run in range(1, 10):  # the pool hands out its idle slots in turn: run until one comes back
        out = _run_probe(str(tmp_path), str(tmp_path / f"out-{run}"), f"pool-probe-{run}")
        assert {v for _, _, v in out} == {2}, f"run {run} saw the old module: {out[:3]}"
        seen |= {pid for _, pid, _ in out}
        if seen & first_pids:
            break
    assert seen & first_pids, "no later job ran on the first job's slot: slots are not reused"


def test_a_killed_task_actor_is_replaced_from_the_pool_and_never_served_again(ray_cluster, checkpoint_dir, out_dir):
    n = 200_000
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        env.from_generator(lambda i: (i % 10, 1), count=n, records_per_second=50_000)
        .key_by(lambda kv: kv[0])
        .sum(1)
        .name("count")
        .sink_to(FileSink(out_dir, format="jsonl"))
    )
    client = env.execute_async("pool-kill")
    deadline = time.monotonic() + 60
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        assert time.monotonic() < deadline, client.checkpoints()
        time.sleep(0.1)
    tasks = [tuple(name.rsplit("/", 2)[1:]) for name in client.tasks()]
    before = {(v, int(i)): client.task_actor(v, int(i))._actor_id.hex() for v, i in tasks}
    victim = client.task_actor("count", 1)
    victim_id = victim._actor_id.hex()
    ray.kill(victim)
    while client.task_actor("count", 1)._actor_id.hex() == victim_id:
        assert time.monotonic() < deadline + 60, "the killed task was not redeployed"
        time.sleep(0.05)
    # The failover restarted every task (one keyed region), but only the killed one
    # needed a new actor: the others were cancelled and redeployed on the same
    # actors (tasks of one shape may swap actors).
    after = {client.task_actor(*key)._actor_id.hex() for key in before}
    assert set(before.values()) - after == {victim_id} and len(after - set(before.values())) == 1
    result = client.wait(120)
    assert result.status is JobStatus.FINISHED and result.restarts == 1
    totals: dict[int, int] = {}
    for key, total in read_committed(out_dir):
        totals[key] = max(totals.get(key, 0), total)
    assert totals == {k: n // 10 for k in range(10)}
    pool = get_pool()
    assert victim_id not in ray.get(pool.slot_ids.remote()), "the pool still lists the killed actor"


def test_slots_that_died_while_idle_are_replaced_without_a_restart(ray_cluster, out_dir):
    pool = get_pool()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    env.from_sequence(0, 99).map(lambda i: (i % 3, 1)).key_by(lambda kv: kv[0]).sum(1).sink_to(
        FileSink(out_dir, format="jsonl")
    )
    env.execute("pool-warm")  # the pool now holds idle slots of this shape: the job's 8, the fresh ones
    idle = ray.get(pool.idle_slots.remote())
    # Short of CPUs (what else holds them on the session's cluster) the pool retires idle slots at once.
    assert idle, (
        f"no idle slot to kill: {ray.get(pool.stats.remote())}, CPUs free: {ray.available_resources().get('CPU')}"
    )
    for actor in idle:
        ray.kill(actor)  # dead, but the pool does not know yet
    # At parallelism 1 the job takes 2 slots a try, its application's idle ones first: the
    # 8 dead would last it 4 tries, one more than it makes before it fails and restarts.
    env2 = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env2.from_sequence(0, 99).map(lambda i: (i % 3, 1)).key_by(lambda kv: kv[0]).sum(1).sink_to(
        FileSink(out_dir + "-2", format="jsonl")
    )
    result = env2.execute("pool-after-idle-deaths")
    assert (result.status, result.restarts) == (JobStatus.FINISHED, 0)
    totals: dict[int, int] = {}
    for key, total in read_committed(out_dir + "-2"):
        totals[key] = max(totals.get(key, 0), total)
    assert totals == {0: 34, 1: 33, 2: 33}

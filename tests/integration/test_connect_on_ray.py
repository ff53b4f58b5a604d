"""connect and broadcast state on a real local Ray cluster: the unit tests' jobs
with task actors killed, against the same plain-Python references."""

from __future__ import annotations

import threading

import pytest

from tests.unit.jobs.test_broadcast_state import _events, _expected, _job
from tests.unit.jobs.test_connect import _check_sum_job, _inputs, _sum_job
from weir import RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import read_committed

pytestmark = pytest.mark.ray


def _env(checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_parallelism(8)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.2))
    return env


def _kill_after_checkpoints(client, vertex, subtasks, checkpoints=2):
    """Kill ``vertex/subtask`` for each subtask, each after ``checkpoints`` more completed."""
    for subtask in subtasks:
        after = max([c["checkpoint_id"] for c in client.checkpoints()], default=0) + checkpoints
        while not any(c["status"] == "COMPLETED" and c["checkpoint_id"] >= after for c in client.checkpoints()):
            assert not client.status().is_terminal, "the job ended before the kill"
            threading.Event().wait(0.02)
        client.kill_task(vertex, subtask)  # a task on its way back from the last kill's failover is waited for


def test_a_keyed_co_process_job_is_exact_when_its_task_actors_are_killed(ray_cluster, checkpoint_dir, out_dir):
    pairs, lines = _inputs(60_000)
    env = _env(checkpoint_dir)
    _sum_job(env, pairs, lines, out_dir, lines_per_second=15_000)
    client = env.execute_async("keyed-co-on-ray")
    _kill_after_checkpoints(client, "sum", [0, 1])
    assert client.wait(300).restarts == 2
    _check_sum_job(out_dir, pairs, lines)


@pytest.mark.parametrize("keyed", [True, False])
def test_broadcast_state_survives_killed_task_actors(ray_cluster, checkpoint_dir, out_dir, tmp_path, keyed):
    events = _events(60_000)
    env = _env(checkpoint_dir)
    gate = str(tmp_path / "kills-done")  # the events wait there until both kills are done
    _job(env, events, out_dir, keyed, gate, rules_per_second=8)
    client = env.execute_async("broadcast-on-ray")
    _kill_after_checkpoints(client, "apply", [0, 1])
    open(gate, "w").close()
    assert client.wait(300).restarts == 2
    assert sorted(map(tuple, read_committed(out_dir))) == _expected(events)

"""The job coordinator dies: the pool hands its job to a standby coordinator,
which recovers it from the latest completed checkpoint in storage; the output
stays exact, and clients follow the job there."""

from __future__ import annotations

import os
import pathlib
import threading
import time

import pytest
import ray

from tests.checker import check_running_sums
from tests.pausing import PacedUntilGate
from weir import JobStatus, StreamExecutionEnvironment, WeirError
from weir.actors.executor import RayJobClient
from weir.actors.pool import get_pool
from weir.connectors.files import FileSink, committed_files, read_committed
from weir.runtime.shared_state import metadata_files
from weir.runtime.storage import read_metadata

pytestmark = pytest.mark.ray

N = 120_000


def _keyed_sum(
    checkpoint_dir: str, out_dir: str, n: int, interval_ms: int = 200, gate: str | None = None
) -> StreamExecutionEnvironment:
    """A keyed running sum of n records at 12,000/s, parallelism 2, checkpoints
    every 200 ms. With ``gate`` (a file path) the source keeps to the rate until
    the file exists (:func:`_unpace`), then reads the rest at full speed: the
    test paces the job while it kills, and need not wait out the paced rest."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        (
            env.from_generator(lambda i: (i % 50, i), count=n, records_per_second=12_000)
            if gate is None
            else env.from_source(PacedUntilGate(lambda i: (i % 50, i), n, 12_000, gate), source_name="generator")
        )
        .uid("gen")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .uid("sums")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def _unpace(gate: str) -> None:
    open(gate, "w").close()


def _completed(client) -> list[int]:
    try:
        return [c["checkpoint_id"] for c in client.checkpoints() if c["status"] == "COMPLETED"]
    except Exception:
        return []  # the coordinator is restarting


def _wait_completed_after(client, after: int) -> int:
    """The latest completed checkpoint, once one after ``after`` completed."""
    deadline = time.monotonic() + 90
    while max(done := _completed(client), default=0) <= after:
        assert time.monotonic() < deadline, f"no checkpoint after {after}"
        time.sleep(0.05)
    return max(done)


def _vertex_subtask(name: str) -> tuple[str, int]:
    vertex, subtask = name.rsplit("/", 2)[1:]
    return vertex, int(subtask)


def _task_actor_ids(client) -> set[str]:
    """The job's task actors, once it has deployed its tasks (a recovered job can
    report its recovered checkpoint as completed before it deploys them)."""
    deadline = time.monotonic() + 60
    while not (tasks := client.tasks()):
        assert time.monotonic() < deadline, "the job never deployed its tasks"
        time.sleep(0.05)
    return {client.task_actor(*_vertex_subtask(name))._actor_id.hex() for name in tasks}


def test_three_coordinator_kills_with_checkpoints_between_still_give_exact_output(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    """The recovered job runs on the task actors of the old attempt: their tasks
    are cancelled and they are reused, as in a failover, instead of killed."""
    gate = str(tmp_path / "kills-done")
    env = _keyed_sum(checkpoint_dir, out_dir, N, gate=gate)
    client = env.execute_async("coordinator-kills")
    last, actors = 0, set()
    for _kill in range(3):
        last = _wait_completed_after(client, last)
        assert not actors or _task_actor_ids(client) == actors, (
            "the recovery started new task actors instead of reusing the job's"
        )
        actors = _task_actor_ids(client)
        ray.kill(client.coordinator)
        print(f"killed the coordinator after checkpoint {last}")
    _wait_completed_after(client, last)  # the last coordinator recovered the job and checkpoints on
    _unpace(gate)
    result = client.wait(180)
    assert result.status is JobStatus.FINISHED
    # The checkpoint it recovered from may be listed (it counts towards the retained
    # ones); every checkpoint of its own has an id past it: ids go on, never reused.
    ids = [c["checkpoint_id"] for c in client.checkpoints()]
    assert [i for i in ids if i <= last] in ([], [last]) and max(ids) > last, ids
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 50, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v
    # One checkpoint retained (the default), whoever wrote it, and no file that no
    # complete checkpoint names (before: every coordinator's last checkpoint stayed,
    # and the files of checkpoints that were being written when it died).
    (run,) = pathlib.Path(checkpoint_dir.removeprefix("file://"), "coordinator-kills").iterdir()
    (kept,) = run.glob("chk-*/_metadata")
    named = metadata_files(read_metadata("file://" + str(kept.parent)))
    assert {"file://" + str(p) for p in (run / "shared").iterdir()} == named


def test_a_savepoint_then_the_coordinator_dying_duplicates_nothing(ray_cluster, checkpoint_dir, out_dir, tmp_path):
    """Issue #13 item 1: the restarted coordinator recovers from the last checkpoint,
    older than the savepoint; had the savepoint committed the sink, the records
    between the two would be committed twice (30,951 duplicated updates before)."""
    gate = str(tmp_path / "killed")
    env = _keyed_sum(checkpoint_dir, out_dir, N, interval_ms=3000, gate=gate)
    client = env.execute_async("savepoint-then-death")
    _wait_completed_after(client, 0)
    time.sleep(0.5)
    location = client.savepoint(str(tmp_path / "sp"))
    ray.kill(client.coordinator)
    _unpace(gate)
    assert "/savepoint-" in location
    result = client.wait(180)
    assert result.status is JobStatus.FINISHED
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 50, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v


@pytest.mark.parametrize("moment", ["checkpoint-half-acknowledged", "checkpoint-before-metadata"])
def test_the_coordinator_dying_mid_checkpoint_never_uses_that_checkpoint(
    ray_cluster, checkpoint_dir, out_dir, tmp_path, monkeypatch, moment
):
    """Killed (os._exit) with a checkpoint half acknowledged, or with every ack in
    but its metadata not written: the restarted coordinator recovers from the
    checkpoint before, and no sink transaction is committed twice."""
    mark = tmp_path / "fault-mark"
    monkeypatch.setenv("WEIR_FAULT", moment)
    monkeypatch.setenv("WEIR_FAULT_MARK", str(mark))
    n, gate = 60_000, str(tmp_path / "died")
    client = _keyed_sum(checkpoint_dir, out_dir, n, gate=gate).execute_async(f"dies-{moment}")
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert time.monotonic() < deadline and not client.status().is_terminal, "the coordinator never died"
        time.sleep(0.05)
    _unpace(gate)
    result = client.wait(180)
    assert mark.read_text() == moment  # it did die there
    assert result.status is JobStatus.FINISHED
    half_written = [p for p in (tmp_path / "checkpoints").rglob("chk-*") if not (p / "_metadata").exists()]
    assert not half_written, "the recovery sweeps the checkpoint it died in"
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 50, i) for i in range(n)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, n), v


def _exact(out_dir: str, n: int) -> None:
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 50, i) for i in range(n)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, n), v


@pytest.mark.parametrize("call", ["savepoint", "rescale"])
def test_the_coordinator_dying_during_a_savepoint_or_rescale_duplicates_nothing(
    ray_cluster, checkpoint_dir, out_dir, tmp_path, call
):
    """The call in flight fails or completes; the job recovers from its latest
    checkpoint either way, and what the user keeps beside the savepoint folder stays."""
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "precious.txt").write_text("the user's")
    n, gate = N // 2, str(tmp_path / "killed")
    client = _keyed_sum(checkpoint_dir, out_dir, n, gate=gate).execute_async(f"dies-during-{call}")
    _wait_completed_after(client, 0)
    answers: list = []

    def ask() -> None:
        try:
            answers.append(
                client.savepoint(str(tmp_path / "sp")) if call == "savepoint" else client.rescale({"sums": 3})
            )
        except Exception as exc:  # noqa: BLE001 - judged below
            answers.append(exc)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.05)
    ray.kill(client.coordinator)
    asking.join(150)
    assert not asking.is_alive(), f"the {call} call hangs after its coordinator died"
    assert isinstance(answers[0], (str, float, WeirError)), answers
    _unpace(gate)
    assert client.wait(180).status is JobStatus.FINISHED
    _exact(out_dir, n)
    assert (tmp_path / "sp" / "precious.txt").read_text() == "the user's"


@pytest.mark.parametrize("moment", ["checkpoint-half-acknowledged", "checkpoint-before-metadata"])
def test_the_coordinator_dying_in_the_final_checkpoint_of_a_bounded_job_duplicates_nothing(
    ray_cluster, checkpoint_dir, out_dir, tmp_path, monkeypatch, moment
):
    """No periodic checkpoint comes (60 s interval): the one it dies in is the
    bounded job's final checkpoint, which commits everything. The restarted
    coordinator, with no complete checkpoint to go back to, runs the job again
    from the start, and the sinks, which committed nothing, end exact."""
    mark = tmp_path / "fault-mark"
    monkeypatch.setenv("WEIR_FAULT", moment)
    monkeypatch.setenv("WEIR_FAULT_MARK", str(mark))
    n = 20_000
    result = _keyed_sum(checkpoint_dir, out_dir, n, interval_ms=60_000).execute(f"dies-finishing-{moment}")
    assert mark.read_text() == moment
    assert result.status is JobStatus.FINISHED
    _exact(out_dir, n)


def test_a_coordinator_killed_after_its_job_ended_does_not_bring_it_back(ray_cluster, checkpoint_dir, out_dir):
    """Issue #13 item 3, on Ray: the ended job's coordinator lingers and dies; no
    standby may take the ended job over and commit again."""
    n = 20_000
    client = _keyed_sum(checkpoint_dir, out_dir, n).execute_async("ended-then-killed")
    assert client.wait(120).status is JobStatus.FINISHED
    files = committed_files(out_dir)
    ray.kill(client.coordinator)
    time.sleep(5)  # a redeployed job would have committed output by now
    assert committed_files(out_dir) == files
    _exact(out_dir, n)


def test_a_job_handed_to_a_coordinator_that_died_idle_runs_once_to_its_end(ray_cluster, checkpoint_dir, out_dir):
    """Every idle coordinator is killed and the next job is submitted at once:
    the pool may hand it to a dead one before it noticed the death. The start
    fails, and the job runs once, on another."""
    assert _keyed_sum(checkpoint_dir, out_dir, 2_000).execute("fills-the-pool").status is JobStatus.FINISHED
    killed = ray.get(get_pool(create=False).idle_coordinators.remote())
    for coordinator in killed:
        ray.kill(coordinator)
    n, second_out = 20_000, out_dir + "-second"
    second = _keyed_sum(checkpoint_dir, second_out, n).execute_async("handed-to-the-dead")
    assert second.coordinator._actor_id not in {c._actor_id for c in killed}
    result = second.wait(60)
    assert (result.status, result.restarts) == (JobStatus.FINISHED, 0)
    _exact(second_out, n)


def test_clients_follow_the_job_to_the_coordinator_that_took_it_over(ray_cluster, checkpoint_dir, out_dir, tmp_path):
    """Another driver's client (attach) and the submitter's keep working, and
    coordinators can die any number of times: no Ray restart budget. The job's
    exception history goes with it: a task's failure, then each coordinator's death."""
    n, gate = 60_000, str(tmp_path / "kills-done")
    client = _keyed_sum(checkpoint_dir, out_dir, n, gate=gate).execute_async("followed")
    watcher = RayJobClient.attach("followed")
    last = _wait_completed_after(client, 0)
    victim = _vertex_subtask(client.tasks()[-1])
    client.kill_task(*victim)
    last = _wait_completed_after(client, last)
    first, killed = client.coordinator, set()
    for _ in range(6):
        killed.add(watcher.coordinator._actor_id)
        ray.kill(watcher.coordinator)
        last = _wait_completed_after(watcher, last)
    assert len(killed) == 6 and watcher.info()["coordinator_recovered"]
    history = watcher.exceptions()
    assert [h["exception"] for h in history[:6]] == ["JobCoordinatorDied"] * 6, history
    assert len(history) == 7 and history[6]["task"] == "/".join(map(str, victim)), history
    assert [h["at"] for h in history] == sorted((h["at"] for h in history), reverse=True), "not newest first"
    _unpace(gate)
    assert client.wait(120).status is JobStatus.FINISHED
    assert client.coordinator._actor_id not in killed and first._actor_id in killed
    _exact(out_dir, n)


def test_a_task_stuck_in_user_code_when_its_coordinator_dies_is_killed_and_the_rest_reused(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    """The recovery cancels the old attempt's tasks to reuse their actors; one
    that does not return (a user function stuck for a minute) is killed after
    the pool's grace and replaced, and the output stays exact."""
    mark, n, gate = str(tmp_path / "stuck"), 60_000, str(tmp_path / "recovered")

    def stall(kv):
        if kv[1] == 12_000 and not os.path.exists(mark):
            open(mark, "w").close()
            time.sleep(60)
        return kv

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        env.from_source(PacedUntilGate(lambda i: (i % 50, i), n, 12_000, gate), source_name="generator")
        .map(stall)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("stuck-when-coordinator-dies")
    _wait_completed_after(client, 0)
    deadline = time.monotonic() + 60
    while not os.path.exists(mark):
        assert time.monotonic() < deadline, "the function never stalled"
        time.sleep(0.05)
    before, last = _task_actor_ids(client), max(_completed(client))
    ray.kill(client.coordinator)
    _wait_completed_after(client, last)  # recovered
    assert len(before - _task_actor_ids(client)) == 1, (
        "exactly the stuck task's actor is replaced; the others are reused"
    )
    _unpace(gate)
    assert client.wait(120).status is JobStatus.FINISHED
    _exact(out_dir, n)

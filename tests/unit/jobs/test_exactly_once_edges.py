"""The edges of exactly-once (issue #13), on the in-process executor: where a
savepoint is written and what an aborted one deletes, what a savepoint commits,
what a recovering job master does with a run that had ended, and with storage it
cannot list or read."""

from __future__ import annotations

import errno
import pathlib
import shutil
import threading
import time

import pytest

import weir.runtime.storage
from tests.checker import check_running_sums
from tests.pausing import GatedGenerator
from weir import DiscardingSink, JobStatus, StreamExecutionEnvironment, WeirError
from weir.connectors.files import FileSink, read_committed
from weir.runtime.clock import ManualClock
from weir.runtime.errors import CheckpointStorageError
from weir.runtime.jobmaster import JobMaster
from weir.runtime.letters import Request, TriggerSavepoint
from weir.runtime.local import LocalExecutor, LocalGateway
from weir.runtime.master_options import MasterOptions
from weir.runtime.off_loop import inline
from weir.runtime.restore import starting_point
from weir.runtime.task import Cancel

N = 20_000


def _pair(i: int) -> tuple[int, int]:
    return i % 50, i


def _job(
    checkpoint_dir: str,
    out_dir: str,
    savepoint: str | None = None,
    rate: float | None = 40_000,
    interval_ms: int = 100,
    gate: str | None = None,
) -> StreamExecutionEnvironment:
    """The keyed sum of N records, ``rate`` a second. With ``gate`` (a file path)
    each of the two readers stops after a quarter of the records and reads on
    once the file exists: the job runs until the test opens the gate, stops or
    cancels it (a paced job could end first on a loaded machine)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    if savepoint:
        env.restore_from_savepoint(savepoint)
    if gate is not None:
        source = env.from_source(GatedGenerator(_pair, N, gate, N // 4, rate))
    else:
        source = env.from_generator(_pair, count=N, records_per_second=rate)
    (
        source.uid("gen")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .uid("sums")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def _running(env: StreamExecutionEnvironment, name: str):
    client = env.execute_async(name, executor="local")
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" for s in c.checkpoints()))
    return client


def _exact(out_dir: str) -> tuple[int, int, int, int]:
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 50, i) for i in range(N)))
    return v.lost, v.duplicated, v.keys_wrong, v.outputs


# ---------------------------------------------------------------- where savepoints go
def test_an_aborted_savepoint_deletes_nothing_it_did_not_write(tmp_path, checkpoint_dir, out_dir, monkeypatch):
    target = tmp_path / "savepoints"
    target.mkdir()
    (target / "precious.txt").write_text("the user's")
    real = weir.runtime.storage._atomic_write

    def full_disk_under_target(uri: str, data: bytes) -> None:
        if str(target) in uri and uri.endswith(".state"):
            raise OSError(errno.ENOSPC, "No space left on device", uri)
        real(uri, data)

    monkeypatch.setattr(weir.runtime.storage, "_atomic_write", full_disk_under_target)
    client = _running(_job(checkpoint_dir, out_dir, gate=str(tmp_path / "never-opened")), "aborted-savepoint")
    with pytest.raises(WeirError, match="No space left on device"):
        client.savepoint(str(target))
    client.cancel()
    assert (target / "precious.txt").read_text() == "the user's"
    assert sorted(p.name for p in target.iterdir()) == ["precious.txt"]  # its own folder is gone, nothing else


def test_each_savepoint_gets_a_fresh_folder_that_can_be_moved_and_restored(tmp_path, checkpoint_dir, out_dir):
    target = tmp_path / "savepoints"
    client = _running(_job(checkpoint_dir, out_dir, gate=str(tmp_path / "never-opened")), "two-savepoints")
    first, second = (client.savepoint(str(target)).removeprefix("file://") for _ in range(2))
    client.cancel()
    assert first != second and {pathlib.Path(first).parent, pathlib.Path(second).parent} == {target}
    assert pathlib.Path(first).name.startswith("savepoint-") and (pathlib.Path(first) / "_metadata").is_file()
    assert (pathlib.Path(second) / "_metadata").is_file(), "the second savepoint must not overwrite the first"

    # A savepoint is self-contained: moved elsewhere, it restores (its _metadata names its files relatively).
    moved = tmp_path / "archive" / "sp"
    shutil.move(second, moved)
    shutil.rmtree(target)
    resumed = _job(checkpoint_dir, out_dir, savepoint=str(moved), rate=None).execute("two-savepoints", executor="local")
    assert resumed.status is JobStatus.FINISHED
    rows = read_committed(out_dir)
    assert {k: max(t for kk, t in rows if kk == k) for k in range(50)} == {k: sum(range(k, N, 50)) for k in range(50)}


def test_a_savepoint_without_a_path_is_kept_after_the_checkpoints_that_follow_and_restores(
    tmp_path, checkpoint_dir, out_dir
):
    """Before, it was a retained checkpoint that the next completion deleted: the
    restore from the printed path failed with "no completed checkpoint or savepoint there"."""
    client = _running(_job(checkpoint_dir, out_dir, gate=str(tmp_path / "never-opened")), "default-savepoint")
    location = client.savepoint()
    after = max(c["checkpoint_id"] for c in client.checkpoints())
    client.wait_until(
        lambda c: sum(s["status"] == "COMPLETED" and s["checkpoint_id"] > after for s in c.checkpoints()) >= 2
    )
    client.cancel()
    resumed = _job(checkpoint_dir, out_dir, savepoint=location, rate=None).execute(
        "default-savepoint", executor="local"
    )
    assert resumed.status is JobStatus.FINISHED
    rows = read_committed(out_dir)
    assert {k: max(t for kk, t in rows if kk == k) for k in range(50)} == {k: sum(range(k, N, 50)) for k in range(50)}
    assert location.startswith(f"{checkpoint_dir}/default-savepoint/savepoints/savepoint-")


def test_restore_from_the_folder_a_savepoint_was_asked_into(tmp_path, checkpoint_dir, out_dir):
    target = tmp_path / "savepoints"
    client = _running(_job(checkpoint_dir, out_dir, gate=str(tmp_path / "never-opened")), "restore-by-target")
    client.stop(str(target), drain=False)
    assert client.wait(30).status is JobStatus.SUSPENDED
    resumed = _job(checkpoint_dir, out_dir, savepoint=str(target), rate=None).execute(
        "restore-by-target", executor="local"
    )
    assert resumed.status is JobStatus.FINISHED and _exact(out_dir) == (0, 0, 0, N)
    (target / "savepoint-another").mkdir()
    (target / "savepoint-another" / "_metadata").write_text("{}")
    with pytest.raises(WeirError, match="2 savepoints or checkpoints are inside: name one of savepoint-"):
        _job(checkpoint_dir, out_dir, savepoint=str(target)).execute("restore-by-target", executor="local")


# ---------------------------------------------------------------- what a savepoint commits
def _master(graph, recovering: bool = False) -> tuple[JobMaster, LocalGateway]:
    gateway = LocalGateway()
    master = JobMaster(graph, gateway, MasterOptions(recovering=recovering, storage_io=inline))
    gateway.master = master
    return master, gateway


def test_a_savepoint_commits_nothing_and_recovery_after_it_duplicates_nothing(tmp_path, checkpoint_dir, out_dir):
    """A savepoint, then the job master dies before the next checkpoint: the
    restarted one recovers from the latest *checkpoint*, older than the savepoint.
    Had the savepoint committed the sink, the records between the two would be
    committed twice."""
    # No periodic checkpoint comes: the test takes the checkpoint itself.
    graph = _job(checkpoint_dir, out_dir, interval_ms=600_000, rate=10_000).get_job_graph("savepoint-then-death")
    master, gateway = _master(graph)
    master.start()  # driven by hand, so that it can "die" without ending the run

    def ask(location: str | None) -> str:
        answer: list[str] = []
        asking = threading.Thread(
            target=lambda: answer.append(master.ask(TriggerSavepoint(location, Request()), 30)), daemon=True
        )
        asking.start()
        while not answer:
            master.run_until_idle()
            threading.Event().wait(0.005)
        return answer[0]

    def run_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            master.run_until_idle()
            threading.Event().wait(0.005)

    run_for(0.3)
    master.checkpoints.trigger(master.clock())  # a checkpoint: it commits
    run_for(0.3)
    assert master.coordinator.completed == 1
    committed = len(read_committed(out_dir))
    ask(str(tmp_path / "sp"))  # a savepoint
    run_for(0.1)
    assert len(read_committed(out_dir)) == committed, "the savepoint committed the sink"
    gateway.kill_all()  # the job master dies, and its tasks with it
    assert master.status is JobStatus.RUNNING
    recovered, _ = _master(graph, recovering=True)
    recovered.run()
    assert recovered.status is JobStatus.FINISHED
    assert _exact(out_dir) == (0, 0, 0, N)


# ---------------------------------------------------------------- a recovering job master
def test_a_run_that_ended_is_not_run_again_by_a_recovering_job_master(checkpoint_dir, out_dir):
    env = _job(checkpoint_dir, out_dir, rate=None)
    graph = env.get_job_graph("ended-run")
    assert LocalExecutor().submit(graph).wait(60).status is JobStatus.FINISHED
    committed = len(read_committed(out_dir))
    recovered, gateway = _master(graph, recovering=True)
    deployed: list[int] = []
    real_deploy = gateway.deploy
    gateway.deploy = lambda deployments: (deployed.append(len(deployments)), real_deploy(deployments))  # type: ignore[method-assign]
    recovered.run()
    assert recovered.status is JobStatus.FINISHED and deployed == [], "an ended run was deployed again"
    assert len(read_committed(out_dir)) == committed


def test_a_recovering_job_master_that_cannot_list_its_storage_fails_naming_it(checkpoint_dir, out_dir, monkeypatch):
    env = _job(checkpoint_dir, out_dir, rate=None)
    graph = env.get_job_graph("unlistable")
    LocalExecutor().submit(graph).wait(60)
    for result in pathlib.Path(checkpoint_dir.removeprefix("file://")).rglob("_result"):
        result.unlink()  # as if it had died before the end
    monkeypatch.setattr(weir.runtime.storage, "_READ_RETRIES_S", (0.0, 0.0))
    real = weir.runtime.storage._resolve

    class Unlistable:
        def __init__(self, fs):
            self._fs = fs

        def get_file_info(self, what):
            if isinstance(what, weir.runtime.storage.pafs.FileSelector):
                raise OSError(errno.EIO, "Input/output error")
            return self._fs.get_file_info(what)

        def __getattr__(self, name):
            return getattr(self._fs, name)

    monkeypatch.setattr(weir.runtime.storage, "_resolve", lambda uri: (Unlistable(real(uri)[0]), real(uri)[1]))
    recovered, _ = _master(graph, recovering=True)
    recovered.run()
    assert recovered.status is JobStatus.FAILED
    assert isinstance(recovered.life.failure, CheckpointStorageError) and "cannot be listed (" in str(
        recovered.life.failure
    )
    assert graph.run_id in str(recovered.life.failure)


def test_a_recovering_job_master_that_finds_no_trace_of_its_run_fails_instead_of_starting_over(tmp_path, out_dir):
    env = _job("file://" + str(tmp_path / "elsewhere"), out_dir, rate=None)
    graph = env.get_job_graph("no-trace")
    recovered, _ = _master(graph, recovering=True)
    recovered.run()
    assert recovered.status is JobStatus.FAILED
    assert "holds no trace of this run" in str(recovered.life.failure) and str(tmp_path / "elsewhere") in str(
        recovered.life.failure
    )
    assert not pathlib.Path(out_dir).exists() or not read_committed(out_dir)


def test_a_transient_read_error_retries_the_same_checkpoint(checkpoint_dir, out_dir, monkeypatch, caplog):
    env = _job(checkpoint_dir, out_dir, rate=None)
    env.get_checkpoint_config().set_num_retained_checkpoints(3)
    graph = env.get_job_graph("flaky-read")
    LocalExecutor().submit(graph).wait(60)
    for result in pathlib.Path(checkpoint_dir.removeprefix("file://")).rglob("_result"):
        result.unlink()
    monkeypatch.setattr(weir.runtime.storage, "_READ_RETRIES_S", (0.0, 0.0, 0.0))
    real = weir.runtime.storage._resolve
    failures = {"left": 2}

    def flaky(uri: str):
        if uri.endswith("_metadata") and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.ETIMEDOUT, "Connection timed out")
        return real(uri)

    monkeypatch.setattr(weir.runtime.storage, "_resolve", flaky)
    storage = weir.runtime.storage.CheckpointStorage(graph.checkpointing.storage, graph.name, graph.run_id)
    start = starting_point(storage, graph, recovering=True)
    assert failures["left"] == 0 and start.points[-1][1]["checkpoint_id"] == max(storage.checkpoint_ids())
    assert not any("skipping damaged checkpoint" in r.message for r in caplog.records)


# ---------------------------------------------------------------- the job's status
def test_the_job_status_follows_its_transition_table_and_a_wrong_change_changes_nothing(checkpoint_dir, out_dir):
    from weir.runtime.errors import JobStatusError

    legal = {s: {t for t in JobStatus if s.can_become(t)} for s in JobStatus}
    assert legal[JobStatus.RESTARTING] == {JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.FAILED}
    assert all(not legal[s] for s in JobStatus if s.is_terminal)  # an ended job never changes again
    assert all(JobStatus.FAILED in legal[s] for s in JobStatus if not s.is_terminal)
    master, gateway = _master(_job(checkpoint_dir, out_dir).get_job_graph("table"))
    master.start()
    try:
        with pytest.raises(JobStatusError, match="job 'table': RUNNING cannot become SUSPENDED"):
            master.life.become(JobStatus.SUSPENDED)
        assert master.status is JobStatus.RUNNING
    finally:
        gateway.kill_all()


def test_a_second_cancel_does_not_put_off_killing_tasks_that_do_not_close(checkpoint_dir, out_dir):
    """Each cancel re-armed the kill timer: a user pressing cancel again kept a job
    with a stuck task CANCELLING for ever. Found by the transition table."""
    clock = ManualClock()
    gateway = LocalGateway()
    master = JobMaster(
        _job(checkpoint_dir, out_dir).get_job_graph("cancel-twice"),
        gateway,
        MasterOptions(clock=clock.now, storage_io=inline),
    )
    gateway.master = master
    send = gateway.send
    gateway.send = lambda task, letter: (
        None if isinstance(letter, Cancel) else send(task, letter)
    )  # tasks that never close
    master.start()
    try:
        master.cancel()
        master.run_until_idle()
        assert master.status is JobStatus.CANCELLING
        clock.set(JobMaster.CANCEL_TIMEOUT_S * 0.8)
        master.cancel()
        master.run_until_idle()
        clock.set(JobMaster.CANCEL_TIMEOUT_S * 1.1)
        master.run_until_idle()
        assert master.status is JobStatus.CANCELED
    finally:
        gateway.kill_all()


class _StubGateway:
    """Deploys nothing; the test says which tasks exit and how."""

    def __init__(self) -> None:
        self.exits: list = []
        self.keys: list = []

    def deploy(self, deployments) -> None:
        self.keys = [d.key for d in deployments]

    def send(self, task, letter) -> None:
        pass

    def poll_exits(self) -> list:
        out, self.exits = self.exits, []
        return out

    def on_exit(self, wake) -> None:
        pass  # the test polls by hand

    def kill(self, tasks) -> None:
        pass

    def kill_all(self) -> None:
        pass

    def stop_deploying(self) -> None:
        pass

    def reserve(self, graph) -> bool:
        return True

    def metrics(self) -> list:
        return []


def test_a_bounded_job_that_finishes_before_a_stops_savepoint_completes_is_finished(checkpoint_dir, tmp_path):
    """The last task finished before acknowledging the stop's savepoint: the
    aborted savepoint restarted the job, whose status then went from RESTARTING to
    FINISHED (an illegal change that failed it; seen in the control races). The
    job is FINISHED and the stop fails, saying why."""
    from weir.runtime.letters import StopJob
    from weir.runtime.task import TaskResult, TaskState

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_collection([1, 2, 3]).sink_to(DiscardingSink())
    gateway = _StubGateway()
    master = JobMaster(env.get_job_graph("finishes-first"), gateway, MasterOptions(storage_io=inline))
    master.start()
    stop = StopJob(str(tmp_path / "sp"), False, Request())
    master.mailbox.put_control(stop)
    master.run_until_idle()
    assert master.coordinator.pending  # the stop's savepoint, triggered
    gateway.exits = [(key, TaskResult(TaskState.FINISHED)) for key in gateway.keys]
    master.run_until_idle()
    assert master.status is JobStatus.FINISHED
    with pytest.raises(
        WeirError, match="stop of job 'finishes-first' did not happen: the job finished before its savepoint completed"
    ):
        stop.request.wait(1)


def test_a_stops_savepoint_retried_after_a_task_finished_gets_a_folder_its_aborted_attempt_does_not_discard(
    checkpoint_dir, tmp_path
):
    """A task finished between the plan of a stop's savepoint and its ack: the
    attempt is aborted, its folder discarded on the storage I/O thread, and the
    savepoint retried. The retry used the same folder, so the discard could run
    after the retry's tasks wrote their state: the stop returned a savepoint whose
    ``_metadata`` named task files that were gone, and resuming from it failed
    (seen in CI). The retry writes to a folder of its own."""
    from weir.runtime.letters import StopJob
    from weir.runtime.task import TaskResult, TaskState

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_collection(list(range(10))).sink_to(DiscardingSink())
    gateway, io = _StubGateway(), []
    master = JobMaster(
        env.get_job_graph("one-finishes"), gateway, MasterOptions(storage_io=io.append)
    )  # the I/O thread runs late

    def run_io() -> None:
        while io:
            io.pop(0)()

    master.start()
    run_io()
    master.mailbox.put_control(StopJob(str(tmp_path / "sp"), False, Request()))
    master.run_until_idle()
    (first,) = master.coordinator.pending.values()
    gateway.exits = [(gateway.keys[0], TaskResult(TaskState.FINISHED))]
    master.run_until_idle()
    (retry,) = master.coordinator.pending.values()
    assert retry.checkpoint_id != first.checkpoint_id
    # The remaining task writes its state for the retry before the aborted attempt's discard runs.
    written = pathlib.Path(retry.location.removeprefix("file://")) / "task.state"
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_bytes(b"state")
    run_io()
    assert written.exists(), "the aborted attempt's discard deleted the retry's state"
    assert not pathlib.Path(first.location.removeprefix("file://")).exists()


def test_a_job_whose_end_cannot_be_recorded_still_ends_for_its_clients(caplog):
    """The job master records the end where a restarted one would look (the
    pool) before anyone hears of it. When that call raised (the pool
    unreachable), every client's ``wait()`` waited for ever on a FINISHED job.
    Clients get the end; the error is logged, naming the job."""
    from weir.runtime.local import LocalJobClient

    def pool_unreachable(status: JobStatus) -> None:
        raise ConnectionError("the pool is unreachable")

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.from_collection([1, 2, 3]).sink_to(DiscardingSink())
    gateway = LocalGateway()
    master = JobMaster(env.get_job_graph("end-unrecorded"), gateway, MasterOptions(on_end=pool_unreachable))
    gateway.master = master
    threading.Thread(target=master.run, daemon=True).start()
    result = LocalJobClient(master, gateway).wait(10)
    assert result.status is JobStatus.FINISHED
    assert "could not record the end (FINISHED) of job 'end-unrecorded': the pool is unreachable" in caplog.text


def test_a_letter_the_job_master_does_not_know_fails_the_job_loudly_naming_it(checkpoint_dir, out_dir):
    """Before, a letter no branch took was dropped without a word."""
    graph = _job(checkpoint_dir, out_dir, rate=1_000).get_job_graph("unknown-letter")
    master, gateway = _master(graph)
    threading.Thread(target=master.run, daemon=True).start()
    master.mailbox.put_control(("a", "stray", "letter"))
    assert master.wait(30) and master.status is JobStatus.FAILED
    assert "job master of 'unknown-letter' got a letter it does not know: ('a', 'stray', 'letter')" in str(
        master.life.failure
    )

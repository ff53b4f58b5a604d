"""Stop-with-savepoint, savepoints and resume on the in-process executor (FLIP-34/45)."""

from __future__ import annotations

import pytest

from tests.checker import check_running_sums
from weir import JobExecutionError, JobStatus, StreamExecutionEnvironment, WeirError
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.operators import StreamOperator

N = 30_000


def _job(checkpoint_dir, out_dir, parallelism=2, savepoint=None, rate=40_000, allow=False, extra_uid=None):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    if savepoint:
        env.restore_from_savepoint(savepoint, allow_non_restored_state=allow)
    s = env.from_generator(lambda i: (i % 50, i), count=N, records_per_second=rate).uid("gen")
    if extra_uid:
        s = s.map(lambda r: r).uid(extra_uid)
    s.key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sums").sink_to(FileSink(out_dir)).uid(
        "out"
    )
    return env


def _wait_for_checkpoint(client):
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" for s in c.checkpoints()))


def _exact(out_dir):
    return check_running_sums(map(tuple, read_committed(out_dir)), ((i % 50, i) for i in range(N)))


@pytest.mark.parametrize("p_before,p_after", [(2, 2), (2, 3), (3, 1)])
def test_stop_without_drain_then_resume_equals_an_uninterrupted_run(
    tmp_path, checkpoint_dir, out_dir, p_before, p_after
):
    client = _job(checkpoint_dir, out_dir, p_before).execute_async("stop-resume", executor="local")
    _wait_for_checkpoint(client)
    savepoint = client.stop(str(tmp_path / "sp"), drain=False)
    result = client.wait(30)
    assert result.status is JobStatus.SUSPENDED
    committed = len(read_committed(out_dir))
    assert 0 < committed < N, "the stop should land mid-stream"
    resumed = _job(checkpoint_dir, out_dir, p_after, savepoint=savepoint, rate=None).execute(
        "stop-resume", executor="local"
    )
    assert resumed.status is JobStatus.FINISHED
    v = _exact(out_dir)
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N)


def test_a_drained_job_resumes_from_its_savepoint_where_its_sources_stood(tmp_path, checkpoint_dir, out_dir):
    """As Flink: a drained task ran finish() but had not exited when the savepoint
    was taken, so it is not finished on restore; the sources read on from their
    positions (before, the restored job ended at once, having read nothing)."""
    client = _job(checkpoint_dir, out_dir).execute_async("drain-resume", executor="local")
    _wait_for_checkpoint(client)
    savepoint = client.stop(str(tmp_path / "sp"), drain=True)
    assert client.wait(30).status is JobStatus.FINISHED
    committed = len(read_committed(out_dir))
    assert 0 < committed < N, "the stop should land mid-stream"
    resumed = _job(checkpoint_dir, out_dir, savepoint=savepoint, rate=None)
    assert resumed.execute("drain-resume", executor="local").status is JobStatus.FINISHED
    v = _exact(out_dir)
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N)


def test_stop_without_a_path_takes_a_final_retained_checkpoint(tmp_path, checkpoint_dir, out_dir):
    client = _job(checkpoint_dir, out_dir).execute_async("stop-retained", executor="local")
    _wait_for_checkpoint(client)
    location = client.stop()
    assert location.startswith(checkpoint_dir) and "/chk-" in location
    assert client.wait(30).status is JobStatus.SUSPENDED
    _job(checkpoint_dir, out_dir, savepoint=location, rate=None).execute("stop-retained", executor="local")
    assert _exact(out_dir).exact


def test_savepoint_keeps_the_job_running_and_can_be_resumed_elsewhere(tmp_path, checkpoint_dir, out_dir):
    client = _job(checkpoint_dir, out_dir).execute_async("savepoint-run", executor="local")
    _wait_for_checkpoint(client)
    sp = client.savepoint(str(tmp_path / "sp"))
    assert (
        sp.startswith(f"file://{tmp_path}/sp/savepoint-")
        and (tmp_path / "sp" / sp.rsplit("/", 1)[1] / "_metadata").exists()
    )
    assert client.status() is JobStatus.RUNNING
    assert client.wait(30).status is JobStatus.FINISHED
    assert _exact(out_dir).exact
    kinds = {c["kind"] for c in client.checkpoints() if c["status"] == "COMPLETED"}
    assert kinds == {"checkpoint", "savepoint"}
    # The savepoint restores into another job writing elsewhere: it has the state up to it.
    other = str(tmp_path / "other")
    _job(checkpoint_dir, other, savepoint=sp, rate=None).execute("from-savepoint", executor="local")
    assert check_running_sums(map(tuple, read_committed(other)), []).outputs > 0


def test_restore_refuses_state_of_a_missing_uid_unless_allowed(tmp_path, checkpoint_dir, out_dir):
    client = _job(checkpoint_dir, out_dir, extra_uid="enrich").execute_async("uid-check", executor="local")
    _wait_for_checkpoint(client)
    sp = client.stop(str(tmp_path / "sp"))
    client.wait(30)
    # A stateless operator that is gone is fine; a stateful one is an error.
    job = _job(checkpoint_dir, str(tmp_path / "o2"), savepoint=sp, rate=None)
    job.execute("uid-check-2", executor="local")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.restore_from_savepoint(sp)

    def without_the_reduce():
        env.from_generator(lambda i: (i % 50, i), count=N).uid("gen").sink_to(FileSink(str(tmp_path / "o3"))).uid("out")

    without_the_reduce()
    with pytest.raises(
        JobExecutionError, match=r"holds state of operator 'Reduce' \(uid 'sums'\), which this job does not have"
    ):
        env.execute("uid-check-3", executor="local")
    env.restore_from_savepoint(sp, allow_non_restored_state=True)
    without_the_reduce()  # the failed execute ran the pipeline: the next runs what is built after it, as in PyFlink
    assert env.execute("uid-check-4", executor="local").status is JobStatus.FINISHED


def test_a_missing_savepoint_is_a_clear_error(tmp_path, checkpoint_dir, out_dir):
    env = _job(checkpoint_dir, out_dir, savepoint=str(tmp_path / "nothing-here"))
    with pytest.raises(JobExecutionError, match=r"nothing-here/_metadata is unusable: missing"):
        env.execute("missing-sp", executor="local")


def test_stop_or_savepoint_of_an_ended_job_is_refused(checkpoint_dir, out_dir, tmp_path):
    client = _job(checkpoint_dir, out_dir, rate=None).execute_async("ended", executor="local")
    client.wait(30)
    with pytest.raises(WeirError, match="job 'ended' is FINISHED: no savepoint or stop now"):
        client.stop(str(tmp_path / "sp"))


class _Recorder(StreamOperator):
    """Passes records on; records the lifecycle calls it sees."""

    events: list[str] = []

    def process_batch(self, records, timestamps=None):
        self.output.collect(records, timestamps)

    def process_watermark(self, watermark):
        self.events.append(f"watermark {'MAX' if watermark.timestamp == MAX_WATERMARK else watermark.timestamp}")
        super().process_watermark(watermark)

    def finish(self):
        self.events.append("finish")

    def close(self):
        self.events.append("close")


@pytest.mark.parametrize("drain", [True, False])
def test_stop_with_drain_delivers_max_watermark_before_finish(tmp_path, checkpoint_dir, out_dir, drain):
    _Recorder.events = []
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        env.from_generator(lambda i: i, records_per_second=1000)
        .key_by(lambda i: i % 3)
        .transform("recorder", _Recorder)
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("drain", executor="local")
    _wait_for_checkpoint(client)
    client.stop(str(tmp_path / "sp"), drain=drain)
    result = client.wait(30)
    if drain:
        assert result.status is JobStatus.FINISHED
        assert _Recorder.events == ["watermark MAX", "finish", "close"]
    else:
        assert result.status is JobStatus.SUSPENDED
        assert _Recorder.events == ["close"]


class _FailingSnapshots(StreamOperator):
    broken = False

    def process_batch(self, records, timestamps=None):
        self.output.collect(records, timestamps)

    def snapshot_state(self, checkpoint_id):
        if _FailingSnapshots.broken:
            raise OSError("No space left on device")
        return super().snapshot_state(checkpoint_id)


def test_a_failing_stop_fails_the_request_with_the_reason_and_the_job_keeps_running(tmp_path, checkpoint_dir, out_dir):
    _FailingSnapshots.broken = False
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        env.from_generator(lambda i: (i % 5, i), count=N, records_per_second=20_000)
        .uid("gen")
        .transform("fragile", _FailingSnapshots)
        .uid("fragile")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .uid("sums")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    client = env.execute_async("failing-stop", executor="local")
    _wait_for_checkpoint(client)
    _FailingSnapshots.broken = True
    with pytest.raises(
        WeirError,
        match=r"stop of job 'failing-stop' failed.*snapshot_state\(\) of operator 'fragile' raised OSError: No space left on device",
    ):
        client.stop(str(tmp_path / "sp"))
    _FailingSnapshots.broken = False
    client.wait_until(lambda c: c.status() is JobStatus.RUNNING)
    with pytest.raises(WeirError, match="savepoint path"):
        client.savepoint("nosuch://x/y")  # refused before anything starts; the job goes on
    assert client.status() is JobStatus.RUNNING
    result = client.wait(60)
    assert result.status is JobStatus.FINISHED and result.restarts <= 1
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 5, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v

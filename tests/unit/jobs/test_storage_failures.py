"""Broken checkpoint storage (in-process executor): a damaged checkpoint is a typed
error naming the file and recovery falls back to the previous complete one, never
to scratch; a full disk declines a checkpoint and the job goes on, until more
checkpoints failed in a row than tolerated."""

from __future__ import annotations

import errno
import glob
import os
import pathlib
import re

import pytest

import weir.runtime.storage
from weir import DiscardingSink, RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed
from weir.runtime.errors import JobExecutionError

N, KEYS = 20_000, 10
EXPECTED = {k: sum(range(k, N, KEYS)) for k in range(KEYS)}


def _complete_checkpoints(root: str) -> list[pathlib.Path]:
    done = glob.glob(f"{root}/**/chk-*/_metadata", recursive=True)
    return [pathlib.Path(p).parent for p in sorted(done, key=lambda p: int(p.split("chk-")[1].split("/")[0]))]


def damage(folder: pathlib.Path, how: str) -> str:
    states = sorted(folder.glob("*.state"))
    target = states[0]
    if how == "flipped byte":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    elif how == "empty file":
        target.write_bytes(b"")
    elif how == "missing subtask file":
        target.unlink()
    elif how == "deleted checkpoint folder":
        for f in folder.iterdir():
            if f.name != "_metadata":  # the job master holds the metadata in memory already
                f.unlink()
    return target.name


class Sabotage:
    """Once past record N/2, with enough checkpoints complete: damage the newest
    complete checkpoint, then fail (so the restart has to restore it)."""

    def __init__(self, root: str, flag: str, how: str, at_least: int) -> None:
        self.root, self.flag, self.how, self.at_least = root, flag, how, at_least

    def __call__(self, i: int) -> int:
        if i >= N // 2 and i % 100 == 0 and not os.path.exists(self.flag):
            done = _complete_checkpoints(self.root)
            if len(done) >= self.at_least:
                pathlib.Path(self.flag).write_text(damage(done[-1], self.how))
                raise RuntimeError("boom")
        return i


def _job(tmp_path, how: str, retained: int):
    root = str(tmp_path / "checkpoints")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage("file://" + root)
    cc.set_num_retained_checkpoints(retained)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0))
    out = str(tmp_path / "out")
    (
        env.from_generator(lambda i: i, count=N, records_per_second=20_000)
        .map(Sabotage(root, str(tmp_path / "flag"), how, retained))
        .map(lambda i: (i % KEYS, i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out))
    )
    return env, out


@pytest.mark.parametrize("how", ["flipped byte", "empty file", "missing subtask file", "deleted checkpoint folder"])
def test_a_damaged_checkpoint_falls_back_to_the_previous_complete_one(tmp_path, how, caplog):
    env, out = _job(tmp_path, how, retained=2)
    result = env.execute(f"damaged-{how.replace(' ', '-')}", executor="local")
    assert result.restarts == 2  # the failure, then the damaged checkpoint
    damaged_file = (tmp_path / "flag").read_text()
    assert any(damaged_file in r.message and "falling back to" in r.message for r in caplog.records)
    finals: dict[int, int] = {}
    for k, total in read_committed(out):
        finals[k] = max(finals.get(k, 0), total)
    assert finals == EXPECTED  # state rolled back consistently: every final total exact


def test_with_no_earlier_checkpoint_the_job_fails_naming_the_file_instead_of_starting_over(tmp_path):
    env, _ = _job(tmp_path, "flipped byte", retained=1)
    with pytest.raises(JobExecutionError) as info:
        env.execute("damaged-no-fallback", executor="local")
    message = str(info.value)
    assert (tmp_path / "flag").read_text() in message and "checksum mismatch" in message
    assert "no earlier complete checkpoint is left to fall back to" in message


def _of_checkpoint(uri: str, checkpoint_id: int) -> bool:
    """A file of that checkpoint: in its folder, or a task's file in the shared folder."""
    return (
        f"/chk-{checkpoint_id}/" in uri or re.search(rf"/shared/.*-{checkpoint_id}-[0-9a-f]+\.state$", uri) is not None
    )


def _failing_state_writes(monkeypatch, when):
    real = weir.runtime.storage._atomic_write

    def write(uri: str, data: bytes) -> None:
        if uri.endswith(".state") and when(uri):
            raise OSError(errno.ENOSPC, "No space left on device", uri)
        real(uri, data)

    monkeypatch.setattr(weir.runtime.storage, "_atomic_write", write)


def _summing_job(tmp_path, tolerable: int | None = None):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(50)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage("file://" + str(tmp_path / "checkpoints"))
    if tolerable is not None:
        cc.set_tolerable_checkpoint_failure_number(tolerable)
    out = str(tmp_path / "out")
    env.from_generator(lambda i: i, count=N, records_per_second=40_000).map(lambda i: (i % KEYS, i)).key_by(
        lambda kv: kv[0]
    ).reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(FileSink(out))
    return env, out


def test_a_full_disk_declines_that_checkpoint_and_the_job_goes_on(tmp_path, monkeypatch):
    _failing_state_writes(monkeypatch, lambda uri: _of_checkpoint(uri, 2))
    env, out = _summing_job(tmp_path)
    client = env.execute_async("disk-full-once", executor="local")
    result = client.wait(60)
    stats = {c["checkpoint_id"]: c for c in client.checkpoints()}
    assert stats[2]["status"] == "ABORTED" and "No space left on device" in stats[2]["reason"]
    assert result.restarts == 0 and stats[3]["status"] == "COMPLETED"
    rows = read_committed(out)
    assert len(rows) == N and {k: max(t for kk, t in rows if kk == k) for k in range(KEYS)} == EXPECTED


def test_more_failed_checkpoints_in_a_row_than_tolerated_fail_the_job(tmp_path, monkeypatch):
    _failing_state_writes(monkeypatch, lambda uri: not _of_checkpoint(uri, 1))
    env, _ = _summing_job(tmp_path, tolerable=2)
    with pytest.raises(
        JobExecutionError, match=r"3 checkpoints failed in a row \(tolerable: 2\); last: .*No space left on device"
    ):
        env.execute("disk-full", executor="local")


def test_a_recovering_job_master_skips_a_checkpoint_with_truncated_metadata(tmp_path, caplog):
    from weir.runtime.local import LocalExecutor
    from weir.runtime.restore import starting_point
    from weir.runtime.storage import CheckpointStorage

    env, _ = _summing_job(tmp_path)
    env.get_checkpoint_config().set_num_retained_checkpoints(3)
    graph = env.get_job_graph("truncated-metadata")
    client = LocalExecutor().submit(graph)
    client.wait(60)
    done = _complete_checkpoints(str(tmp_path / "checkpoints"))
    assert len(done) >= 2
    metadata = done[-1] / "_metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    (done[-1].parent / "_result").unlink()  # as if its job master had died before the end
    start = starting_point(
        CheckpointStorage(graph.checkpointing.storage, graph.name, graph.run_id), graph, recovering=True
    )
    assert start.points[-1][1]["checkpoint_id"] == int(done[-2].name.split("-")[1])
    assert any(
        "skipping damaged checkpoint" in r.message and "_metadata is unusable" in r.message for r in caplog.records
    )


@pytest.mark.parametrize(
    "metadata",
    [
        '{"operators": {}}',
        '{"checkpoint_id": 3, "operators": {"sums": {"vertex": "reduce", "parallelism": 2}}}',
        '{"checkpoint_id": 3, "operators": {"sums": {"vertex": "reduce", "parallelism": 2, "max_parallelism": 128, '
        '"fully_finished": false, "handles": [{"uri": "x"}]}}}',
    ],
)
def test_well_formed_but_wrong_metadata_is_a_damaged_checkpoint_not_a_key_error(tmp_path, metadata):
    """Issue #13 item 7: restoring it raised a bare KeyError."""
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "_metadata").write_text(metadata)
    env, _ = _summing_job(tmp_path)
    env.restore_from_savepoint(str(tmp_path / "sp"))
    with pytest.raises(JobExecutionError, match=r"sp/_metadata is unusable: not weir checkpoint metadata \("):
        env.execute("wrong-metadata", executor="local")


def test_a_hanging_storage_write_does_not_stall_the_job_master(tmp_path, monkeypatch):
    """Issue #13 item 7: the job master wrote checkpoint metadata on its loop, so
    a storage that hangs kept it from timing the checkpoint out and from taking a
    cancel until the write returned."""
    import threading

    import weir.runtime.checkpoint_flow
    from weir.runtime.executor import JobStatus
    from weir.runtime.local import LocalExecutor
    from weir.runtime.off_loop import OffLoopThread
    from weir.runtime.testing import ManualClock

    entered, release = threading.Event(), threading.Event()
    write = weir.runtime.checkpoint_flow.write_metadata

    def hanging_write(location, metadata):
        entered.set()
        release.wait(60)
        write(location, metadata)

    monkeypatch.setattr(weir.runtime.checkpoint_flow, "write_metadata", hanging_write)
    monkeypatch.setattr(
        OffLoopThread, "CLOSE_TIMEOUT_S", 1.0
    )  # how long the cancel waits for the hung write (5 s by default)
    clock = ManualClock()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(50).get_checkpoint_config().set_checkpoint_storage(str(tmp_path)).set_checkpoint_timeout(
        500
    )
    env.from_generator(lambda i: i, records_per_second=1000).map(lambda x: x).sink_to(DiscardingSink())
    client = LocalExecutor(clock).submit(env.get_job_graph("hanging-storage"))
    try:
        client.wait_until(lambda c: bool(c.tasks()))  # deployed: checkpoints are timed from here
        clock.advance(0.05)  # the first checkpoint is due
        assert entered.wait(10)
        clock.advance(1.0)  # its timeout (0.5 s) passes while the metadata is written
        client.wait_until(
            lambda c: any("its metadata was still being written" in (s["reason"] or "") for s in c.checkpoints())
        )
        client.cancel(timeout_s=OffLoopThread.CLOSE_TIMEOUT_S + 5)
        assert client.status() is JobStatus.CANCELED
    finally:
        release.set()


def test_a_bounded_job_whose_storage_fills_up_fails_naming_it_and_keeps_what_it_committed(tmp_path, monkeypatch):
    """Issue row 1: the final checkpoint was retried at once, many times a
    second, for ever (the job stayed RUNNING). Now each retry waits a backoff
    (made short here), and after DEFAULT_TOLERABLE_STORAGE_FAILURES + 1 storage
    failures in a row the job fails naming the storage and the OS error."""
    from weir.connectors.files import committed_files
    from weir.runtime.checkpointing import DEFAULT_TOLERABLE_STORAGE_FAILURES, FailedCheckpoints
    from weir.runtime.errors import CheckpointStorageError

    out = str(tmp_path / "out")
    monkeypatch.setattr(FailedCheckpoints, "MAX_RETRY_DELAY_S", 0.05)
    _failing_state_writes(monkeypatch, lambda uri: bool(committed_files(out)))  # full once something is committed
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(20).get_checkpoint_config().set_checkpoint_storage(
        "file://" + str(tmp_path / "checkpoints")
    )
    env.from_generator(lambda i: i, count=6_000, records_per_second=20_000).sink_to(FileSink(out))
    client = env.execute_async("storage-fills-up", executor="local")
    with pytest.raises(JobExecutionError) as info:
        client.wait(30)
    error = info.value.cause
    assert isinstance(error, CheckpointStorageError)
    assert str(error).startswith(f"checkpoint storage file://{tmp_path}/checkpoints/storage-fills-up/")
    assert "11 checkpoints failed in a row writing to it" in str(error) and "[Errno 28] No space left on device" in str(
        error
    )
    statuses = [s["status"] for s in client.checkpoints()]
    completed = statuses.index("ABORTED")
    assert completed >= 1 and statuses == ["COMPLETED"] * completed + ["ABORTED"] * (
        DEFAULT_TOLERABLE_STORAGE_FAILURES + 1
    )
    rows = read_committed(out)
    assert rows and sorted(rows) == list(range(len(rows)))  # what was committed is all there, once

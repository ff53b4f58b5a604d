"""A job master taken over by another (a standby coordinator), staged in-process:
the new one keeps its predecessor's checkpoints under the job's retention rule
and sweeps what no complete checkpoint names; and the old one, still running
(a network partition), writes and deletes nothing once it was taken over.

Each job master is driven by hand (``run_until_idle``) with its own gateway and
tasks, as a coordinator on another process would have; storage work runs
inline, so that what the test reads is what the job masters have done."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pyarrow import fs as pafs

from tests.s3 import files_under
from weir import DiscardingSink, JobStatus, StreamExecutionEnvironment
from weir.runtime.errors import FencedError
from weir.runtime.jobmaster import JobMaster
from weir.runtime.local import LocalGateway
from weir.runtime.master_options import MasterOptions
from weir.runtime.off_loop import inline
from weir.runtime.shared_state import metadata_files
from weir.runtime.storage import join, read_metadata

ATTEMPTS_PER_INCARNATION = 1_000_000  # as actors.coordinator numbers a takeover's attempts


def _graph(checkpoint_dir: str, name: str):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(50 if checkpoint_dir.startswith("file:") else 300)  # moto answers in ~30 ms a request
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.get_checkpoint_config().set_num_retained_checkpoints(1)
    (
        env.from_generator(lambda i: (i % 500, i), count=10_000_000, records_per_second=20_000)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(DiscardingSink())
    )
    return env.get_job_graph(name)


def _master(graph: Any, incarnation: int) -> tuple[JobMaster, LocalGateway]:
    gateway = LocalGateway()
    options = MasterOptions(
        recovering=incarnation > 0,
        storage_io=inline,
        incarnation=incarnation,
        first_attempt=incarnation * ATTEMPTS_PER_INCARNATION,
    )
    master = JobMaster(graph, gateway, options)
    gateway.master = master
    master.start()
    return master, gateway


def _run_until(masters: list[JobMaster], done: Any, timeout_s: float = 60) -> None:
    """Drive the job masters until ``done()``, asked every 50 ms (it may list storage)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for _ in range(10):
            for m in masters:
                if not m.status.is_terminal:
                    m.run_until_idle()
            threading.Event().wait(0.005)


@pytest.fixture(params=["file", "s3"])
def storage(request, checkpoint_dir) -> str:
    """Checkpoint storage on a local disk, or on S3 (moto's server)."""
    return checkpoint_dir if request.param == "file" else request.getfixturevalue("s3_server").uri()


def _run_uri(storage: str, job: str) -> str:
    """The URI of the job's one run in ``storage``."""
    (started,) = [f for f in files_under(join(storage, job)) if f.endswith("/_job")]
    fs, _ = pafs.FileSystem.from_uri(storage)
    return join(storage, job + "/" + started.rsplit("/", 2)[1])


def _complete(run: str) -> list[int]:
    return sorted(int(f.rsplit("/", 2)[1][4:]) for f in files_under(run) if f.endswith("/_metadata"))


def _named(run: str, checkpoint_id: int) -> set[str]:
    return {_path(uri) for uri in metadata_files(read_metadata(join(run, f"chk-{checkpoint_id}")))}


def _shared(run: str, checkpoint_id: int | None = None) -> set[str]:
    files = files_under(join(run, "shared"))
    return {f for f in files if checkpoint_id is None or f"-{checkpoint_id}-" in f.rsplit("/", 1)[1]}


def _path(uri: str) -> str:
    return pafs.FileSystem.from_uri(uri)[1]


def test_a_job_taken_over_three_times_keeps_the_retained_checkpoints_and_no_file_no_checkpoint_names(
    storage, monkeypatch
):
    """Before, each takeover left its predecessor's checkpoints for ever (with one
    retained: 4 after three takeovers), and the files of the checkpoint that was
    being written when the job master died. At the first takeover one task's
    write is held until the new job master swept: before, it then landed, named
    by no checkpoint (a slow store made the suite fail on S3 now and then)."""
    held, release = _held_writes(monkeypatch)
    graph = _graph(storage, "taken-over")
    master, gateway = _master(graph, 0)
    run = _run_uri(storage, "taken-over")
    for incarnation in range(1, 4):
        _run_until([master], lambda m=master: m.coordinator.completed >= 2)
        # The job master dies while its tasks write a checkpoint's files: they
        # stay in the shared folder, named by no complete checkpoint.
        cid = master.checkpoints.trigger(master.clock())
        if incarnation == 1:
            held.append(f"reduce-1-{cid}-")
        _run_until(
            [], lambda cid=cid, hold=incarnation == 1: len(_shared(run, cid)) >= 2 and (not hold or held[-1] == "held")
        )
        writers = [t for t in threading.enumerate() if t.name.startswith("chk-")]
        gateway.kill_all()
        leftovers = _shared(run, cid)
        master, gateway = _master(graph, incarnation)  # recovers: retention and the sweep run before any task
        release.set()
        for t in writers:  # the dead tasks' writes are over
            t.join(30)
        (kept,) = _complete(run)  # one retained: the predecessors' older checkpoints are gone
        assert _shared(run) == _named(run, kept), f"takeover {incarnation}"
        assert not leftovers & _shared(run)
    gateway.kill_all()


def _held_writes(monkeypatch) -> tuple[list[str], threading.Event]:
    """Task state writes whose name starts with the last entry of the list wait
    for the event; the list then ends with "held"."""
    from weir.runtime import snapshot_writer

    held: list[str] = []
    release = threading.Event()
    write = snapshot_writer.write_state

    def holding(folder, name, *args, **kwargs):
        if held and name.startswith(held[-1]):
            held.append("held")
            release.wait(30)
        return write(folder, name, *args, **kwargs)

    monkeypatch.setattr(snapshot_writer, "write_state", holding)
    return held, release


def test_a_job_master_taken_over_while_it_still_runs_writes_and_deletes_nothing(storage):
    """A partition: the old job master and its tasks go on after a standby took
    the job over. Before, the old one completed checkpoints the new one did not
    know and, retaining one, deleted the checkpoint the new one had restored
    from, with the files its checkpoints build on."""
    graph = _graph(storage, "partitioned")
    old, old_gateway = _master(graph, 0)
    _run_until([old], lambda: old.coordinator.completed >= 2)
    new, new_gateway = _master(graph, 1)
    before = old.coordinator.completed
    run = _run_uri(storage, "partitioned")
    _run_until(
        [old, new],
        lambda: new.coordinator.completed >= 3 and (old.status.is_terminal or old.coordinator.completed > before + 1),
    )
    latest = new.checkpoints.restore.latest
    assert latest is not None
    assert _named(run, latest["checkpoint_id"]) <= _shared(run), "the old job master deleted files the new one names"
    assert old.coordinator.completed == before, "the old job master completed checkpoints after the takeover"
    assert old.status is JobStatus.FAILED and isinstance(old.life.failure, FencedError)
    assert "taken over by incarnation 1" in str(old.life.failure)
    assert _complete(run) == [latest["checkpoint_id"]]
    assert not any(f.endswith("/_result") for f in files_under(run))  # the old one's end is not the job's
    old_gateway.kill_all()
    new_gateway.kill_all()

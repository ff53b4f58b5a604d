"""One task driven by hand: FLIP-147's finishing and exit gate, and alignment
with real operators (no executor, no threads but the snapshot writer)."""

from __future__ import annotations

import os

from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import EndOfData, EndOfPartition
from weir.runtime.sinks import SinkOperator
from weir.runtime.task import TaskState
from weir.runtime.testing import TaskHarness


def _sink_task(tmp_path, channels=1) -> tuple[TaskHarness, str]:
    out = str(tmp_path / "out")
    h = TaskHarness(
        [("sink", lambda n, u: SinkOperator(n, u, FileSink(out)))], channels, "file://" + str(tmp_path / "chk")
    )
    return h, out


def test_concurrent_checkpoints_after_finish_exit_on_the_first_completion(tmp_path):
    """FLIP-147: checkpoints 42, 43, 44 pending after finish; 43 completes first.
    The task exits on 43, commits what 42 and 43 covered, and 44 opens nothing
    that is ever committed."""
    h, out = _sink_task(tmp_path)
    h.deliver(0, ["a", "b"], EndOfData(drain=True))
    assert h.task.state is TaskState.FINISHING and h.ports.ended_input
    for cid in (42, 43, 44):
        h.deliver(0, h.barrier(cid))
    assert [a[0] for a in h.ports.acks] == [42, 43, 44]
    assert all(s.finished for _, _, ops in h.ports.acks for s in ops.values())
    assert read_committed(out) == []
    h.deliver(0, EndOfPartition())
    assert h.result is None, "no checkpoint after finish has completed yet"
    h.notify_complete(43)
    assert h.result is not None and h.result.state is TaskState.FINISHED
    assert read_committed(out) == ["a", "b"]
    assert [n for n in os.listdir(out) if n.startswith(".")] == [], "44 left nothing behind"


def test_the_exit_also_waits_for_every_producer_to_exit(tmp_path):
    h, out = _sink_task(tmp_path, channels=2)
    h.deliver(0, ["a"], EndOfData(drain=True))
    h.deliver(1, ["b"], EndOfData(drain=True))
    h.deliver(0, h.barrier(1))
    h.deliver(1, h.barrier(1))
    h.notify_complete(1)
    assert h.result is None and sorted(read_committed(out)) == ["a", "b"]
    h.deliver(0, EndOfPartition())
    assert h.result is None
    h.deliver(1, EndOfPartition())
    assert h.result.state is TaskState.FINISHED


def test_a_checkpoint_before_finish_does_not_open_the_exit_gate(tmp_path):
    h, out = _sink_task(tmp_path)
    h.deliver(0, ["a"], h.barrier(1))
    h.deliver(0, ["b"], EndOfData(drain=True), EndOfPartition())
    h.notify_complete(1)
    assert h.result is None and read_committed(out) == ["a"]
    h.trigger(2)  # the producer exited: the task is triggered directly
    h.notify_complete(2)
    assert h.result.state is TaskState.FINISHED and sorted(read_committed(out)) == ["a", "b"]


def test_alignment_holds_back_the_early_channel_then_snapshots_once(tmp_path):
    h, out = _sink_task(tmp_path, channels=2)
    h.deliver(0, ["a"], h.barrier(7))
    h.deliver(0, ["held back"])
    assert h.task.barriers.blocked == {0} and h.ports.acks == []
    h.deliver(1, ["b"], h.barrier(7))
    assert [a[0] for a in h.ports.acks] == [7]
    h.notify_complete(7)
    assert sorted(read_committed(out)) == ["a", "b"], "the held-back record belongs to the next checkpoint"


def test_a_newer_barrier_declines_the_pending_checkpoint(tmp_path):
    h, _ = _sink_task(tmp_path, channels=2)
    h.deliver(0, h.barrier(1))
    h.deliver(1, h.barrier(2))
    assert [(cid, reason.name) for cid, reason, _ in h.ports.declines] == [(1, "DECLINED_SUBSUMED")]

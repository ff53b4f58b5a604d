"""FileSink's two-phase commit, driven through the sink operator by hand."""

from __future__ import annotations

import os

import pytest

from connectors.files import FileSink, read_committed
from runtime import InvalidConfigurationError, StreamExecutionEnvironment
from runtime.state import OperatorSnapshot
from runtime.testing import OperatorHarness


def _sink_op(path: str, fmt: str, attempt: str, restored: OperatorSnapshot | None = None) -> OperatorHarness:
    return OperatorHarness.sink(FileSink(path, format=fmt), attempt_id=attempt, restore=None if restored is None else [restored])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_nothing_is_visible_before_the_checkpoint_completes(tmp_path, fmt):
    path = str(tmp_path / "out")
    op = _sink_op(path, fmt, "a1")
    op.process({"k": 1, "v": 2}, {"k": 3, "v": 4})
    assert read_committed(path) == []
    op.snapshot(1)
    assert read_committed(path) == []
    assert any(n.endswith(".pending") for n in os.listdir(path))
    op.notify_complete(1)
    assert read_committed(path) == [{"k": 1, "v": 2}, {"k": 3, "v": 4}]


def test_restore_commits_what_was_pending_and_cleans_up_leftovers(tmp_path):
    path = str(tmp_path / "out")
    op = _sink_op(path, "jsonl", "a1")
    op.process([1, 1])
    snap = op.snapshot(1)          # pending, but the notification never comes
    op.process([2, 2])           # in progress when the task dies
    op.snapshot(2)                 # pending of a checkpoint that never completes
    op.process([3, 3])
    # A new attempt restores checkpoint 1.
    new = _sink_op(path, "jsonl", "b2", snap)
    assert read_committed(path) == [[1, 1]]
    new.process([2, 2])
    new.snapshot(3)
    new.notify_complete(3)
    assert sorted(read_committed(path)) == [[1, 1], [2, 2]]
    hidden = [n for n in os.listdir(path) if n.startswith(".")]
    assert hidden == [], "leftovers of attempt a1 must be removed after the first completed checkpoint"


def test_a_subtask_cleans_only_its_own_leftovers_and_those_of_removed_subtasks(tmp_path):
    """After region failover subtasks run different attempts: a restarted subtask
    must not delete a live one's unpublished files."""
    path = str(tmp_path / "out")
    live = OperatorHarness.sink(FileSink(path), attempt_id="a1", subtask=1, parallelism=2)
    live.process([1, 1])
    live.snapshot(1)                                    # pending, committed at checkpoint 1
    live.process([2, 2])                                # in progress
    gone = OperatorHarness.sink(FileSink(path), attempt_id="a0", subtask=3, parallelism=4)
    gone.process([9, 9])                                # a subtask a rescale to 2 removed
    old = OperatorHarness.sink(FileSink(path), attempt_id="a0", subtask=0, parallelism=2)
    old.process([0, 0])                                 # subtask 0's attempt that died
    restarted = OperatorHarness.sink(FileSink(path), attempt_id="b2", subtask=0, parallelism=2)
    restarted.snapshot(1)
    restarted.notify_complete(1)
    hidden = sorted(n for n in os.listdir(path) if n.startswith("."))
    assert [n.split("-")[1:3] for n in hidden] == [["a1", "1"], ["a1", "1"]]
    live.notify_complete(1)
    live.snapshot(2)
    live.notify_complete(2)
    assert sorted(read_committed(path)) == [[1, 1], [2, 2]]


def test_commit_is_idempotent(tmp_path):
    path = str(tmp_path / "out")
    op = _sink_op(path, "jsonl", "a1")
    op.process([1, 1])
    snap = op.snapshot(1)
    op.notify_complete(1)
    _sink_op(path, "jsonl", "b2", snap)
    assert read_committed(path) == [[1, 1]]


def test_unknown_format_is_refused():
    with pytest.raises(InvalidConfigurationError, match="FileSink format='csv'"):
        FileSink("/tmp/x", format="csv")


def test_two_file_sinks_of_a_job_on_one_folder_are_refused_naming_it(tmp_path):
    """Issue #13 item 6: they picked the same part-file names; one committed file
    held both sinks' rows and the job failed."""
    from runtime import InvalidJobGraphError

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_collection([1, 2, 3])
    numbers.sink_to(FileSink(str(tmp_path / "out")))
    numbers.map(lambda x: -x).sink_to(FileSink(str(tmp_path / "other")))  # another folder: fine
    with pytest.raises(InvalidJobGraphError, match=rf"two sinks of this job write to {tmp_path}/out \(Sink: FileSink and another FileSink\)"):
        numbers.map(lambda x: x * 2).sink_to(FileSink(str(tmp_path / "out") + "/"))

"""A restore reads only the state files it needs: an operator with keyed state
only skips the files of old subtasks whose key groups are all another subtask's
now (at parallelism p each subtask used to read all p files), while list state,
which every subtask's share is cut from, still reads them all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from weir.runtime.errors import CorruptCheckpointError
from weir.runtime.incremental import KeyedSnapshot
from weir.runtime.keygroups import KeyGroupRange, key_group_for
from weir.runtime.state import OperatorSnapshot
from weir.runtime.storage import StateHandle, pickle_state, write_state
from weir.runtime.task import OperatorRestore, _read_restored_state

MAX_P = 128


def _files(tmp_path, lists: bool) -> list[StateHandle]:
    """Subtask 0's file of a checkpoint at parallelism 2, with the keys it owned
    (and a list state entry), and subtask 1's file, which is gone."""
    keys = [k for k in range(100) if key_group_for(k, MAX_P) in KeyGroupRange.for_subtask(MAX_P, 2, 0)]
    snap = OperatorSnapshot(KeyedSnapshot({"sums": {k: k * 10 for k in keys}}), lists={"offsets": [7]} if lists else {})
    first = write_state(f"file://{tmp_path}", "reduce-0", pickle_state({"sums": snap}, "reduce/0"))
    return [first, StateHandle(f"file://{tmp_path}/reduce-1.state", "0" * 64, 10)]


def _restore(handles, subtask: int, keyed_only: bool):
    d = SimpleNamespace(
        restore={"sums": OperatorRestore(handles, keyed_only=keyed_only)},
        subtask=subtask,
        vertex=SimpleNamespace(parallelism=2, max_parallelism=MAX_P),
    )
    return _read_restored_state(d)["sums"]  # type: ignore[arg-type]


def test_keyed_state_only_reads_the_files_of_its_own_key_groups(tmp_path):
    restored = _restore(_files(tmp_path, lists=False), 0, keyed_only=True)  # subtask 1's file is never opened
    ((held, keyed),) = restored.keyed
    assert held == KeyGroupRange.for_subtask(MAX_P, 2, 0) and len(keyed.tables["sums"]) > 10


def test_operator_state_reads_every_subtasks_file(tmp_path):
    with pytest.raises(CorruptCheckpointError, match="reduce-1.state"):
        _restore(_files(tmp_path, lists=True), 0, keyed_only=False)


def test_a_snapshot_says_whether_it_holds_state_that_every_subtask_reads():
    keyed = OperatorSnapshot(KeyedSnapshot({"sums": {1: 10}}))
    assert keyed.summary().has_operator_state is False
    for other in ({"lists": {"offsets": [7]}}, {"union_lists": {"u": [1]}}, {"broadcast": {"rules": {"a": 1}}}):
        assert OperatorSnapshot(keyed.keyed, **other).summary().has_operator_state is True

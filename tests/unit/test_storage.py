from __future__ import annotations

import pickle

import pytest

from runtime import CorruptCheckpointError
from runtime.storage import CheckpointStorage


@pytest.fixture
def storage(tmp_path):
    return CheckpointStorage("file://" + str(tmp_path), "job")


def test_state_round_trip_and_metadata_marks_completion(storage):
    h = storage.write_task_state(3, "map-0", pickle.dumps({"op": [1, 2]}))
    assert storage.completed_checkpoint_ids() == []
    storage.write_metadata(3, {"checkpoint_id": 3})
    assert storage.completed_checkpoint_ids() == [3]
    assert storage.read_task_state(h) == {"op": [1, 2]}
    assert storage.read_metadata(3) == {"checkpoint_id": 3}


def test_a_flipped_byte_is_caught_by_the_checksum_and_names_the_file(storage):
    h = storage.write_task_state(1, "map-0", pickle.dumps(list(range(100))))
    data = bytearray(open(h.path, "rb").read())
    data[-5] ^= 0x01
    open(h.path, "wb").write(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="map-0.state is unusable: checksum mismatch"):
        storage.read_task_state(h)


def test_truncated_and_missing_files_are_typed_errors(storage):
    h = storage.write_task_state(1, "map-0", pickle.dumps("x"))
    open(h.path, "wb").write(b"WEIR")
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        storage.read_task_state(h)
    storage.discard(1)
    with pytest.raises(CorruptCheckpointError, match="cannot be read"):
        storage.read_task_state(h)

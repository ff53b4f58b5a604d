from __future__ import annotations

import pickle

import pytest

from weir import CorruptCheckpointError
from weir.runtime.storage import CheckpointStorage, discard, read_metadata, read_state, write_metadata, write_state


@pytest.fixture
def storage(tmp_path):
    return CheckpointStorage("file://" + str(tmp_path), "job")


def _local(uri: str) -> str:
    return uri[len("file://") :]


def test_state_round_trip_and_metadata_marks_completion(storage):
    loc = storage.location(3)
    h = write_state(loc, "map-0", pickle.dumps({"op": [1, 2]}))
    assert h.uri.startswith("file://") and h.uri.endswith("/job/chk-3/map-0.state")
    assert storage.checkpoint_ids() == []
    op = {"vertex": "map", "parallelism": 1, "max_parallelism": 128, "fully_finished": False}
    metadata = {
        "checkpoint_id": 3,
        "operators": {"m": {**op, "handles": [{"uri": h.uri, "sha256": h.sha256, "size": h.size}]}},
    }
    write_metadata(loc, metadata)
    assert storage.checkpoint_ids() == [3]
    assert read_state(h) == {"op": [1, 2]}
    assert read_metadata(loc) == metadata
    # Inside the folder, handles are stored relative to it (a savepoint can move).
    assert '"uri": "map-0.state"' in open(_local(loc + "/_metadata")).read()


def test_a_flipped_byte_is_caught_by_the_checksum_and_names_the_file(storage):
    h = write_state(storage.location(1), "map-0", pickle.dumps(list(range(100))))
    data = bytearray(open(_local(h.uri), "rb").read())
    data[-5] ^= 0x01
    open(_local(h.uri), "wb").write(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="map-0.state is unusable: checksum mismatch"):
        read_state(h)


def test_truncated_and_missing_files_are_typed_errors(storage):
    h = write_state(storage.location(1), "map-0", pickle.dumps("x"))
    open(_local(h.uri), "wb").write(b"WEIR")
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        read_state(h)
    discard(storage.location(1))
    with pytest.raises(CorruptCheckpointError, match="cannot be read"):
        read_state(h)
    with pytest.raises(CorruptCheckpointError, match="_metadata is unusable: missing"):
        read_metadata(storage.location(1))

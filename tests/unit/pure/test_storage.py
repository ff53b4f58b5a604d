"""State files and metadata on checkpoint storage, on a local disk and on S3
(moto's server, over HTTP, with the endpoint in the URI's query options)."""

from __future__ import annotations

import pickle

import pytest
from pyarrow import fs as pafs

from weir import CorruptCheckpointError
from weir.runtime.storage import (
    CheckpointStorage,
    discard,
    join,
    read_metadata,
    read_state,
    write_metadata,
    write_state,
)


@pytest.fixture(params=["file", "s3"])
def storage(request, tmp_path):
    root = "file://" + str(tmp_path) if request.param == "file" else request.getfixturevalue("s3_server").uri()
    return CheckpointStorage(root, "job")


def _read(uri: str) -> bytes:
    fs, path = pafs.FileSystem.from_uri(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def _write(uri: str, data: bytes) -> None:
    fs, path = pafs.FileSystem.from_uri(uri)
    with fs.open_output_stream(path) as f:
        f.write(data)


def test_state_round_trip_and_metadata_marks_completion(storage):
    loc = storage.location(3)
    h = write_state(loc, "map-0", pickle.dumps({"op": [1, 2]}))
    assert h.uri.split("?")[0].endswith("/job/chk-3/map-0.state")
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
    # Inside the folder, handles are stored relative to it (a savepoint can move),
    # without the URI's query: the folder's own URI gives it back.
    assert b'"uri": "map-0.state"' in _read(join(loc, "_metadata"))


def test_a_uris_query_options_stay_at_its_end_on_every_folder_weir_adds(s3_server):
    """Before, the job's folders went after the query (...&region=us-east-1/<job>/<run>)."""
    root = s3_server.uri("checkpoints")
    storage = CheckpointStorage(root, "job", "run")
    path, query = root.split("?")
    assert storage.location(7) == f"{path}/job/run/chk-7?{query}"
    write_metadata(storage.location(7), {"checkpoint_id": 7, "operators": {}})
    assert storage.checkpoint_ids() == [7]


def test_a_flipped_byte_is_caught_by_the_checksum_and_names_the_file(storage):
    h = write_state(storage.location(1), "map-0", pickle.dumps(list(range(100))))
    data = bytearray(_read(h.uri))
    data[-5] ^= 0x01
    _write(h.uri, bytes(data))
    with pytest.raises(CorruptCheckpointError, match="map-0.state.* is unusable: checksum mismatch"):
        read_state(h)


def test_truncated_and_missing_files_are_typed_errors(storage):
    h = write_state(storage.location(1), "map-0", pickle.dumps("x"))
    _write(h.uri, b"WEIR")
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        read_state(h)
    discard(storage.location(1))
    with pytest.raises(CorruptCheckpointError, match="cannot be read"):
        read_state(h)
    with pytest.raises(CorruptCheckpointError, match="_metadata.* is unusable: missing"):
        read_metadata(storage.location(1))

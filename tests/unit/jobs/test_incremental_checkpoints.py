"""Incremental checkpoints in a running job: later checkpoints write only what
changed and name the files they build on; the run's shared folder keeps exactly
the files its retained checkpoints name; a new job restores exactly from a
retained checkpoint's chain."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.checker import check_running_sums, shared_folder_problems
from weir import (
    InvalidConfigurationError,
    JobStatus,
    StreamExecutionEnvironment,
    read_keyed_state,
    read_keyed_state_dict,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.shared_state import metadata_files

N = 30_000
KEYS = 20_000


def keyed_sum_job(checkpoint_dir, out_dir, restore=None, rate=20_000, backend=None, n=N, keys=KEYS):
    """A keyed running sum into a FileSink, checkpointed every 50 ms with two retained
    (``backend``: where its keyed state lives, the heap unless given)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    if backend is not None:
        env.set_state_backend(backend)
    env.enable_checkpointing(50)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(checkpoint_dir)
    config.set_num_retained_checkpoints(2)
    if restore:
        env.restore_from_savepoint(restore)
    (
        env.from_generator(lambda i: (i % keys, i), count=n, records_per_second=rate)
        .uid("gen")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .uid("sums")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def _metadata(folder: pathlib.Path) -> dict:
    data = json.loads((folder / "_metadata").read_text())
    for op in data["operators"].values():  # relative handles, as read_metadata makes them whole
        for h in op["handles"]:
            if h is not None and "://" not in h["uri"]:
                h["uri"] = f"file://{folder}/{h['uri']}"
    return data


def test_checkpoints_write_what_changed_keep_what_they_name_and_restore_exactly(checkpoint_dir, out_dir):
    client = keyed_sum_job(checkpoint_dir, out_dir).execute_async("incremental", executor="local")
    client.wait_until(lambda c: sum(s["status"] == "COMPLETED" for s in c.checkpoints()) >= 6, 120)
    client.cancel()
    completed = [s for s in client.checkpoints() if s["status"] == "COMPLETED"]
    assert any(s["size_bytes"] < s["full_size_bytes"] for s in completed), completed

    (shared,) = pathlib.Path(checkpoint_dir.removeprefix("file://")).glob("**/shared")
    kept = sorted(shared.parent.glob("chk-*"), key=lambda p: int(p.name[4:]))
    assert len(kept) == 2, kept
    named = set().union(*(metadata_files(_metadata(folder)) for folder in kept))
    assert shared_folder_problems(shared, named, int(kept[-1].name[4:])) == []
    latest = _metadata(kept[-1])
    # The source's split positions are list state, cut among subtasks: a restore reads
    # every file for them. The running sums are keyed only: a subtask reads its own.
    assert (latest["operators"]["gen"]["operator_state"], latest["operators"]["sums"]["operator_state"]) == (
        True,
        False,
    )
    assert any(h.get("base") for op in latest["operators"].values() for h in op["handles"] if h), (
        "the latest retained checkpoint builds on earlier files"
    )

    resumed = keyed_sum_job(checkpoint_dir, out_dir, restore=str(kept[-1]), rate=None).execute(
        "resumed", executor="local"
    )
    assert resumed.status is JobStatus.FINISHED
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % KEYS, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v

    # The finished job's last checkpoint holds every key's total: read it as a notebook would.
    (final,) = sorted(
        pathlib.Path(checkpoint_dir.removeprefix("file://")).glob("resumed/*/chk-*"), key=lambda p: int(p.name[4:])
    )[-1:]
    table = read_keyed_state(str(final), "sums")
    totals = dict(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))
    assert totals == {k: [k, sum(range(k, N, KEYS))] for k in range(KEYS)}
    assert read_keyed_state_dict(str(final), "sums") == {k: (k, sum(range(k, N, KEYS))) for k in range(KEYS)}


def test_reading_state_names_what_is_there(checkpoint_dir, out_dir):
    result = keyed_sum_job(checkpoint_dir, out_dir, rate=None).execute("names", executor="local")
    assert result.status is JobStatus.FINISHED
    (final,) = sorted(pathlib.Path(checkpoint_dir.removeprefix("file://")).glob("names/*/chk-*"))[-1:]
    with pytest.raises(InvalidConfigurationError, match="is not one uid or name .* gen: .*sums: "):
        read_keyed_state(str(final), "nope")
    with pytest.raises(InvalidConfigurationError, match=r"name one of \['_reduce'\] with state="):
        read_keyed_state(str(final), "sums", state="count")
    with pytest.raises(InvalidConfigurationError, match="this operator holds no keyed state there"):
        read_keyed_state(str(final), "gen")

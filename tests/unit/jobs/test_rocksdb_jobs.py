"""Jobs on the RocksDB state backend: a keyed running sum is exact through a
restore from a retained checkpoint; the run's shared folder holds exactly the
files (state files and SSTs) its retained checkpoints name; a job on the heap
restores what a RocksDB job checkpointed, and the reverse; a local disk that
runs full fails the job naming the RocksDB folder after a few restarts, instead
of restarting it for ever; docs/state.md's RocksDB examples run."""

from __future__ import annotations

import errno
import os
import pathlib
import re
import threading

import pytest

from tests.checker import check_running_sums, shared_folder_problems
from tests.unit.jobs.test_incremental_checkpoints import _metadata, keyed_sum_job
from weir import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    JobStatus,
    read_keyed_state_dict,
)
from weir.connectors.files import read_committed
from weir.runtime.errors import JobExecutionError, LocalDiskFullError
from weir.runtime.failover import LOCAL_DISK_FULL_RESTARTS
from weir.runtime.rocksdb_backend import Changes
from weir.runtime.shared_state import metadata_files

ROOT = pathlib.Path(__file__).resolve().parents[3]
N = 12_000
KEYS = 3_000


def _job(backend, checkpoint_dir, out_dir, restore=None, rate=12_000):
    return keyed_sum_job(checkpoint_dir, out_dir, restore, rate, backend, n=N, keys=KEYS)


def rocks() -> EmbeddedRocksDBStateBackend:
    return EmbeddedRocksDBStateBackend().set_write_back_cache_entries(100)  # small: writes back often


def _retained(checkpoint_dir: str, job: str) -> list[pathlib.Path]:
    root = pathlib.Path(checkpoint_dir.removeprefix("file://"))
    return sorted(root.glob(f"{job}/*/chk-*"), key=lambda p: int(p.name[4:]))


def _exact(out_dir) -> None:
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % KEYS, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v


def test_a_running_sum_on_rocksdb_is_exact_through_a_restore_from_a_retained_checkpoint(checkpoint_dir, out_dir):
    client = _job(rocks(), checkpoint_dir, out_dir).execute_async("rocks", executor="local")
    client.wait_until(lambda c: sum(s["status"] == "COMPLETED" for s in c.checkpoints()) >= 4, 120)
    client.cancel()
    completed = [s for s in client.checkpoints() if s["status"] == "COMPLETED"]
    # A checkpoint counts the SSTs it uploads, and names the ones it took from its base.
    assert any(0 < s["size_bytes"] < s["full_size_bytes"] for s in completed), completed

    kept = _retained(checkpoint_dir, "rocks")
    assert len(kept) == 2, kept
    (shared,) = {folder.parent / "shared" for folder in kept}
    named = set().union(*(metadata_files(_metadata(folder)) for folder in kept))
    assert any(uri.endswith(".sst") for uri in named)
    assert shared_folder_problems(shared, named, int(kept[-1].name[4:])) == []

    resumed = _job(rocks(), checkpoint_dir, out_dir, restore=str(kept[-1]), rate=None).execute(
        "resumed", executor="local"
    )
    assert resumed.status is JobStatus.FINISHED
    _exact(out_dir)
    final = _retained(checkpoint_dir, "resumed")[-1]  # a RocksDB checkpoint, read as a notebook would
    assert read_keyed_state_dict(str(final), "sums") == {k: (k, sum(range(k, N, KEYS))) for k in range(KEYS)}


def test_a_heap_job_restores_a_rocksdb_checkpoint_and_a_rocksdb_job_a_heap_one(checkpoint_dir, tmp_path):
    for first, then in ((rocks(), HashMapStateBackend()), (HashMapStateBackend(), rocks())):
        out_dir = str(tmp_path / f"{type(first).__name__}-out")
        name = f"from-{type(first).__name__}"
        client = _job(first, checkpoint_dir, out_dir).execute_async(name, executor="local")
        client.wait_until(lambda c: sum(s["status"] == "COMPLETED" for s in c.checkpoints()) >= 2, 120)
        client.cancel()
        latest = _retained(checkpoint_dir, name)[-1]
        resumed = _job(then, checkpoint_dir, out_dir, restore=str(latest), rate=None).execute(
            name + "-2", executor="local"
        )
        assert resumed.status is JobStatus.FINISHED
        _exact(out_dir)


def test_a_full_local_disk_fails_the_job_naming_the_rocksdb_folder_instead_of_restarting_for_ever(
    checkpoint_dir, out_dir, tmp_path, monkeypatch
):
    full = threading.Event()  # from now on the local disk has no room left
    real = Changes.write

    def write(changes, db):
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        real(changes, db)

    monkeypatch.setattr(Changes, "write", write)
    rocks_dir = tmp_path / "rocks"
    backend = rocks()
    backend.set_db_storage_path(str(rocks_dir))
    client = _job(backend, checkpoint_dir, out_dir).execute_async("disk-full", executor="local")
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" for s in c.checkpoints()), 120)
    full.set()
    with pytest.raises(JobExecutionError) as failed:
        client.wait(60)  # before: restarted for ever, each attempt failing on the first write
    cause = failed.value.__cause__
    assert isinstance(cause, LocalDiskFullError)
    assert os.path.dirname(cause.folder) == str(rocks_dir) and cause.operator == "Reduce"
    assert str(failed.value) == (
        f"job 'disk-full' failed after {LOCAL_DISK_FULL_RESTARTS} restart(s) (restart strategy allows unlimited "
        f"restarts): local disk full: operator 'Reduce' cannot write its RocksDB state in {cause.folder} ([Errno 28] "
        "No space left on device); free space on that disk or point EmbeddedRocksDBStateBackend.set_db_storage_paths "
        "at a larger one (a job that keeps finding it full fails rather than restarting for ever)"
    )
    assert client.restarts() == LOCAL_DISK_FULL_RESTARTS
    assert os.listdir(rocks_dir) == []  # every attempt's folder deleted as its task closed


def test_the_rocksdb_examples_in_docs_state_md_run(tmp_path, monkeypatch):
    page = (ROOT / "docs" / "state.md").read_text()
    section = page[page.index("## The RocksDB backend") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/state.md RocksDB block {i + 1}", "exec"), namespace)

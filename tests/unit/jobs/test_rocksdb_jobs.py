"""Jobs on the RocksDB state backend: a keyed running sum is exact through a
restore from a retained checkpoint; the run's shared folder holds exactly the
files (state files and SSTs) its retained checkpoints name; a job on the heap
restores what a RocksDB job checkpointed, and the reverse; docs/state.md's
RocksDB examples run."""

from __future__ import annotations

import pathlib
import re

from tests.checker import check_running_sums, shared_folder_problems
from tests.unit.jobs.test_incremental_checkpoints import _metadata, keyed_sum_job
from weir import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    JobStatus,
    read_keyed_state_dict,
)
from weir.connectors.files import read_committed
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


def test_the_rocksdb_examples_in_docs_state_md_run(tmp_path, monkeypatch):
    page = (ROOT / "docs" / "state.md").read_text()
    section = page[page.index("## The RocksDB backend") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/state.md RocksDB block {i + 1}", "exec"), namespace)

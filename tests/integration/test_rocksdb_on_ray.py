"""A RocksDB job on Ray whose keyed tasks are killed (SIGKILL of the worker
process or ``ray.kill``): a killed process deletes nothing, so before, each kill
left its whole ``weir-rocksdb-*`` folder (hard links to checkpoint files) on the
node's disk. Now the next backend made in that folder's parent, or one closing
there, sweeps it: once the job ended, no folder is left, and the output is exact."""

from __future__ import annotations

import functools
import os

import pytest

from tests.chaos import keyed_sum_with_kills, kill_random_task
from weir import EmbeddedRocksDBStateBackend

pytestmark = pytest.mark.ray

KILLS = 3


def test_killed_rocksdb_tasks_leave_no_folder_behind_and_the_output_is_exact(ray_cluster, tmp_path):
    rocks_dir = tmp_path / "rocksdb"  # this test's folders only
    backend = EmbeddedRocksDBStateBackend()
    backend.set_db_storage_path(str(rocks_dir))
    run = keyed_sum_with_kills(
        77,
        str(tmp_path / "out"),
        "file://" + str(tmp_path / "chk"),
        records=20_000 * 3 * KILLS,
        kills=KILLS,
        pause_s=(0.5, 1.0),
        rate=20_000,
        victim=functools.partial(kill_random_task, vertex="reduce"),  # the keyed tasks, with RocksDB
        state_backend=backend,
        unpace_gate=str(tmp_path / "kills-done"),  # then the rest at full speed
    )
    assert len(run.killed) == KILLS, f"the job ended after {len(run.killed)} kills"
    assert (run.verdict.lost, run.verdict.duplicated, run.verdict.keys_wrong) == (0, 0, 0), run.verdict
    assert os.listdir(rocks_dir) == []  # before: one weir-rocksdb-* folder per killed task

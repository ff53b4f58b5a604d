"""The sweep of local folders: a folder whose owner process died goes, a live
owner's stays (in this process or another), and what weir did not write stays
(no owner file, or a name without weir's prefix). A RocksDB backend sweeps its
parent before it makes its own folder, so a killed task's folder is gone once
the next one starts there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.unit.pure.test_incremental import MAX_P
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.local_folders import OWNER_FILE, ROCKSDB_PREFIX, OwnedFolder, sweep
from weir.runtime.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBSettings

# Makes an owned folder, says where, then waits for a line on stdin (or dies, when killed).
_OWNER = """
import sys
from weir.runtime.local_folders import OwnedFolder
folder = OwnedFolder(sys.argv[1], sys.argv[2])
print(folder.path, flush=True)
sys.stdin.readline()
"""


def _owner_process(parent, prefix: str = ROCKSDB_PREFIX) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(parent), prefix], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    path = proc.stdout.readline().strip()
    assert os.path.isfile(os.path.join(path, OWNER_FILE)), path
    return proc, path


def _dead_owner(parent, prefix: str = ROCKSDB_PREFIX) -> str:
    """A folder whose owner process ended without deleting it (as a killed one does)."""
    proc, path = _owner_process(parent, prefix)
    proc.stdin.close()  # its readline returns: the process exits, its folder stays
    assert proc.wait(30) == 0
    return path


def test_the_folder_of_a_dead_owner_goes_a_live_owners_stays(tmp_path):
    dead = _dead_owner(tmp_path)
    with open(os.path.join(dead, "000012.sst"), "wb") as f:
        f.write(b"x" * 4096)
    mine = OwnedFolder(str(tmp_path), ROCKSDB_PREFIX)
    assert sweep(str(tmp_path)) == [dead]
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(mine.path)]
    mine.remove()
    assert os.listdir(tmp_path) == []


def test_another_live_processs_folder_stays_until_that_process_is_killed(tmp_path):
    proc, path = _owner_process(tmp_path)
    try:
        assert sweep(str(tmp_path)) == [] and os.path.isdir(path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert sweep(str(tmp_path)) == [path]
    assert not os.path.exists(path)


def test_what_weir_did_not_write_stays(tmp_path):
    no_owner_file = tmp_path / f"{ROCKSDB_PREFIX}of-an-older-weir"
    no_owner_file.mkdir()
    (no_owner_file / "CURRENT").write_text("MANIFEST-000001\n")
    a_file = tmp_path / f"{ROCKSDB_PREFIX}a-file"
    a_file.write_text("not a folder")
    another_prefix = _dead_owner(tmp_path, "someone-elses-")
    assert sweep(str(tmp_path)) == []
    assert sorted(os.listdir(tmp_path)) == sorted([no_owner_file.name, a_file.name, os.path.basename(another_prefix)])


def test_a_parent_that_does_not_exist_is_nothing_to_sweep(tmp_path):
    assert sweep(str(tmp_path / "not-yet")) == []


def test_a_rocksdb_backend_sweeps_its_parent_of_dead_owners_when_it_makes_its_folder_and_when_it_closes(tmp_path):
    killed = _dead_owner(tmp_path, f"{ROCKSDB_PREFIX}job-sum-0-")
    backend = RocksDBKeyedStateBackend(
        MAX_P, KeyGroupRange(0, MAX_P), RocksDBSettings(storage_paths=(str(tmp_path),)), "job-sum-0", "op", "op"
    )
    try:
        assert not os.path.exists(killed)
        assert os.listdir(tmp_path) == [os.path.basename(backend.folder)]
        assert OWNER_FILE in os.listdir(backend.folder)
        assert sweep(str(tmp_path)) == []  # its own folder: a live owner's
        killed_meanwhile = _dead_owner(tmp_path, f"{ROCKSDB_PREFIX}job-sum-1-")
    finally:
        backend.close()
    assert not os.path.exists(killed_meanwhile)
    assert os.listdir(tmp_path) == []

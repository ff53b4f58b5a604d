"""Checkpoints are a trust boundary (a restore unpickles them): on every node,
not only the driver's, the folders checkpoint storage creates are 0700 and its
files 0600, and the default storage's private folder (``<temp>/weir-<uid>``) is
checked to be this user's whenever storage reaches it (issue row 18: a task on
another node created it with the umask, 0755, and wrote its state 0644)."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from weir.runtime.errors import CheckpointStorageError, CorruptCheckpointError
from weir.runtime.storage import (
    CheckpointStorage,
    download_file,
    prepare_location,
    read_metadata,
    upload_file,
    write_metadata,
    write_state,
)


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_task_on_a_node_without_the_default_folder_creates_it_and_everything_below_private(tmp_path):
    """The driver made ``weir-<uid>`` 0700 on its own node only; a task elsewhere
    creates it on its first write, and must do the same."""
    private = tmp_path / f"weir-{os.getuid()}"
    storage = CheckpointStorage(f"file://{private}/checkpoints", "job", "run")
    handle = write_state(storage.location(1), "map-0", b"state")
    created = [
        private,
        private / "checkpoints",
        private / "checkpoints" / "job",
        private / "checkpoints" / "job" / "run",
        private / "checkpoints" / "job" / "run" / "chk-1",
    ]
    assert {str(p): oct(_mode(p)) for p in created} == {str(p): "0o700" for p in created}
    assert oct(_mode(handle.uri[len("file://") :])) == "0o600"


def test_a_chosen_storage_gets_private_folders_and_files_too(tmp_path):
    os.chmod(tmp_path, 0o755)
    storage = CheckpointStorage(f"file://{tmp_path}/store", "job", "run")
    storage.mark_started()
    write_metadata(storage.location(2), {"checkpoint_id": 2, "operators": {}})
    savepoint = prepare_location(str(tmp_path / "savepoints"))
    for folder in ("store", "store/job", "store/job/run", "store/job/run/chk-2", "savepoints"):
        assert oct(_mode(tmp_path / folder)) == "0o700", folder
    for name in ("store/job/run/_job", "store/job/run/chk-2/_metadata"):
        assert oct(_mode(tmp_path / name)) == "0o600", name
    assert savepoint == f"file://{tmp_path}/savepoints"
    assert _mode(tmp_path) == 0o755  # a folder weir did not create is left as it was


def test_a_default_folder_of_another_user_is_refused_when_written_or_read(tmp_path, monkeypatch):
    private = tmp_path / "weir-4242"
    private.mkdir(mode=0o777)  # as someone sharing the temp folder would have planted it
    os.chmod(private, 0o777)
    owner = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)  # we are someone else than its owner
    location = f"file://{private}/checkpoints/job/run/chk-1"
    expected = (
        f"checkpoint storage {private} is not a folder of this user's (owner uid {owner}, this user {owner + 1}): someone "
        "sharing the temp folder could read or plant checkpoints there; choose a folder of yours with set_checkpoint_storage()"
    )
    with pytest.raises(CheckpointStorageError) as written:
        write_state(location, "map-0", b"state")
    assert str(written.value) == expected and written.value.location == str(private)
    with pytest.raises(CheckpointStorageError) as read:
        read_metadata(location)
    assert str(read.value) == expected
    assert list(private.iterdir()) == [] and _mode(private) == 0o777  # nothing written, nothing changed


def test_a_default_folder_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"weir-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(CheckpointStorageError, match=r"weir-\d+ is a symbolic link, not a folder of this user's"):
        write_state(f"file://{tmp_path}/weir-{os.getuid()}/checkpoints/job/chk-1", "map-0", b"state")
    assert list(elsewhere.iterdir()) == []


def test_a_default_folder_of_this_user_with_wider_permissions_is_narrowed(tmp_path):
    private = tmp_path / f"weir-{os.getuid()}"
    private.mkdir()
    os.chmod(private, 0o755)
    write_state(f"file://{private}/checkpoints/job/chk-1", "map-0", b"state")
    assert _mode(private) == 0o700


@pytest.mark.parametrize("links", [True, False])
def test_an_uploaded_file_is_private_and_checksummed_linked_or_copied(tmp_path, monkeypatch, links):
    local = tmp_path / "000012.sst"
    local.write_bytes(b"an sst")
    os.chmod(local, 0o644)
    if not links:  # storage on another file system: os.link fails with EXDEV
        monkeypatch.setattr(os, "link", lambda *_: (_ for _ in ()).throw(OSError(18, "Invalid cross-device link")))
    handle = upload_file(str(local), f"file://{tmp_path}/store/shared/000012.sst")
    stored = tmp_path / "store" / "shared" / "000012.sst"
    assert oct(_mode(stored)) == "0o600" and oct(_mode(tmp_path / "store" / "shared")) == "0o700"
    assert os.path.samefile(local, stored) is links  # a link writes nothing
    assert (handle.size, handle.sha256) == (6, hashlib.sha256(b"an sst").hexdigest())
    download_file(handle, str(tmp_path / "restored.sst"))
    assert (tmp_path / "restored.sst").read_bytes() == b"an sst"
    assert os.path.samefile(stored, tmp_path / "restored.sst") is links  # a restore copies nothing either


@pytest.mark.parametrize("links", [True, False])
def test_a_download_of_a_changed_file_is_refused_and_leaves_nothing(tmp_path, monkeypatch, links):
    local = tmp_path / "000012.sst"
    local.write_bytes(b"an sst")
    handle = upload_file(str(local), f"file://{tmp_path}/store/shared/000012.sst")
    stored = tmp_path / "store" / "shared" / "000012.sst"
    os.remove(local)  # as RocksDB deletes its name for a compacted file
    stored.write_bytes(b"an sSt")  # rewritten in place: the same size, other bytes
    if not links:
        monkeypatch.setattr(os, "link", lambda *_: (_ for _ in ()).throw(OSError(18, "Invalid cross-device link")))
    with pytest.raises(CorruptCheckpointError, match=r"000012\.sst.*checksum mismatch"):
        download_file(handle, str(tmp_path / "restored.sst"))
    assert not (tmp_path / "restored.sst").exists()

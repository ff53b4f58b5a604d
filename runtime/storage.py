"""Checkpoint storage on any ``pyarrow.fs`` file system.

A checkpoint lives in ``<storage>/<job>/chk-<N>/``, a savepoint in the folder
the user names; both hold::

    <vertex>-<subtask>.state    one file per task: checksummed, pickled state
    _metadata                   JSON, written last and atomically (write, then rename)

A checkpoint or savepoint exists only once its ``_metadata`` exists; state
handles in it are full URIs, so a savepoint can be moved to another job. State files start with a
magic tag and the SHA-256 of their payload, checked before anything is
unpickled. The storage is a trust boundary: whoever can write it can make a
restore run code, as with any pickle.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from pyarrow import fs as pafs

from runtime.config import validate_storage_uri
from runtime.errors import CorruptCheckpointError, InvalidConfigurationError, StateSerializationError
from runtime.serialization import dumps, loads

_MAGIC = b"WEIR-STATE-1\n"
_CHK = re.compile(r"^chk-(\d+)$")
METADATA = "_metadata"


@dataclass(frozen=True)
class StateHandle:
    uri: str
    sha256: str
    size: int


def _resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri)


def join(location: str, name: str) -> str:
    return location.rstrip("/") + "/" + name


def _atomic_write(uri: str, data: bytes) -> None:
    fs, path = _resolve(uri)
    fs.create_dir(posixpath.dirname(path), recursive=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def prepare_location(location: str) -> str:
    """Check that a checkpoint or savepoint can be written at ``location``; return
    it as a URI. Raises :class:`InvalidConfigurationError` naming it otherwise."""
    uri = validate_storage_uri(location, "savepoint path")
    try:
        fs, path = _resolve(uri)
        fs.create_dir(path, recursive=True)
    except OSError as exc:
        raise InvalidConfigurationError("savepoint path", location, f"cannot be written ({exc})") from None
    return uri


def write_state(location: str, name: str, payload: bytes) -> StateHandle:
    """Write state already pickled by :func:`pickle_state` into ``location``."""
    digest = hashlib.sha256(payload).hexdigest()
    uri = join(location, f"{_safe(name)}.state")
    _atomic_write(uri, _MAGIC + digest.encode() + b"\n" + payload)
    return StateHandle(uri, digest, len(payload))


def read_state(handle: StateHandle) -> Any:
    try:
        fs, path = _resolve(handle.uri)
        with fs.open_input_stream(path) as f:
            data = f.read()
    except (FileNotFoundError, OSError) as exc:
        raise CorruptCheckpointError(handle.uri, f"cannot be read ({exc})") from None
    header_len = len(_MAGIC) + 65
    if not data.startswith(_MAGIC) or len(data) < header_len:
        raise CorruptCheckpointError(handle.uri, "not a weir state file (truncated or overwritten)")
    digest = data[len(_MAGIC) : header_len - 1].decode("ascii", "replace")
    payload = data[header_len:]
    if digest != handle.sha256 or hashlib.sha256(payload).hexdigest() != digest:
        raise CorruptCheckpointError(handle.uri, "checksum mismatch")
    return loads(payload)


def write_metadata(location: str, metadata: dict[str, Any]) -> None:
    """Written last: a checkpoint or savepoint exists once its metadata does."""
    _atomic_write(join(location, METADATA), json.dumps(metadata, indent=1, sort_keys=True).encode())


def read_metadata(location: str) -> dict[str, Any]:
    uri = join(validate_storage_uri(location), METADATA)
    try:
        fs, path = _resolve(uri)
        with fs.open_input_stream(path) as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise CorruptCheckpointError(uri, "missing: no completed checkpoint or savepoint there") from None
    except (ValueError, OSError) as exc:
        raise CorruptCheckpointError(uri, f"unreadable metadata ({exc})") from None


def discard(location: str) -> None:
    try:
        fs, path = _resolve(location)
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


class CheckpointStorage:
    """A job's checkpoints: ``<storage>/<job>/<run>/chk-<N>``. Each submission is a
    run of its own, so a new run never mistakes an old run's checkpoint for its own."""

    def __init__(self, uri: str, job_name: str, run_id: str = "") -> None:
        self.root = join(validate_storage_uri(uri), _safe(job_name))
        if run_id:
            self.root = join(self.root, _safe(run_id))

    def location(self, checkpoint_id: int) -> str:
        return join(self.root, f"chk-{checkpoint_id}")

    def checkpoint_ids(self, completed_only: bool = True) -> list[int]:
        """Ids of the ``chk-N`` folders; with ``completed_only``, those with metadata
        (a folder without is a checkpoint that never completed)."""
        try:
            fs, root = _resolve(self.root)
            infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except OSError:
            return []
        ids = []
        for info in infos:
            m = _CHK.match(info.base_name)
            if m and (not completed_only or fs.get_file_info(posixpath.join(info.path, METADATA)).type == pafs.FileType.File):
                ids.append(int(m.group(1)))
        return sorted(ids)


def pickle_state(state: Any, task: str) -> bytes:
    """Pickle a snapshot now, on the loop thread: the bytes are the copy that the
    background write works from while the operators go on changing their state."""
    try:
        return dumps(state)
    except Exception as exc:
        raise StateSerializationError(task, exc) from exc


def handle_to_json(handle: StateHandle) -> dict[str, Any]:
    return asdict(handle)


def handle_from_json(data: dict[str, Any]) -> StateHandle:
    return StateHandle(data["uri"], data["sha256"], int(data["size"]))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", name)

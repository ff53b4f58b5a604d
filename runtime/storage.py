"""Checkpoint storage on any ``pyarrow.fs`` file system.

Layout under ``<storage>/<job>/``::

    chk-<N>/<vertex>-<subtask>.state    one file per task: checksummed, pickled state
    chk-<N>/_metadata                   JSON, written last and atomically (write, then rename)

A checkpoint exists only once its ``_metadata`` exists. State files start with a
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
from runtime.errors import CorruptCheckpointError, StateSerializationError
from runtime.serialization import dumps, loads

_MAGIC = b"WEIR-STATE-1\n"
_CHK = re.compile(r"^chk-(\d+)$")
METADATA = "_metadata"


@dataclass(frozen=True)
class StateHandle:
    path: str
    sha256: str
    size: int


def _open(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(validate_storage_uri(uri))


class CheckpointStorage:
    def __init__(self, uri: str, job_name: str) -> None:
        self.uri = uri
        self._fs, base = _open(uri)
        self.root = posixpath.join(base, _safe(job_name))

    def _chk_dir(self, checkpoint_id: int) -> str:
        return posixpath.join(self.root, f"chk-{checkpoint_id}")

    def _atomic_write(self, path: str, data: bytes) -> None:
        self._fs.create_dir(posixpath.dirname(path), recursive=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with self._fs.open_output_stream(tmp) as out:
            out.write(data)
        self._fs.move(tmp, path)

    def write_task_state(self, checkpoint_id: int, task_key: str, payload: bytes) -> StateHandle:
        """Write state already pickled by :func:`pickle_state`."""
        digest = hashlib.sha256(payload).hexdigest()
        path = posixpath.join(self._chk_dir(checkpoint_id), f"{_safe(task_key)}.state")
        self._atomic_write(path, _MAGIC + digest.encode() + b"\n" + payload)
        return StateHandle(path, digest, len(payload))

    def read_task_state(self, handle: StateHandle) -> Any:
        try:
            with self._fs.open_input_stream(handle.path) as f:
                data = f.read()
        except (FileNotFoundError, OSError) as exc:
            raise CorruptCheckpointError(handle.path, f"cannot be read ({exc})") from None
        header_len = len(_MAGIC) + 65
        if not data.startswith(_MAGIC) or len(data) < header_len:
            raise CorruptCheckpointError(handle.path, "not a weir state file (truncated or overwritten)")
        digest = data[len(_MAGIC) : header_len - 1].decode("ascii", "replace")
        payload = data[header_len:]
        if digest != handle.sha256 or hashlib.sha256(payload).hexdigest() != digest:
            raise CorruptCheckpointError(handle.path, "checksum mismatch")
        return loads(payload)

    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        path = posixpath.join(self._chk_dir(checkpoint_id), METADATA)
        self._atomic_write(path, json.dumps(metadata, indent=1, sort_keys=True).encode())
        return path

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]:
        path = posixpath.join(self._chk_dir(checkpoint_id), METADATA)
        try:
            with self._fs.open_input_stream(path) as f:
                return json.loads(f.read())
        except FileNotFoundError:
            raise CorruptCheckpointError(path, "missing") from None
        except (ValueError, OSError) as exc:
            raise CorruptCheckpointError(path, f"unreadable metadata ({exc})") from None

    def completed_checkpoint_ids(self) -> list[int]:
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except OSError:
            return []
        ids = []
        for info in infos:
            m = _CHK.match(info.base_name)
            if m and self._fs.get_file_info(posixpath.join(info.path, METADATA)).type == pafs.FileType.File:
                ids.append(int(m.group(1)))
        return sorted(ids)

    def discard(self, checkpoint_id: int) -> None:
        try:
            self._fs.delete_dir(self._chk_dir(checkpoint_id))
        except (FileNotFoundError, OSError):
            pass

    def location(self, checkpoint_id: int) -> str:
        return self._chk_dir(checkpoint_id)


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
    return StateHandle(data["path"], data["sha256"], int(data["size"]))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", name)

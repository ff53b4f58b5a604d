"""Checkpoint storage on any ``pyarrow.fs`` file system.

A run of a job (one submission) lives in ``<storage>/<job>/<run>/``::

    _job                        JSON, written before the first task is deployed
    _incarnation                JSON, the job master that owns the run (see CheckpointStorage)
    chk-<N>/                    a checkpoint
    shared/                     the task files checkpoints share (below)
    _result                     JSON, the run's terminal state, written before anyone hears of it

A savepoint asked for without a path goes to ``<storage>/<job>/savepoints/``.

A savepoint lives in a folder of its own, ``savepoint-<run>-<random>``, created
under the path the user names (weir never writes beside it, nor deletes what it
did not write). A checkpoint or savepoint folder holds::

    <vertex>-<subtask>.state    one file per task (a savepoint): checksummed, pickled state
    _metadata                   JSON, written last and atomically (write, then rename)

A checkpoint's task files live beside its folder instead, in ``<run>/shared/``
(``<vertex>-<subtask>-<id>-<attempt>.state``): a later checkpoint may write only
what changed and name the earlier files it builds on (a handle's ``base``), so a
file outlives its checkpoint while a retained one still names it. The job
master counts those references and deletes a shared file when none is left
(``weir.runtime.shared_state``); a savepoint never refers outside its folder.

It exists only once its ``_metadata`` exists. Handles of the files inside it are
stored relative to it, so a savepoint can be moved or copied. State files start
with a magic tag and the SHA-256 of their payload, checked before anything is
unpickled. The storage is a trust boundary: whoever can write it can make a
restore run code, as with any pickle.

Reads retry a transient ``OSError`` a few times (a flaky network file system is
not a damaged checkpoint); a missing file is not retried.

On a local disk, on whichever node writes, the folders storage creates are 0700
and its files 0600 from the moment they exist; the default storage's private
folder (``<temp>/weir-<uid>``) is created or checked (this user's, not a link)
whenever storage reaches into it, so a task on another node than the driver's
holds to the same rules (:func:`weir.runtime.config.private_folder_of`).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from weir.runtime.config import claim_private_folder, private_folder_of, validate_storage_uri
from weir.runtime.errors import (
    CheckpointStorageError,
    CorruptCheckpointError,
    FencedError,
    InvalidConfigurationError,
    StateSerializationError,
)
from weir.runtime.serialization import dumps_state, loads

_MAGIC = b"WEIR-STATE-1\n"
_CHK = re.compile(r"^chk-(\d+)$")
METADATA = "_metadata"
_READ_RETRIES_S = (0.2, 0.5, 1.0)  # waits between tries of a read that failed with an OSError


@dataclass(frozen=True)
class StateHandle:
    """A state file; ``base``: the files it builds on, read before it (oldest first);
    ``files``: the files of a backend that keeps its state in files of its own
    (RocksDB's), which the state file names by :attr:`DbFile.name`."""

    uri: str
    sha256: str
    size: int
    base: tuple["StateHandle", ...] = ()
    files: tuple["DbFile", ...] = ()

    @property
    def chain(self) -> tuple["StateHandle", ...]:
        """Every file a restore reads for this one, oldest first."""
        return (*self.base, StateHandle(self.uri, self.sha256, self.size, files=self.files))

    @property
    def sizes(self) -> dict[str, int]:
        """This file and the backend files it names (not its base), each URI with its size."""
        return {self.uri: self.size, **{f.handle.uri: f.handle.size for f in self.files}}

    @property
    def uris(self) -> list[str]:
        return list(self.sizes)


@dataclass(frozen=True)
class DbFile:
    """One file of a backend's own state files (an SST, a MANIFEST), uploaded
    as it is and checksummed; ``name`` is what the snapshot calls it. A later
    checkpoint may name the same upload again (an SST never changes)."""

    name: str
    handle: StateHandle


def _resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system and path of ``uri``; raises :class:`CheckpointStorageError`
    for a path in a default storage folder that is not this user's."""
    fs, path = pafs.FileSystem.from_uri(uri)
    private = private_folder_of(path) if isinstance(fs, pafs.LocalFileSystem) else None
    if private is not None:
        problem = claim_private_folder(private)
        if problem:
            raise CheckpointStorageError(private, problem)
    return fs, path


def _make_dirs(fs: pafs.FileSystem, path: str) -> None:
    """``path`` and its missing parents; on a local disk each one created 0700."""
    if not isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path, recursive=True)
        return
    missing = []
    while not os.path.isdir(path) and path != posixpath.dirname(path):
        missing.append(path)
        path = posixpath.dirname(path)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another task made it meanwhile
            pass


def _split(uri: str) -> tuple[str, str]:
    """A URI's path part and its query (``?endpoint_override=...&region=...``:
    pyarrow's options for the file system, which every URI under it keeps)."""
    base, mark, query = uri.partition("?")
    return base.rstrip("/"), mark + query


def join(location: str, name: str) -> str:
    base, query = _split(location)
    return f"{base}/{name}{query}"


def parent(location: str) -> str:
    base, query = _split(location)
    return base.rsplit("/", 1)[0] + query


def within(uri: str, folder: str) -> bool:
    """Whether ``uri`` lies inside ``folder`` (queries aside)."""
    return _split(uri)[0].startswith(_split(folder)[0] + "/")


def relative_to(uri: str, folder: str) -> str:
    """``uri``'s path inside ``folder`` (see :func:`within`), without the query."""
    return _split(uri)[0][len(_split(folder)[0]) + 1 :]


def appears_whole(fs: pafs.FileSystem) -> bool:
    """An object store (S3, GCS): a file appears whole when its upload completes,
    a rename is a copy, and folders are only prefixes of names. A write there goes
    straight to its name."""
    return fs.type_name in ("s3", "gcs")


def _atomic_write(uri: str, data: bytes) -> None:
    fs, path = _resolve(uri)
    if appears_whole(fs):
        with fs.open_output_stream(path) as out:
            out.write(data)
        return
    _make_dirs(fs, posixpath.dirname(path))
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    if isinstance(fs, pafs.LocalFileSystem):
        # Created 0600 before a byte is in it (writing into it keeps the mode):
        # in a folder others may list, no one else can ever open it.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def prepare_location(location: str) -> str:
    """Check that a checkpoint or savepoint can be written at ``location``; return
    it as a URI. Raises :class:`InvalidConfigurationError` naming it otherwise."""
    uri = validate_storage_uri(location, "savepoint path")
    try:
        fs, path = _resolve(uri)
        _make_dirs(fs, path)
    except OSError as exc:
        raise InvalidConfigurationError("savepoint path", location, f"cannot be written ({exc})") from None
    return uri


def savepoint_location(target: str, run_id: str) -> str:
    """A fresh folder for one savepoint under the user's ``target``."""
    return join(target, f"savepoint-{safe_name(run_id)[:6]}-{uuid.uuid4().hex[:12]}")


def _retrying(read: Any) -> Any:
    """``read()``, tried again after a transient OSError (not a missing file)."""
    for wait_s in _READ_RETRIES_S:
        try:
            return read()
        except FileNotFoundError:
            raise
        except OSError:
            time.sleep(wait_s)
    return read()


def _read_bytes(uri: str) -> bytes:
    def read() -> bytes:
        fs, path = _resolve(uri)
        with fs.open_input_stream(path) as f:
            return f.read()

    return _retrying(read)


def write_state(
    location: str,
    name: str,
    payload: bytes,
    base: tuple[StateHandle, ...] = (),
    files: tuple[DbFile, ...] = (),
) -> StateHandle:
    """Write state already pickled by :func:`pickle_state` into ``location``;
    ``files``: the backend files (uploaded already) its snapshots name."""
    digest = hashlib.sha256(payload).hexdigest()
    uri = join(location, f"{safe_name(name)}.state")
    _atomic_write(uri, _MAGIC + digest.encode() + b"\n" + payload)
    return StateHandle(uri, digest, len(payload), base, files)


SHARED = "shared"


def shared_folder(checkpoint_location: str) -> str:
    """The run's folder of task files that checkpoints share (see the module's doc)."""
    return join(parent(checkpoint_location), SHARED)


def upload_file(local_path: str, uri: str) -> StateHandle:
    """Copy a local file that no one changes any more (a RocksDB checkpoint's) into
    storage as it is, with its SHA-256 for the restore to check. Storage on the
    same local file system gets a hard link instead: nothing is copied."""
    fs, path = _resolve(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        _make_dirs(fs, posixpath.dirname(path))
        os.chmod(local_path, 0o600)
        try:
            os.link(local_path, path)
        except OSError:  # another file system (EXDEV), or links refused: copy
            pass
        else:
            with open(path, "rb") as f:
                return StateHandle(uri, hashlib.file_digest(f, "sha256").hexdigest(), os.fstat(f.fileno()).st_size)
    with open(local_path, "rb") as f:
        data = f.read()
    _atomic_write(uri, data)
    return StateHandle(uri, hashlib.sha256(data).hexdigest(), len(data))


def read_file(handle: StateHandle) -> bytes:
    """The bytes of a file :func:`upload_file` stored, checked."""
    try:
        data = _read_bytes(handle.uri)
    except OSError as exc:
        raise CorruptCheckpointError(handle.uri, f"cannot be read ({exc})") from None
    if len(data) != handle.size or hashlib.sha256(data).hexdigest() != handle.sha256:
        raise CorruptCheckpointError(handle.uri, "checksum mismatch")
    return data


def download_file(handle: StateHandle, local_path: str) -> None:
    """The file :func:`upload_file` stored, back on the local disk, checked. From
    storage on the same local file system it is hard-linked, as the upload
    linked it, and the link is checked: nothing is copied. No one changes such a
    file (weir never rewrites a stored file, and RocksDB only ever deletes its own
    name for one of its files); copying a 50M-key job's 0.9 GB took a restore
    6-10 s, as the disk allowed."""
    fs, path = _resolve(handle.uri)
    if isinstance(fs, pafs.LocalFileSystem):
        try:
            os.link(path, local_path)
        except OSError:  # another file system (EXDEV), links refused, or a missing file: copy, or say why not
            pass
        else:
            with open(local_path, "rb") as f:  # the linked file itself, which no one else can swap
                good = os.fstat(f.fileno()).st_size == handle.size
                good = good and hashlib.file_digest(f, "sha256").hexdigest() == handle.sha256
            if not good:
                os.remove(local_path)
                raise CorruptCheckpointError(handle.uri, "checksum mismatch")
            return
    data = read_file(handle)
    fd = os.open(local_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def delete_files(uris: list[str]) -> None:
    """Delete shared files no checkpoint refers to any more (a missing one is fine)."""
    for uri in uris:
        try:
            fs, path = _resolve(uri)
            fs.delete_file(path)
        except (FileNotFoundError, OSError):
            pass


def read_state(handle: StateHandle) -> Any:
    try:
        data = _read_bytes(handle.uri)
    except OSError as exc:
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
    """Written last: a checkpoint or savepoint exists once its metadata does.
    Handles of files inside ``location`` are stored relative to it."""
    relative = _map_handles(metadata, lambda uri: relative_to(uri, location) if within(uri, location) else uri)
    _atomic_write(join(location, METADATA), json.dumps(relative, indent=1, sort_keys=True).encode())


def read_metadata(location: str) -> dict[str, Any]:
    """The metadata at ``location``, its relative handles made full URIs again."""
    location = validate_storage_uri(location)
    uri = join(location, METADATA)
    try:
        metadata = json.loads(_read_bytes(uri))
    except FileNotFoundError:
        raise CorruptCheckpointError(uri, "missing: no completed checkpoint or savepoint there") from None
    except (ValueError, OSError) as exc:
        raise CorruptCheckpointError(uri, f"unreadable metadata ({exc})") from None
    problem = _metadata_problem(metadata)
    if problem:
        raise CorruptCheckpointError(uri, f"not weir checkpoint metadata ({problem})")
    return _map_handles(metadata, lambda ref: ref if "://" in ref else join(location, ref))


_OPERATOR_FIELDS = {"vertex": str, "parallelism": int, "max_parallelism": int, "fully_finished": bool, "handles": list}
_HANDLE_FIELDS = {"uri": str, "sha256": str, "size": int}


def _handle_problem(h: Any) -> bool:
    if not isinstance(h, dict) or any(not isinstance(h.get(k), t) for k, t in _HANDLE_FIELDS.items()):
        return True
    base, files = h.get("base", []), h.get("files", [])
    return (
        not isinstance(base, list)
        or any(_handle_problem(b) for b in base)
        or not isinstance(files, list)
        or any(not isinstance(f, dict) or not isinstance(f.get("name"), str) or _handle_problem(f) for f in files)
    )


def _metadata_problem(metadata: Any) -> str:
    """What makes well-formed JSON unusable as metadata ("" if nothing): a restore
    must fail as a damaged checkpoint, never with a bare KeyError."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get("checkpoint_id"), int):
        return "no checkpoint_id"
    if not isinstance(metadata.get("operators"), dict):
        return "no operators"
    for uid, op in metadata["operators"].items():
        if not isinstance(op, dict):
            return f"operator {uid!r} is not an object"
        for name, kind in _OPERATOR_FIELDS.items():
            if not isinstance(op.get(name), kind):
                return f"operator {uid!r} has no {name}"
        for h in op["handles"]:
            if h is not None and _handle_problem(h):
                return f"operator {uid!r} has a malformed state handle"
    return ""


def _map_handles(value: Any, fix: Any) -> Any:
    """``value`` with the ``uri`` of every state handle in it passed through ``fix``."""
    if isinstance(value, dict):
        if {"uri", "sha256", "size"} <= value.keys():
            return {k: fix(v) if k == "uri" else _map_handles(v, fix) for k, v in value.items()}
        return {k: _map_handles(v, fix) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_handles(v, fix) for v in value]
    return value


def find_restore_point(location: str) -> str:
    """The checkpoint or savepoint folder to restore from: ``location`` itself when
    it holds ``_metadata``, else the one complete ``savepoint-*`` or ``chk-*`` folder
    in it (the folder a savepoint was asked into). Raises naming what is there."""
    location = validate_storage_uri(location)
    fs, path = _resolve(location)
    if fs.get_file_info(posixpath.join(path, METADATA)).type == pafs.FileType.File:
        return location
    try:
        children = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError:
        children = []
    found = sorted(
        info.base_name
        for info in children
        if info.type == pafs.FileType.Directory
        and (info.base_name.startswith("savepoint-") or _CHK.match(info.base_name))
        and fs.get_file_info(posixpath.join(info.path, METADATA)).type == pafs.FileType.File
    )
    if len(found) == 1:
        return join(location, found[0])
    if found:
        raise CorruptCheckpointError(
            join(location, METADATA),
            f"missing, and {len(found)} savepoints or checkpoints are inside: name one of {', '.join(found)}",
        )
    raise CorruptCheckpointError(join(location, METADATA), "missing: no completed checkpoint or savepoint there")


def discard(location: str) -> None:
    try:
        fs, path = _resolve(location)
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


class CheckpointStorage:
    """A job's run: ``<storage>/<job>/<run>/``, with its checkpoints ``chk-<N>``, the
    mark that it started, and its result once it ended. Each submission is a run of
    its own, so a new run never mistakes an old run's checkpoint for its own.

    Fencing: a job master that takes a run over from one that died (a standby
    coordinator) has a higher ``incarnation`` and claims the run (``_incarnation``).
    Before each write or delete in the run (a checkpoint's metadata, a discard, a
    delete of shared files, the result) the writer checks that claim, and one
    that was taken over raises :class:`FencedError` instead of writing: a
    coordinator Ray declared dead that still runs cannot complete a checkpoint
    the new one does not know, nor delete what the new one restores from. The
    check is a read before the write, not an atomic compare: what slips through
    is the one write already under way when the claim lands."""

    STARTED = "_job"
    RESULT = "_result"
    INCARNATION = "_incarnation"

    def __init__(self, uri: str, job_name: str, run_id: str = "", incarnation: int = 0) -> None:
        self.job_root = join(validate_storage_uri(uri), safe_name(job_name))
        self.root = join(self.job_root, safe_name(run_id)) if run_id else self.job_root
        self.job_name = job_name
        self.incarnation = incarnation

    @property
    def savepoints(self) -> str:
        """Where a savepoint asked for without a path goes (Flink's
        ``state.savepoints.dir``): beside the job's runs, so that it outlives
        them; weir never deletes it."""
        return join(self.job_root, "savepoints")

    def claim(self) -> None:
        """Take the run over (see the class's doc); raises :class:`FencedError` when
        an even newer incarnation has claimed it already."""
        self.check_fence()
        _atomic_write(join(self.root, self.INCARNATION), json.dumps({"incarnation": self.incarnation}).encode())

    def check_fence(self) -> None:
        """Raise :class:`FencedError` when a newer incarnation has claimed the run."""
        try:
            claimed = json.loads(self._read(self.INCARNATION))
        except FileNotFoundError:
            return
        except ValueError as exc:
            raise CheckpointStorageError(self.root, f"holds a damaged {self.INCARNATION} ({exc})") from None
        newer = claimed.get("incarnation", 0) if isinstance(claimed, dict) else 0
        if isinstance(newer, int) and newer > self.incarnation:
            raise FencedError(self.job_name, self.root, self.incarnation, newer)

    def discard(self, location: str) -> None:
        """Delete a checkpoint's or an aborted savepoint's folder, unless fenced."""
        self.check_fence()
        discard(location)

    def delete(self, uris: list[str]) -> None:
        """Delete shared files no kept checkpoint names, unless fenced."""
        self.check_fence()
        delete_files(uris)

    def shared_files(self) -> list[str]:
        """Every file in the run's shared folder, as URIs (a recovery sweeps those
        no complete checkpoint names)."""
        fs, root = _resolve(self.root)
        try:
            infos = _retrying(
                lambda: fs.get_file_info(pafs.FileSelector(posixpath.join(root, SHARED), allow_not_found=True))
            )
        except OSError as exc:
            raise CheckpointStorageError(self.root, f"cannot be listed ({exc})") from None
        prefix = join(self.root, SHARED)
        return [join(prefix, i.base_name) for i in infos if i.type == pafs.FileType.File]

    def location(self, checkpoint_id: int) -> str:
        return join(self.root, f"chk-{checkpoint_id}")

    def mark_started(self) -> None:
        """Before the first task runs: from now on, a job master that recovers this
        run and finds no trace of it is looking at the wrong storage."""
        try:
            _atomic_write(
                join(self.root, self.STARTED), json.dumps({"job": self.job_name, "started_at": time.time()}).encode()
            )
        except OSError as exc:
            raise CheckpointStorageError(self.root, f"cannot be written ({exc})") from None

    def record_result(self, status: str, detail: str, **numbers: float) -> None:
        """``numbers``: the result's figures (restarts, duration), for a client that
        asks after the job's record is gone."""
        self.check_fence()
        record = {"status": status, "detail": detail, "ended_at": time.time(), **numbers}
        _atomic_write(join(self.root, self.RESULT), json.dumps(record).encode())

    def recorded_result(self) -> dict[str, Any] | None:
        """The run's terminal state, if it ended (see :meth:`record_result`)."""
        try:
            return json.loads(self._read(self.RESULT))
        except FileNotFoundError:
            return None

    def started(self) -> bool:
        try:
            self._read(self.STARTED)
            return True
        except FileNotFoundError:
            return False

    def _read(self, name: str) -> bytes:
        try:
            return _read_bytes(join(self.root, name))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise CheckpointStorageError(self.root, f"cannot be read ({exc})") from None

    def checkpoint_ids(self, completed_only: bool = True) -> list[int]:
        """Ids of the ``chk-N`` folders; with ``completed_only``, those with metadata
        (a folder without is a checkpoint that never completed). A storage that
        cannot be listed raises (after retries): an empty answer would mean
        "start from scratch"."""

        def listing() -> list[int]:
            fs, root = _resolve(self.root)
            ids = []
            for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
                m = _CHK.match(info.base_name)
                if m and (
                    not completed_only
                    or fs.get_file_info(posixpath.join(info.path, METADATA)).type == pafs.FileType.File
                ):
                    ids.append(int(m.group(1)))
            return sorted(ids)

        try:
            return _retrying(listing)
        except OSError as exc:
            raise CheckpointStorageError(self.root, f"cannot be listed ({exc})") from None


def pickle_state(state: Any, task: str) -> bytes:
    """Pickle a snapshot now, on the loop thread: the bytes are the copy that the
    background write works from while the operators go on changing their state."""
    try:
        return dumps_state(state)
    except Exception as exc:
        raise StateSerializationError(task, exc) from exc


def handle_to_json(handle: StateHandle) -> dict[str, Any]:
    out: dict[str, Any] = {"uri": handle.uri, "sha256": handle.sha256, "size": handle.size}
    if handle.base:
        out["base"] = [handle_to_json(b) for b in handle.base]
    if handle.files:
        out["files"] = [{"name": f.name, **handle_to_json(f.handle)} for f in handle.files]
    return out


def handle_from_json(data: dict[str, Any]) -> StateHandle:
    base = tuple(handle_from_json(b) for b in data.get("base", ()))
    files = tuple(DbFile(f["name"], handle_from_json(f)) for f in data.get("files", ()))
    return StateHandle(data["uri"], data["sha256"], int(data["size"]), base, files)


def safe_name(name: str) -> str:
    """``name`` with every run of characters a file name should not hold made one ``_``."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", name)

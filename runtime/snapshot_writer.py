"""A task's snapshot writer: the operators' state, taken on the loop thread at
the barrier, is written to checkpoint storage on one thread of its own, so the
loop goes on with records while the file is written; then the job master hears
an acknowledgement (or a decline naming the storage error).

A backend that keeps its state in files of its own (RocksDB's) hands over
:class:`~weir.runtime.incremental.FileUpload` s with the snapshot: they run first, on the same thread, and
the state file's handle names what they uploaded.

It remembers the chain of files behind each checkpoint it wrote, so that a
later checkpoint based on one (see ``weir.runtime.incremental``) names them.

A task that fails or is cancelled abandons its writes: one still queued never
runs, and one under way deletes what it wrote instead of acknowledging it. No
checkpoint will name those files, and the job master that would sweep them (a
failover's, a takeover's) may have listed storage already: without this, the
last write of a dead attempt left files that nothing ever deleted. A write that
fails (the store is full, unreachable) deletes the uploads it made before it
failed, for the same reason, and declines the checkpoint."""

from __future__ import annotations

import concurrent.futures
import posixpath
import threading
from typing import Protocol

from weir.runtime import faults
from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.events import CheckpointBarrier, CheckpointKind
from weir.runtime.incremental import FileUpload
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import DbFile, StateHandle, delete_files, safe_name, shared_folder, write_state


class CheckpointReplies(Protocol):
    """How a task answers the job master about a checkpoint (part of its ports)."""

    def acknowledge_checkpoint(
        self, checkpoint_id: int, handle: StateHandle, operators: dict[str, SnapshotSummary], alignment_ms: int
    ) -> None: ...

    def decline_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None: ...


MAX_CHAIN = 32  # files a restore reads for one task at most
ABANDON_WAIT_S = 10.0  # how long a failed task's exit waits for its write under way


class SnapshotWriter:
    def __init__(self, task: str, attempt: str, ports: CheckpointReplies) -> None:
        self._task = task
        self._attempt = attempt
        self._ports = ports
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"chk-{task}")
        self._writes: list[concurrent.futures.Future[None]] = []
        self._chains: dict[int, tuple[StateHandle, ...]] = {}  # checkpoint id -> its files, oldest first
        self._lock = threading.Lock()
        self._abandoned = False

    def base_for(self, barrier: CheckpointBarrier) -> int | None:
        """The checkpoint this snapshot may write only changes against: the
        barrier's base, if this writer wrote it and its chain is not too long
        (None: write everything). Each operator also writes everything once its
        changes outweigh its last full snapshot; the length limit catches a chain
        whose operators take their turns."""
        base = barrier.base
        if barrier.kind is not CheckpointKind.CHECKPOINT or base is None or base not in self._chains:
            return None
        if len(self._chains[base]) >= MAX_CHAIN:
            return None
        for cid in [c for c in self._chains if c < base]:
            del self._chains[cid]  # later barriers name this base or a newer one
        return base

    def submit(
        self,
        barrier: CheckpointBarrier,
        payload: bytes,
        summaries: dict[str, SnapshotSummary],
        base: int | None,
        uploads: list[FileUpload],
        alignment_ms: int = 0,
    ) -> None:
        """Run ``uploads``, then write ``payload``, a delta on ``base``'s chain (None:
        everything), then acknowledge it with ``alignment_ms``."""
        self._writes = [f for f in self._writes if not f.done()]
        self._writes.append(
            self._pool.submit(self._write_and_ack, barrier, payload, summaries, base, uploads, alignment_ms)
        )

    def wait(self) -> None:
        """Until every snapshot submitted so far is written and acknowledged."""
        for f in self._writes:
            f.result()

    def shutdown(self, abandon: bool = False) -> None:
        """The task ends. ``abandon``: it failed or was cancelled, so its writes
        are dropped (see the module's doc); this waits, up to ``ABANDON_WAIT_S``,
        for the one under way to delete its files. A finished task's last write
        goes on and is acknowledged."""
        with self._lock:
            self._abandoned = abandon
        self._pool.shutdown(wait=False, cancel_futures=True)
        if abandon:
            # A cancelled future never counts as done for wait(): leave those out.
            concurrent.futures.wait([f for f in self._writes if not f.cancelled()], timeout=ABANDON_WAIT_S)

    def _write_and_ack(
        self,
        barrier: CheckpointBarrier,
        payload: bytes,
        summaries: dict[str, SnapshotSummary],
        base: int | None,
        uploads: list[FileUpload],
        alignment_ms: int,
    ) -> None:
        faults.point("task-writing-snapshot")
        name = self._task.replace("/", "-")
        shared = barrier.kind is CheckpointKind.CHECKPOINT
        folder = shared_folder(barrier.location) if shared else barrier.location
        prefix = f"{name}-{barrier.checkpoint_id}-{self._attempt}" if shared else name
        files: list[DbFile] = []
        try:
            chain = self._chains[base] if base is not None else ()
            for u in uploads:
                files += u.run(folder, prefix, shared)  # one that fails deletes its own
            handle = write_state(folder, prefix, payload, chain, tuple(files))
        except Exception as exc:
            _delete_own(prefix, [f.handle.uri for f in files])  # no checkpoint will name them
            self._ports.decline_checkpoint(
                barrier.checkpoint_id,
                CheckpointFailureReason.DECLINED_STORAGE_FAILED,
                f"writing its state failed: {exc}",
            )
            return
        with self._lock:
            if self._abandoned:
                _delete_own(prefix, handle.uris)
                return
            if shared:
                self._chains[barrier.checkpoint_id] = handle.chain
        self._ports.acknowledge_checkpoint(barrier.checkpoint_id, handle, summaries, alignment_ms)


def _delete_own(prefix: str, uris: list[str]) -> None:
    """Delete the files a write made: those named after its ``prefix``. A reused
    upload (an SST an earlier checkpoint names too) is not, and stays."""
    own = safe_name(prefix)
    delete_files([uri for uri in uris if posixpath.basename(uri).startswith(own)])

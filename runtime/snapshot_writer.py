"""A task's snapshot writer: the operators' state, taken on the loop thread at
the barrier, is written to checkpoint storage on one thread of its own, so the
loop goes on with records while the file is written; then the job master hears
an acknowledgement (or a decline naming the storage error).

A backend that keeps its state in files of its own (RocksDB's) hands over
:class:`~weir.runtime.incremental.FileUpload` s with the snapshot: they run first, on the same thread, and
the state file's handle names what they uploaded.

It remembers the chain of files behind each checkpoint it wrote, so that a
later checkpoint based on one (see ``weir.runtime.incremental``) names them."""

from __future__ import annotations

import concurrent.futures
from typing import Protocol

from weir.runtime import faults
from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.events import CheckpointBarrier, CheckpointKind
from weir.runtime.incremental import FileUpload
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle, shared_folder, write_state


class CheckpointReplies(Protocol):
    """How a task answers the job master about a checkpoint (part of its ports)."""

    def acknowledge_checkpoint(
        self, checkpoint_id: int, handle: StateHandle, operators: dict[str, SnapshotSummary], alignment_ms: int
    ) -> None: ...

    def decline_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None: ...


MAX_CHAIN = 32  # files a restore reads for one task at most


class SnapshotWriter:
    def __init__(self, task: str, attempt: str, ports: CheckpointReplies) -> None:
        self._task = task
        self._attempt = attempt
        self._ports = ports
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"chk-{task}")
        self._writes: list[concurrent.futures.Future[None]] = []
        self._chains: dict[int, tuple[StateHandle, ...]] = {}  # checkpoint id -> its files, oldest first

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

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

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
        try:
            if barrier.kind is CheckpointKind.CHECKPOINT:
                chain = self._chains[base] if base is not None else ()
                folder = shared_folder(barrier.location)
                unique = f"{name}-{barrier.checkpoint_id}-{self._attempt}"
                files = tuple(f for u in uploads for f in u.run(folder, unique, shared=True))
                handle = write_state(folder, unique, payload, chain, files)
                self._chains[barrier.checkpoint_id] = handle.chain
            else:
                files = tuple(f for u in uploads for f in u.run(barrier.location, name, shared=False))
                handle = write_state(barrier.location, name, payload, files=files)
        except Exception as exc:
            self._ports.decline_checkpoint(
                barrier.checkpoint_id,
                CheckpointFailureReason.DECLINED_STORAGE_FAILED,
                f"writing its state failed: {exc}",
            )
            return
        self._ports.acknowledge_checkpoint(barrier.checkpoint_id, handle, summaries, alignment_ms)

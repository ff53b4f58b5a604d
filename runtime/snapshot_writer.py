"""A task's snapshot writer: the operators' state, taken on the loop thread at
the barrier, is written to checkpoint storage on one thread of its own, so the
loop goes on with records while the file is written; then the job master hears
an acknowledgement (or a decline naming the storage error)."""

from __future__ import annotations

import concurrent.futures
from typing import Protocol

from weir.runtime import faults
from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.events import CheckpointBarrier
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle, write_state


class CheckpointReplies(Protocol):
    """How a task answers the job master about a checkpoint (part of its ports)."""

    def acknowledge_checkpoint(
        self, checkpoint_id: int, handle: StateHandle, operators: dict[str, SnapshotSummary]
    ) -> None: ...

    def decline_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None: ...


class SnapshotWriter:
    def __init__(self, task: str, ports: CheckpointReplies) -> None:
        self._task = task
        self._ports = ports
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"chk-{task}")
        self._writes: list[concurrent.futures.Future[None]] = []

    def submit(self, barrier: CheckpointBarrier, payload: bytes, summaries: dict[str, SnapshotSummary]) -> None:
        self._writes = [f for f in self._writes if not f.done()]
        self._writes.append(self._pool.submit(self._write_and_ack, barrier, payload, summaries))

    def wait(self) -> None:
        """Until every snapshot submitted so far is written and acknowledged."""
        for f in self._writes:
            f.result()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _write_and_ack(self, barrier: CheckpointBarrier, payload: bytes, summaries: dict[str, SnapshotSummary]) -> None:
        faults.point("task-writing-snapshot")
        try:
            handle = write_state(barrier.location, self._task.replace("/", "-"), payload)
        except Exception as exc:
            self._ports.decline_checkpoint(
                barrier.checkpoint_id,
                CheckpointFailureReason.DECLINED_STORAGE_FAILED,
                f"writing its state failed: {exc}",
            )
            return
        self._ports.acknowledge_checkpoint(barrier.checkpoint_id, handle, summaries)

"""Sinks, with two-phase commit driven by checkpoints.

A :class:`SinkWriter` writes records into a transaction that nobody sees yet. At
a checkpoint the operator asks it to ``prepare_commit`` (pre-commit) and keeps
what it returns (committables) in its checkpointed state; when that checkpoint
completes it calls ``commit``. A restore commits the committables of the
restored checkpoint again, so ``commit`` must be idempotent. This makes a sink
exactly-once whenever checkpointing is on and the writer hides uncommitted data.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from typing import Any

from runtime.operators import OperatorContext, RestoredState, StreamOperator
from runtime.state import OperatorSnapshot


class SinkWriter(ABC):
    @abstractmethod
    def write(self, records: list[Any]) -> None: ...

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Close the open transaction; return what ``commit`` needs to publish it."""
        return []

    def commit(self, committables: list[Any]) -> None:
        """Publish; called again with the same committables after a restore."""

    def recover(self, committables: list[Any]) -> None:
        """After a restore: publish what the restored checkpoint pre-committed."""
        self.commit(committables)

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Every subtask's restored committables are published by now; a writer may
        clean up leftovers of earlier attempts here."""

    def close(self) -> None:
        pass


class Sink(ABC):
    @abstractmethod
    def create_writer(self, ctx: OperatorContext) -> SinkWriter: ...

    def exclusive_location(self) -> str | None:
        """A place only this sink may write to (two sinks of a job there would
        overwrite each other's files), or None when it may be shared."""
        return None


class SinkOperator(StreamOperator):
    PENDING = "pending-committables"

    def __init__(self, name: str, uid: str, sink: Sink) -> None:
        super().__init__(name, uid)
        self.sink = sink
        self.writer: SinkWriter | None = None
        self._pending: dict[int, list[Any]] = {}

    def initialize_state(self, restored: RestoredState) -> None:
        super().initialize_state(restored)
        try:
            self.writer = self.sink.create_writer(self.ctx)
            recovered = self.operator_state.lists.pop(self.PENDING, [])
            if recovered:
                self.writer.recover([c for _, c in recovered])
        except Exception as exc:
            raise self.fail("sink writer", exc) from exc

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        try:
            self.writer.write(records)  # type: ignore[union-attr]
        except Exception as exc:
            raise self.fail("sink writer", exc, records[0] if len(records) == 1 else None, len(records) == 1) from exc

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        try:
            prepared = self.writer.prepare_commit(checkpoint_id)  # type: ignore[union-attr]
        except Exception as exc:
            raise self.fail("sink writer prepare_commit", exc) from exc
        if prepared:
            self._pending[checkpoint_id] = prepared
        snap = super().snapshot_state(checkpoint_id)
        snap.lists[self.PENDING] = [(cid, c) for cid, cs in sorted(self._pending.items()) for c in cs]
        return snap

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        done = sorted(cid for cid in self._pending if cid <= checkpoint_id)
        committables = [c for cid in done for c in self._pending[cid]]
        try:
            if committables:
                self.writer.commit(committables)  # type: ignore[union-attr]
            self.writer.checkpoint_completed(checkpoint_id)  # type: ignore[union-attr]
        except Exception as exc:
            raise self.fail("sink writer commit", exc) from exc
        for cid in done:
            del self._pending[cid]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class DiscardingSink(Sink):
    """Drops every record (benchmarks, side-effect-only jobs)."""

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _Discard()


class _Discard(SinkWriter):
    def write(self, records: list[Any]) -> None:
        pass


class PrintSink(Sink):
    """Prints each record to the task's stdout (Ray forwards it to the driver). Not
    transactional: after a failover, records may print again."""

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _Print(f"{ctx.task_name}[{ctx.subtask}]> ")


class _Print(SinkWriter):
    def __init__(self, prefix: str) -> None:
        self._prefix = prefix

    def write(self, records: list[Any]) -> None:
        sys.stdout.write("".join(f"{self._prefix}{r}\n" for r in records))
        sys.stdout.flush()

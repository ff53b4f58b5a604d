"""Sinks, with two-phase commit driven by checkpoints.

A :class:`SinkWriter` writes records into a transaction that nobody sees yet. At
a checkpoint the operator asks it to ``prepare_commit`` (pre-commit) and keeps
what it returns (committables) in its checkpointed state; when that checkpoint
completes it calls ``commit``. A restore commits the committables of the
restored checkpoint again, so ``commit`` must be idempotent. This makes a sink
exactly-once whenever checkpointing is on and the writer hides uncommitted data.

What a sink pre-committed waits in its state until a checkpoint completes, and
every snapshot holds it all again. While checkpoints keep failing that grows
with the input, so it is bounded: past ``Sink.max_pending_bytes`` (pickled)
after a failed checkpoint, the snapshot fails the task with a
:class:`SinkBacklogError`, and the job goes back to its latest completed
checkpoint instead of growing until the OOM killer ends it.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from typing import Any

from weir.runtime.errors import SinkBacklogError
from weir.runtime.javastrings import printed
from weir.runtime.operators import OperatorContext, RestoredState, StreamOperator
from weir.runtime.serialization import dumps
from weir.runtime.state import OperatorSnapshot
from weir.runtime.typeinfo import TypeInformation


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

    def finish(self) -> None:
        """End of input (FLIP-147's ``SinkFunction#finish``): write out what is
        buffered. The final checkpoint's ``prepare_commit`` and ``commit`` follow."""

    def abort(self, committables: list[Any]) -> None:
        """A finished sink is closing: these were pre-committed by checkpoints
        after the final one the task waited for, and nothing will commit them."""

    def close(self) -> None:
        pass


class Sink(ABC):
    # Pickled bytes of pre-committed output the sink may hold once a checkpoint
    # failed since the last completed one (see the module docstring); set it on
    # a sink to change it. One large transaction with no failure is never refused:
    # a bounded job without periodic checkpoints commits all at its final one.
    max_pending_bytes: int = 128 * 1024 * 1024

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
        self._pending_bytes: dict[int, int] = {}  # measured only once a checkpoint failed
        self._failed_in_a_row = 0  # checkpoints aborted since the last completed one
        self._finished = False

    def initialize_state(self, restored: RestoredState) -> None:
        super().initialize_state(restored)
        try:
            self.writer = self.sink.create_writer(self.ctx)
            # One entry per subtask that wrote them: a restore, whatever its
            # parallelism, hands each writer's committables to one subtask, which
            # recovers them in order (a Kafka transactional id is one writer's).
            recovered = [c for entry in self.operator_state.lists.pop(self.PENDING, []) for _, c in entry]
            if recovered:
                self.writer.recover(recovered)
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
        if self._failed_in_a_row:
            self._check_backlog()
        snap = super().snapshot_state(checkpoint_id)
        snap.lists[self.PENDING] = (
            [[(cid, c) for cid, cs in sorted(self._pending.items()) for c in cs]] if self._pending else []
        )
        return snap

    def _check_backlog(self) -> None:
        """Raise :class:`SinkBacklogError` when what waits for a completed
        checkpoint is past ``max_pending_bytes``."""
        for cid, committables in self._pending.items():
            if cid not in self._pending_bytes:
                self._pending_bytes[cid] = len(dumps(committables))
        held = sum(self._pending_bytes[cid] for cid in self._pending)
        if held > self.sink.max_pending_bytes:
            raise SinkBacklogError(self.name, held, self.sink.max_pending_bytes, self._failed_in_a_row)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._failed_in_a_row += 1

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._failed_in_a_row = 0
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
            self._pending_bytes.pop(cid, None)

    def finish(self) -> None:
        try:
            self.writer.finish()  # type: ignore[union-attr]
        except Exception as exc:
            raise self.fail("sink writer finish", exc) from exc
        self._finished = True

    def close(self) -> None:
        """After a finish, what is still pending came after the final checkpoint
        (FLIP-147: the task exits on 43, so 44's transaction is aborted). After a
        failure or a cancel nothing is aborted: the restore commits it."""
        if self.writer is None:
            return
        if self._finished and self._pending:
            self.writer.abort([c for _, cs in sorted(self._pending.items()) for c in cs])
        self.writer.close()


class DiscardingSink(Sink):
    """Drops every record (benchmarks, side-effect-only jobs)."""

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _Discard()


class _Discard(SinkWriter):
    def write(self, records: list[Any]) -> None:
        pass


class PrintSink(Sink):
    """Prints each record to the task's stdout (Ray forwards it to the driver), as
    PyFlink's ``print()``: a record of a declared type as Java's ``toString()``
    (``type_info``, see :mod:`weir.runtime.javastrings`), else as ``str()``; before
    it ``sink_identifier``, then ``:`` and the subtask's number from 1 when the
    sink runs on more than one, then ``> `` (nothing at all for one subtask and no
    identifier). Not transactional: after a failover, records may print again."""

    def __init__(self, sink_identifier: str | None = None, type_info: TypeInformation | None = None) -> None:
        self.sink_identifier = sink_identifier or ""
        self.type_info = type_info

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        parts = [self.sink_identifier] if self.sink_identifier else []
        if ctx.parallelism > 1:
            parts.append(str(ctx.subtask + 1))
        return _Print(f"{':'.join(parts)}> " if parts else "", self.type_info)


class _Print(SinkWriter):
    def __init__(self, prefix: str, type_info: TypeInformation | None) -> None:
        self._prefix = prefix
        self._type_info = type_info

    def write(self, records: list[Any]) -> None:
        sys.stdout.write("".join(f"{self._prefix}{printed(r, self._type_info)}\n" for r in records))
        sys.stdout.flush()

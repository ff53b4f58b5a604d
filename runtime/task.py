"""One parallel instance of a vertex: the stream task and its loop.

Threading model: any thread may put letters into :attr:`StreamTask.mailbox`; one
loop thread (the caller of :meth:`StreamTask.run`) takes them and is the only
thread that touches operators and state. The task talks to the outside only
through its :class:`TaskPorts` (channels out, the job master), so the same task
runs in a Ray actor, in the in-process executor and in test harnesses.

The task is the loop that routes letters between its protocols, each in a
module of its own: barrier alignment (``weir.runtime.barriers``), the input watermark
(``weir.runtime.watermark_valve``), the lifecycle (``weir.runtime.lifecycle``) and the
snapshot writer (``weir.runtime.snapshot_writer``).

Finishing (FLIP-147): at the end of input processing-time timers stop, and the
chain finishes first to last, each operator ``end_input`` then ``finish()``;
``EndOfData`` goes downstream and from then on any output is an error. The
finished task keeps taking part in checkpoints and exits once a checkpoint it
snapshotted after finishing has completed and every producer has exited. Then
``close()``, ``EndOfPartition``, and :meth:`run` returns. Operators restored as
fully finished are neither opened nor fed nor finished again, nor snapshotted,
notified or closed; their snapshots say they stay finished.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import replace
from typing import Any, Callable, Protocol

from weir.runtime import faults
from weir.runtime.barriers import Abort, BarrierHandler, Snapshot
from weir.runtime.config import CheckpointingMode
from weir.runtime.deployment import OperatorRestore, TaskDeployment
from weir.runtime.errors import CheckpointFailureReason, OperatorContractError, RecordDeserializationError, WeirError
from weir.runtime.events import (
    MIN_WATERMARK,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from weir.runtime.graph import OperatorSpec
from weir.runtime.incremental import KeyedSnapshot, located, merged
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.letters import (
    Cancel,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorEvent,
    TaskLetter,
    TriggerCheckpoint,
)
from weir.runtime.lifecycle import Lifecycle, Phase, TaskResult, TaskState
from weir.runtime.mailbox import DataLetter, Mailbox
from weir.runtime.network import RecordWriter, Timestamped, decode
from weir.runtime.operators import ChainedOutput, OperatorContext, Output, RestoredState, StreamOperator, TypedOutput
from weir.runtime.snapshot_writer import CheckpointReplies, SnapshotWriter
from weir.runtime.sources import SourceOperator
from weir.runtime.state import OperatorSnapshot
from weir.runtime.storage import pickle_state, read_state
from weir.runtime.watermark_valve import WatermarkValve


class TaskPorts(CheckpointReplies, Protocol):
    """What a task needs from its executor. ``send`` may block: that is backpressure."""

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None: ...

    def drain_outputs(self) -> None: ...

    def report_end_of_input(self) -> None: ...

    def send_operator_event(self, operator_uid: str, event: Any) -> None:
        """To the operator's coordinator on the job master."""

    def acknowledge_operator_event(self, operator_uid: str, event_id: int) -> None:
        """The coordinator's event ``event_id`` was handled."""

    @property
    def backpressured_s(self) -> float: ...


def decode_delivery(payload: bytes, channel: int, receiver: TaskDeployment) -> list[Any]:
    """A delivery that arrived on input ``channel`` of task ``receiver``. One that
    does not unpickle there (records pickle on the sender, but a user's
    ``__setstate__`` may raise, or a module be missing) raises
    :class:`RecordDeserializationError` naming the receiving task, the channel
    and the sending task and operator."""
    try:
        return decode(payload)
    except Exception as exc:
        edge_id, producer = receiver.input_channels[channel]
        edge = next(e for e in receiver.vertex.inputs if e.edge_id == edge_id)
        producer_task = f"{edge.source}/{producer}"
        raise RecordDeserializationError(receiver.name, channel, producer_task, edge.source_operator, exc) from exc


class _Cancelled(Exception):
    pass


class _WriterOutput(Output):
    def __init__(self, writers: list[RecordWriter], side: dict[str, list[RecordWriter]]) -> None:
        self.writers = writers
        self.side = side

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        for w in self.writers:
            w.emit(records, timestamps)

    def emit_watermark(self, watermark: Watermark) -> None:
        for w in self.writers:
            w.broadcast_event(watermark)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        for w in self.writers:
            w.broadcast_event(status)


class _RefusingOutput(Output):
    """An operator's output once it may not emit: after its input ended (EndOfData
    went downstream) and in ``close()``."""

    def __init__(self, operator: str, when: str) -> None:
        self._operator = operator
        self._when = when

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        raise OperatorContractError(f"operator '{self._operator}' emitted records {self._when}; emit them in finish()")

    def emit_watermark(self, watermark: Watermark) -> None:
        raise OperatorContractError(f"operator '{self._operator}' emitted a watermark {self._when}")

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        pass


class StreamTask:
    def __init__(
        self, deployment: TaskDeployment, ports: TaskPorts, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.deployment = d = deployment
        self.ports = ports
        self._clock = clock
        self.name = f"{d.vertex.name} ({d.subtask + 1}/{d.vertex.parallelism})"
        self.mailbox: Mailbox[TaskLetter] = Mailbox(len(d.input_channels), d.transport.mailbox_capacity)
        self.operators = [_created(spec) for spec in d.vertex.operators]
        self.head = self.operators[0]
        self.is_source = isinstance(self.head, SourceOperator)
        self.writers = _wire(d, self.operators, ports, clock)
        exactly_once = d.checkpointing.mode is CheckpointingMode.EXACTLY_ONCE
        self.barriers = BarrierHandler(len(d.input_channels), exactly_once)
        self.input = ChainInput(d, self.head)
        self.life = Lifecycle(d.name)
        self._source_active = self.is_source
        self._finished_ops: set[str] = set()  # uids whose finish() ran, or that were restored fully finished
        self._never_opened: frozenset[str] = frozenset()  # restored fully finished
        self._deferred_trigger: CheckpointBarrier | None = None
        self._exit = False
        self.snapshots = SnapshotWriter(d.name, d.attempt_id[:12], ports)
        self.first_record_at: float | None = None  # wall clock, for throughput figures
        self.last_record_at: float | None = None
        self.restore_s = 0.0  # reading the restored state into the operators

    @property
    def state(self) -> TaskState:
        return self.life.state

    # ------------------------------------------------------------------ metrics
    def _saw_records(self) -> None:
        self.last_record_at = time.time()
        if self.first_record_at is None:
            self.first_record_at = self.last_record_at

    def metrics(self) -> dict[str, Any]:
        return {
            "task": self.deployment.name,
            "state": self.state.value,
            "records_in": self.head.records_in,
            "records_out": sum(w.records_out for w in self.writers),
            "batches_out": sum(w.batches_out for w in self.writers),
            "backpressured_s": round(self.ports.backpressured_s, 3),
            "idle_s": round(self.mailbox.idle_s, 3),  # waiting for input or a source's next record
            "queued": self.mailbox.queued,  # input deliveries not taken yet
            "watermark": None if self.input.valve.watermark == MIN_WATERMARK else self.input.valve.watermark,
            "first_record_at": self.first_record_at,
            "last_record_at": self.last_record_at,
            "restore_s": round(self.restore_s, 3),
        }

    # ------------------------------------------------------------------ the loop
    def run(self) -> TaskResult:
        """The task's whole life on the calling thread; returns how it ended."""
        result = self._guarded(self._run_loop)
        assert result is not None
        return result

    def start(self) -> None:
        """Harness mode (see ``weir.runtime.testing.TaskHarness``): restore and open."""
        self._initialize()

    def run_until_idle(self) -> TaskResult | None:
        """Harness mode: handle the letters already in the mailbox, without blocking.
        Returns how the task ended if it did, else None."""
        return self._guarded(self._handle_available)

    def poll_source(self) -> TaskResult | None:
        """Harness mode: one poll of a source's reader, then the letters it led to."""
        return self._guarded(self._poll_once)

    def _poll_once(self) -> bool:
        if self._source_active:
            self._poll_source()
        for w in self.writers:
            w.flush()
        return self._handle_available()

    def fire_processing_timers(self, now_ms: int) -> TaskResult | None:
        """Harness mode: fire the processing-time timers due at ``now_ms``."""

        def fire() -> bool:
            self._fire_processing_timers(now_ms)
            for w in self.writers:
                w.flush()
            return self._handle_available()

        return self._guarded(fire)

    def wait_for_snapshots(self) -> None:
        """Harness mode: wait until every snapshot is written and acknowledged."""
        self.snapshots.wait()

    def _run_loop(self) -> bool:
        self._initialize()
        while not self._exit:
            self._step()
        return True

    def _handle_available(self) -> bool:
        while not self._exit:
            letter = self.mailbox.take(0, self.barriers.blocked)
            if letter is None:
                return False
            self._handle(letter)
        return True

    def _guarded(self, body: Callable[[], bool]) -> TaskResult | None:
        try:
            if not body():
                return None
            self._close_and_leave()
            result = TaskResult(TaskState.FINISHED)
        except _Cancelled:
            self._close_quietly()
            self.life.ended(TaskState.CANCELED)
            result = TaskResult(TaskState.CANCELED)
        except BaseException as exc:  # the task reports every failure; the job master decides
            self._close_quietly()
            self.life.ended(TaskState.FAILED)
            text = str(exc) if isinstance(exc, WeirError) else "".join(traceback.format_exception(exc))
            result = TaskResult(TaskState.FAILED, exc, text)
        self.mailbox.close()
        self.snapshots.shutdown(abandon=result.state is not TaskState.FINISHED)
        return result

    def _step(self) -> None:
        timer_wait_s = self._fire_processing_timers()
        letter = self.mailbox.take(0, self.barriers.blocked)
        if letter is not None:
            self._handle(letter)
            for w in self.writers:
                w.flush_if_due()
            return
        wait_s: float | None = None
        if self._source_active:
            wait_s = self._poll_source()
            if wait_s == 0:
                for w in self.writers:
                    w.flush_if_due()
                return
        # About to wait: buffers go out when due, not at every pause (a source
        # pausing between records would send one delivery per record). The wait
        # ends when the oldest buffered record is due.
        for w in self.writers:
            due_in = w.flush_if_due()
            if due_in is not None:
                wait_s = due_in if wait_s is None else min(wait_s, due_in)
        if timer_wait_s is not None:
            wait_s = timer_wait_s if wait_s is None else min(wait_s, timer_wait_s)
        letter = self.mailbox.take(wait_s, self.barriers.blocked)
        if letter is not None:
            self._handle(letter)

    def _fire_processing_timers(self, now_ms: int | None = None) -> float | None:
        """Fire the processing-time timers that are due (only while RUNNING);
        seconds until the next one."""
        if not self.life.fires_processing_timers:
            return None
        wait_s = None
        for op in self.operators:
            next_ms = op.next_processing_timer()
            if next_ms is None:
                continue
            now_ms = int(time.time() * 1000) if now_ms is None else now_ms
            if next_ms <= now_ms:
                op.on_processing_time(now_ms)
                next_ms = op.next_processing_timer()
                if next_ms is None:
                    continue
            wait = max(0.0, (next_ms - now_ms) / 1000)
            wait_s = wait if wait_s is None else min(wait_s, wait)
        return wait_s

    def _poll_source(self) -> float:
        head = self.head
        assert isinstance(head, SourceOperator)
        result = head.poll(self.deployment.transport.batch_size)
        if result.records:
            head.records_in += len(result.records)
            self._saw_records()
        if result.end:
            self._source_active = False
            head.end_of_input()
            self._end_input(drain=True)
            return 0
        return 0 if result.records else max(result.wait_s, 0.0005)

    def _initialize(self) -> None:
        """Restore, then open the chain last to first. An operator restored fully
        finished is not opened; when the head is one, the chain's input is over,
        so the task finishes the rest of the chain and starts FINISHED."""
        d = self.deployment
        self._never_opened = frozenset(
            op.uid for op in self.operators if d.restore.get(op.uid, OperatorRestore([])).fully_finished
        )
        self._finished_ops = set(self._never_opened)
        started = time.perf_counter()
        restored = _read_restored_state(self.deployment)
        for op in self.operators:
            op.initialize_state(restored.get(op.uid, RestoredState()))
        self.restore_s = time.perf_counter() - started
        for op in reversed(self.operators):
            if op.uid not in self._never_opened:
                op.open()
        if self.head.uid in self._finished_ops:
            self._source_active = False
            self.input.refuse_records()
            self._end_input(drain=True)

    def _opened(self) -> list[StreamOperator]:
        """The chain but the operators restored fully finished: only these are
        snapshotted, notified and closed, since the others were never opened."""
        return [op for op in self.operators if op.uid not in self._never_opened]

    # ------------------------------------------------------------------ letters
    def _handle(self, letter: TaskLetter | DataLetter) -> None:
        if type(letter) is DataLetter:
            self._on_delivery(letter.channel, decode_delivery(letter.payload, letter.channel, self.deployment))
        elif isinstance(letter, TriggerCheckpoint):
            if letter.stop_drain is not None:
                self._stop_source(letter.stop_drain)
            self._on_trigger(letter.barrier)
        elif isinstance(letter, NotifyCheckpointComplete):
            self._on_complete(letter.checkpoint_id)
        elif isinstance(letter, OperatorEvent):
            op = next(op for op in self.operators if op.uid == letter.operator_uid)
            op.handle_operator_event(letter.event)
            self.ports.acknowledge_operator_event(letter.operator_uid, letter.event_id)
        elif isinstance(letter, NotifyCheckpointAborted):
            for op in self._opened():
                op.notify_checkpoint_aborted(letter.checkpoint_id)
                if op.keyed_backend is not None:
                    op.keyed_backend.checkpoint_aborted(letter.checkpoint_id)
        elif isinstance(letter, Cancel):
            raise _Cancelled()
        else:
            raise TypeError(f"unknown letter {letter!r}")

    def _on_delivery(self, channel: int, messages: list[Any]) -> None:
        for m in messages:
            if type(m) is list:
                self.input.records(channel, m)
                self._saw_records()
            elif type(m) is Timestamped:
                self.input.records(channel, m.records, m.timestamps)
                self._saw_records()
            elif isinstance(m, CheckpointBarrier):
                self._apply(self.barriers.on_barrier(channel, m))
                if self.barriers.blocked:
                    faults.point("task-aligning")
            elif isinstance(m, Watermark):
                self.input.watermark(channel, m.timestamp)
            elif isinstance(m, WatermarkStatus):
                self.input.watermark_status(channel, m.idle)
            elif isinstance(m, EndOfData):
                if self.input.end_of_data(channel, m.drain, self.life.input_ended):
                    self._end_input(drain=self.input.drain)
            elif isinstance(m, EndOfPartition):
                self._apply(self.barriers.on_end_of_partition(channel))
                if not self.barriers.live_channels:
                    if self._deferred_trigger is not None:
                        barrier, self._deferred_trigger = self._deferred_trigger, None
                        self._checkpoint(barrier)
                    self._maybe_exit()
            elif isinstance(m, CancelCheckpointMarker):
                self._apply(self.barriers.on_cancel(m.checkpoint_id))
            else:
                raise TypeError(f"unknown message on channel {channel}: {m!r}")

    def _apply(self, actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, Snapshot):
                self._checkpoint(a.barrier, a.alignment_ms)
            elif isinstance(a, Abort):
                for w in self.writers:
                    w.broadcast_event(CancelCheckpointMarker(a.checkpoint_id))
                self.ports.decline_checkpoint(a.checkpoint_id, a.reason, "")

    def _stop_source(self, drain: bool) -> None:
        """Stop-with-savepoint reached this source: stop reading; with drain, end the
        input as if it ran out (MAX_WATERMARK, finish), else only EndOfData(drain=False)."""
        if not self._source_active:
            return
        self._source_active = False
        if drain:
            assert isinstance(self.head, SourceOperator)
            self.head.end_of_input()
        self._end_input(drain)

    def _end_input(self, drain: bool) -> None:
        """End of all input (DRAINING), or a stop without drain (SUSPENDING, where
        nothing is finished or flushed). Draining quiesces the timers, then finishes
        the chain first to last: each operator ``end_input`` (a non-source head had
        it as each of its inputs ended), then ``finish()``. Then EndOfData goes
        downstream and the task is FINISHED: no operator may emit from here on."""
        self.life.end_input(drain)
        faults.point("task-finishing")
        if drain:
            for n, op in enumerate(self.operators):
                if op.uid in self._finished_ops:
                    continue
                op.quiesce_timers()
                if n > 0 or self.is_source:
                    op.end_input(0)
                op.finish()
                self._finished_ops.add(op.uid)
        for op in self.operators:
            op.output = _RefusingOutput(op.name, "after the end of its input")
        for w in self.writers:
            w.broadcast_event(EndOfData(drain))
        self.life.to(Phase.FINISHED)
        self.ports.report_end_of_input()

    def _on_trigger(self, barrier: CheckpointBarrier) -> None:
        """Triggered directly: a source, or a task whose producers all exited. Their
        last deliveries may still be in the mailbox behind this control letter, so
        the snapshot waits until every channel's EndOfPartition is in."""
        if self.is_source or not self.barriers.live_channels:
            self._checkpoint(barrier)
            return
        older = self._deferred_trigger
        self._deferred_trigger = barrier
        if older is not None:
            self.ports.decline_checkpoint(older.checkpoint_id, CheckpointFailureReason.DECLINED_SUBSUMED, "")

    def _checkpoint(self, barrier: CheckpointBarrier, alignment_ms: int = 0) -> None:
        """Snapshot the chain (``alignment_ms``: how long its inputs' barriers took to
        align, reported with the acknowledgement). An operator restored fully finished
        was never opened, so it is not asked: its snapshot only says it stays finished
        (FLIP-147)."""
        cid = barrier.checkpoint_id
        base = self.snapshots.base_for(barrier)
        snapshots = {uid: OperatorSnapshot(finished_on_restore=True) for uid in self._never_opened}
        for op in self._opened():
            if op.keyed_backend is not None:
                op.keyed_backend.incremental_base = base
            try:
                snapshots[op.uid] = op.snapshot_state(cid)
            except Exception as exc:
                error = exc if isinstance(exc, WeirError) else op.fail("snapshot_state()", exc)
                self.ports.decline_checkpoint(cid, CheckpointFailureReason.DECLINED_SNAPSHOT_FAILED, str(error))
                raise error from exc
        for uid in self._finished_ops:
            snapshots[uid].finished = True
        self.life.on_snapshot(cid)
        for w in self.writers:
            w.broadcast_event(barrier)
        payload = pickle_state(snapshots, self.deployment.name)
        delta = any(isinstance(s.keyed, KeyedSnapshot) and s.keyed.delta for s in snapshots.values())
        uploads = [u for op in self._opened() if op.keyed_backend is not None for u in op.keyed_backend.take_uploads()]
        self.snapshots.submit(
            barrier,
            payload,
            {uid: s.summary() for uid, s in snapshots.items()},
            base if delta else None,
            uploads,
            alignment_ms,
        )

    def _on_complete(self, checkpoint_id: int) -> None:
        faults.point("task-committing")
        for op in self._opened():
            if op.keyed_backend is not None:
                op.keyed_backend.checkpoint_completed(checkpoint_id)
            op.notify_checkpoint_complete(checkpoint_id)
        self.life.on_complete(checkpoint_id)
        self._maybe_exit()

    def _maybe_exit(self) -> None:
        """The exit gate (see ``weir.runtime.lifecycle``)."""
        self._exit = self.life.may_exit(bool(self.barriers.live_channels))

    # ------------------------------------------------------------------ the end
    def _close_and_leave(self) -> None:
        """The exit gate passed. Every producer exited and the final checkpoint
        completed, so downstream has processed our EndOfData (it acknowledged a
        barrier that travelled behind it): close, then EndOfPartition."""
        self.ports.drain_outputs()
        self._close_operators()
        for w in self.writers:
            w.broadcast_event(EndOfPartition())
        self.ports.drain_outputs()
        self.life.to(Phase.ENDED)
        self.life.ended(TaskState.FINISHED)

    def _close_operators(self) -> None:
        """CLOSING: ``close()`` of every operator but those restored fully finished,
        first to last; after a failure or a cancel this is all that runs. Then
        every keyed backend closes, each whatever the others do: also those of
        operators never opened (restored fully finished, or a failure before
        open), whose RocksDB folders would otherwise stay for the process's life."""
        self.life.to(Phase.CLOSING)
        with contextlib.ExitStack() as backends:
            for op in self.operators:
                if op.keyed_backend is not None:
                    backends.callback(op.keyed_backend.close)
            for op in self._opened():
                op.output = _RefusingOutput(op.name, "in close()")  # close() releases resources; it may not emit
                op.close()

    def _close_quietly(self) -> None:
        """After a failure or a cancel (a failing close() may have left CLOSING begun)."""
        try:
            if self.life.phase is not Phase.CLOSING:
                self._close_operators()
        except Exception:
            pass  # the failure that brought us here is the one to report
        if self.life.phase is Phase.CLOSING:
            self.life.to(Phase.ENDED)

    def put_letter(self, letter: TaskLetter) -> None:
        self.mailbox.put_control(letter)


class ChainInput:
    """What the chain's head receives from the task's input channels: records (a
    two-input head's second input goes to its ``process_batch2``), watermarks and
    idleness through the valve, and the end of each input."""

    def __init__(self, d: TaskDeployment, head: StreamOperator) -> None:
        self.head = head
        self.valve = WatermarkValve(len(d.input_channels))
        self._input_of_channel = [_input_index(d, edge_id) for edge_id, _ in d.input_channels]
        self._process_of_channel = [
            head.process_batch2 if i == 1 else head.process_batch  # type: ignore[attr-defined]
            for i in self._input_of_channel
        ]
        self._ended: set[int] = set()  # channels whose EndOfData came
        self.drain = True  # every EndOfData so far drained

    def records(self, channel: int, records: list[Any], timestamps: list[int] | None = None) -> None:
        self.head.records_in += len(records)
        if timestamps is None:
            self._process_of_channel[channel](records)
        else:
            self._process_of_channel[channel](records, timestamps)

    def refuse_records(self) -> None:
        """The head was restored fully finished: a record for it is a bug, named."""

        def refuse(records: list[Any], timestamps: list[int] | None = None) -> None:
            raise OperatorContractError(
                f"operator '{self.head.name}' had fully finished before the restore, yet got {len(records)} records"
            )

        self._process_of_channel = [refuse] * len(self._process_of_channel)

    def watermark(self, channel: int, timestamp: int) -> None:
        self._to_head(self.valve.on_watermark(channel, timestamp))

    def watermark_status(self, channel: int, idle: bool) -> None:
        self._to_head(self.valve.on_status(channel, idle))

    def end_of_data(self, channel: int, drain: bool, input_ended: bool) -> bool:
        """A channel's EndOfData; an input whose every channel ended is ended at
        the head. True: every channel has ended (the task ends its input, with
        :attr:`drain`). ``input_ended``: the head was restored fully finished."""
        self._ended.add(channel)
        if input_ended:
            return False  # nothing more to end
        self._to_head(self.valve.on_end_of_data(channel, drain))
        self.drain = self.drain and drain
        index = self._input_of_channel[channel]
        if self.drain and all(ch in self._ended for ch, i in enumerate(self._input_of_channel) if i == index):
            self.head.end_input(index)
        return len(self._ended) == len(self._input_of_channel)

    def _to_head(self, events: list[Watermark | WatermarkStatus]) -> None:
        for e in events:
            if isinstance(e, Watermark):
                self.head.process_watermark(e)
            else:
                self.head.process_watermark_status(e)


def _created(spec: OperatorSpec) -> StreamOperator:
    """The operator ``spec`` makes (the graph types it loosely, not to import the operators)."""
    operator = spec.create()
    assert isinstance(operator, StreamOperator), f"{spec.name}: {operator!r} is no StreamOperator"
    return operator


def _input_index(d: TaskDeployment, edge_id: int) -> int:
    for e in d.vertex.inputs:
        if e.edge_id == edge_id:
            return e.input_index
    raise KeyError(edge_id)


def _wire(
    d: TaskDeployment, operators: list[StreamOperator], ports: TaskPorts, clock: Callable[[], float]
) -> list[RecordWriter]:
    """Set the chain's operators up, each emitting into the next one and the last
    into a writer per output edge (side outputs into theirs); returns the writers."""
    writers = [
        RecordWriter(
            d.vertex.operators[-1].name,
            edge.partitioner(),
            1 if edge.pointwise else edge.target_parallelism,
            (lambda out: lambda ch, seq, payload: ports.send(out, ch, seq, payload))(i),
            d.transport.batch_size,
            d.transport.buffer_timeout_ms / 1000.0,
            clock,
        )
        for i, edge in enumerate(d.vertex.outputs)
    ]
    ctx = OperatorContext(
        d.job_name,
        d.vertex.name,
        d.subtask,
        d.vertex.parallelism,
        d.vertex.max_parallelism,
        d.attempt_id,
        ports.send_operator_event,
        d.runtime_mode,
        d.run_id,
        d.state_backend,
    )
    edges = d.vertex.outputs
    main = [w for w, e in zip(writers, edges) if e.side_output is None]
    for spec, op, nxt in zip(d.vertex.operators, operators, operators[1:] + [None]):
        side: dict[str, list[RecordWriter]] = {}
        for w, e in zip(writers, edges):
            if e.side_output is not None and e.source_operator == op.uid:
                side.setdefault(e.side_output, []).append(w)
        out: Output = ChainedOutput(nxt, side) if nxt is not None else _WriterOutput(main, side)
        op.setup(ctx, TypedOutput(out, spec.record_types, op.name) if spec.record_types.declared else out)
    return writers


def _read_restored_state(d: TaskDeployment) -> dict[str, RestoredState]:
    """Each operator's share of the state it restores, read from the snapshots'
    files (each read once; a chain of files merged, see ``weir.runtime.incremental``).
    An operator with keyed state only reads no file of an old subtask whose key
    groups are all another subtask's now."""
    files: dict[str, dict[str, OperatorSnapshot]] = {}
    out: dict[str, RestoredState] = {}
    mine = KeyGroupRange.for_subtask(d.vertex.max_parallelism, d.vertex.parallelism, d.subtask)
    for uid, where in d.restore.items():
        snaps = []
        for i, h in enumerate(where.handles):
            if h is None:
                snaps.append(OperatorSnapshot(finished=True))  # that subtask had finished and exited
                continue
            held = KeyGroupRange.for_subtask(d.vertex.max_parallelism, len(where.handles), i)
            if where.keyed_only and not held.overlaps(mine):
                snaps.append(OperatorSnapshot())
                continue
            for link in h.chain:
                if link.uri not in files:
                    files[link.uri] = read_state(link)
            chain = [files[link.uri].get(uid, OperatorSnapshot()) for link in h.chain]
            keyed = [located(s.keyed, link.files) for s, link in zip(chain, h.chain) if s.keyed]
            snaps.append(replace(chain[-1], keyed=merged(keyed) if keyed else None))
        restored = RestoredState.from_snapshots(snaps, d.subtask, d.vertex.parallelism, d.vertex.max_parallelism)
        out[uid] = replace(restored, checkpoint_id=where.checkpoint_id)
    return out

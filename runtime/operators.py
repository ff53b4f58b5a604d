"""Stream operators and their lifecycle (Flink's task lifecycle with FLIP-147's
finish/close split).

Lifecycle of one operator in one subtask, all on the task's loop thread::

    setup -> initialize_state(restored) -> open            (a chain opens last to first)
    -> process_batch / process_watermark / snapshot_state / notify_checkpoint_*
    -> end_input(input) -> finish()                        (a chain finishes first to last)
    -> close()                                             (always; alone on failure or cancel)

``finish()`` may emit (flush buffers); ``close()`` releases resources and must not
emit. Operators work on whole batches: a batch is a ``list`` of records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from runtime.errors import KeySelectionError, UserFunctionError
from runtime.events import Watermark, WatermarkStatus
from runtime.functions import Function, KeyedProcessFunction, ProcessFunction, RuntimeContext
from runtime.keygroups import KeyGroupRange
from runtime.timers import InternalTimerService, TimeDomain, TimerService
from runtime.state import (
    KeyedStateBackend,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    OperatorSnapshot,
    OperatorStateStore,
    ValueState,
    ValueStateDescriptor,
    keyed_list_state,
    redistribute_lists,
    union_lists,
)


class Output:
    """Where an operator's records go: the next operator of the chain or the task's
    writers. ``timestamps``, when given, is the event time of each record. Side
    outputs go to the writers of the edges that read that tag (none: dropped)."""

    side: dict[str, list[Any]] = {}

    def collect_side(self, tag: str, records: list[Any], timestamps: list[int] | None = None) -> None:
        for writer in self.side.get(tag, ()):
            writer.emit(records, timestamps)

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        raise NotImplementedError

    def emit_watermark(self, watermark: Watermark) -> None:
        raise NotImplementedError

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        raise NotImplementedError


class ChainedOutput(Output):
    def __init__(self, downstream: "StreamOperator", side: dict[str, list[Any]] | None = None) -> None:
        self._op = downstream
        self.side = side or {}

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        if records:
            self._op.records_in += len(records)
            if timestamps is None:
                self._op.process_batch(records)
            else:
                self._op.process_batch(records, timestamps)

    def emit_watermark(self, watermark: Watermark) -> None:
        self._op.process_watermark(watermark)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._op.process_watermark_status(status)


@dataclass
class OperatorContext:
    """Where an operator subtask runs."""

    job_name: str
    task_name: str
    subtask: int
    parallelism: int
    max_parallelism: int
    attempt_id: str
    # Sends an event from the operator (by uid) to its coordinator on the job master.
    send_operator_event: Callable[[str, Any], None] = field(default=lambda uid, event: None, repr=False)

    @property
    def key_groups(self) -> KeyGroupRange:
        return KeyGroupRange.for_subtask(self.max_parallelism, self.parallelism, self.subtask)


@dataclass
class RestoredState:
    """The state an operator subtask starts from, already redistributed."""

    keyed: list[dict[int, dict[str, dict[Any, Any]]]] = field(default_factory=list)
    lists: dict[str, list[Any]] = field(default_factory=dict)
    union_lists: dict[str, list[Any]] = field(default_factory=dict)
    is_restored: bool = False

    @staticmethod
    def from_snapshots(snapshots: list[OperatorSnapshot], subtask: int, parallelism: int) -> "RestoredState":
        """What subtask ``subtask`` of ``parallelism`` gets from the snapshots of all
        subtasks of the previous run: the key groups in its range (each subtask's
        backend filters them), an even share of list state, all of union list state."""
        return RestoredState(
            keyed=[s.keyed for s in snapshots],
            lists=redistribute_lists([s.lists for s in snapshots], subtask, parallelism),
            union_lists=union_lists([s.union_lists for s in snapshots]),
            is_restored=True,
        )


class StreamOperator:
    """Base operator. Subclasses override what they need; the defaults pass
    watermarks on and keep no state."""

    keyed = False

    def __init__(self, name: str, uid: str) -> None:
        self.name = name
        self.uid = uid
        self.output: Output
        self.ctx: OperatorContext
        self.records_in = 0
        self.operator_state = OperatorStateStore()
        self.keyed_backend: KeyedStateBackend | None = None

    def setup(self, ctx: OperatorContext, output: Output) -> None:
        self.ctx = ctx
        self.output = output

    def initialize_state(self, restored: RestoredState) -> None:
        self.operator_state.lists = {k: list(v) for k, v in restored.lists.items()}
        self.operator_state.union_lists = {k: list(v) for k, v in restored.union_lists.items()}
        if self.keyed:
            self.keyed_backend = KeyedStateBackend(self.ctx.max_parallelism, self.ctx.key_groups)
            self.keyed_backend.restore(restored.keyed)

    def open(self) -> None:
        pass

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        """A batch of records, with their event timestamps if the stream has them."""
        raise NotImplementedError

    def process_watermark(self, watermark: Watermark) -> None:
        self.output.emit_watermark(watermark)

    def process_watermark_status(self, status: WatermarkStatus) -> None:
        self.output.emit_watermark_status(status)

    def next_processing_timer(self) -> int | None:
        """Wall-clock milliseconds of this operator's next processing-time timer."""
        return None

    def on_processing_time(self, now_ms: int) -> None:
        """Fire the processing-time timers due at ``now_ms``."""

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(
            keyed=self.keyed_backend.snapshot() if self.keyed_backend is not None else {},
            lists={k: list(v) for k, v in self.operator_state.lists.items()},
            union_lists={k: list(v) for k, v in self.operator_state.union_lists.items()},
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass

    def handle_operator_event(self, event: Any) -> None:
        """An event from this operator's coordinator."""
        raise TypeError(f"operator '{self.name}' has no coordinator, yet got the event {event!r}")

    def end_input(self, input_index: int) -> None:
        pass

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass

    def fail(self, function: str, exc: Exception, record: Any = None, has_record: bool = False) -> UserFunctionError:
        return UserFunctionError(self.name, function, exc, record, has_record)


class _Context(RuntimeContext):
    def __init__(self, op: StreamOperator) -> None:
        self._op = op

    def get_index_of_this_subtask(self) -> int:
        return self._op.ctx.subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self._op.ctx.parallelism

    def get_task_name(self) -> str:
        return self._op.ctx.task_name

    def _backend(self) -> KeyedStateBackend:
        if self._op.keyed_backend is None:
            raise RuntimeError(f"operator '{self._op.name}' is not keyed: use key_by() before keyed state")
        return self._op.keyed_backend

    def get_state(self, descriptor: ValueStateDescriptor[Any]) -> ValueState[Any]:
        return ValueState(self._backend(), descriptor)

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> ListState[Any]:
        if self._op.keyed_backend is None:
            return self._op.operator_state.get_list_state(descriptor.name)
        return keyed_list_state(self._backend(), descriptor.name)

    def get_map_state(self, descriptor: MapStateDescriptor[Any, Any]) -> MapState[Any, Any]:
        return MapState(self._backend(), descriptor)


class UdfOperator(StreamOperator):
    """An operator around one user function; runs its open/close hooks."""

    def __init__(self, name: str, uid: str, function: Any, call: Callable[..., Any]) -> None:
        super().__init__(name, uid)
        self.function = function
        self.call = call

    def open(self) -> None:
        if isinstance(self.function, Function):
            try:
                self.function.open(_Context(self))
            except Exception as exc:
                raise self.fail("open()", exc) from exc

    def close(self) -> None:
        if isinstance(self.function, Function):
            self.function.close()


class MapOperator(UdfOperator):
    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        f = self.call
        out: list[Any] = []
        append = out.append
        r = None
        try:
            for r in records:
                append(f(r))
        except Exception as exc:
            raise self.fail("map function", exc, r, True) from exc
        self.output.collect(out, timestamps)


class FlatMapOperator(UdfOperator):
    """Emits every record of the iterable the function returns (None: nothing);
    each keeps the timestamp of the record it came from."""

    role = "flat_map function"
    current_timestamp: int | None = None

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        f = self.call
        out: list[Any] = []
        extend = out.extend
        ts_out: list[int] | None = None if timestamps is None else []
        r = None
        try:
            for i, r in enumerate(records):
                if ts_out is not None:
                    self.current_timestamp = timestamps[i]  # type: ignore[index]
                produced = f(r)
                if produced is not None:
                    before = len(out)
                    extend(produced)
                    if ts_out is not None:
                        ts_out.extend([timestamps[i]] * (len(out) - before))  # type: ignore[index]
        except Exception as exc:
            raise self.fail(self.role, exc, r, True) from exc
        self.output.collect(out, ts_out)


class FilterOperator(UdfOperator):
    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        f = self.call
        keep: list[Any] = []
        append = keep.append
        r = None
        try:
            for r in records:
                append(f(r))
        except Exception as exc:
            raise self.fail("filter function", exc, r, True) from exc
        self.output.collect(
            [r for r, k in zip(records, keep) if k],
            None if timestamps is None else [t for t, k in zip(timestamps, keep) if k],
        )


class ProcessOperator(FlatMapOperator):
    """A :class:`ProcessFunction`: ``process_element(value, ctx)`` yields what to emit;
    ``ctx.timestamp()`` is the record's event time (None without one)."""

    role = "process function"

    def __init__(self, name: str, uid: str, function: Any, call: Callable[..., Any]) -> None:
        ctx = ProcessFunction.Context(lambda: self.current_timestamp)
        super().__init__(name, uid, function, lambda r: call(r, ctx))


class _KeyedUdfOperator(UdfOperator):
    keyed = True

    def __init__(self, name: str, uid: str, function: Any, call: Callable[..., Any], key_selector: Callable[[Any], Any]) -> None:
        super().__init__(name, uid, function, call)
        self.key_selector = key_selector

    def _key_failed(self, exc: Exception, record: Any) -> KeySelectionError:
        return KeySelectionError(self.name, "key selector", exc, record, True)


class KeyedReduceOperator(_KeyedUdfOperator):
    """Running reduce per key: emits the new aggregate for every record."""

    STATE = "_reduce"

    def open(self) -> None:
        super().open()
        assert self.keyed_backend is not None
        self._values = self.keyed_backend.table(self.STATE)

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        values = self._values
        get = values.get
        key_of = self.key_selector
        f = self.call
        missing = _MISSING
        out: list[Any] = []
        append = out.append
        for r in records:
            try:
                k = key_of(r)
                prev = get(k, missing)
            except Exception as exc:
                raise self._key_failed(exc, r) from exc
            if prev is not missing:
                try:
                    r = f(prev, r)
                except Exception as exc:
                    raise self.fail("reduce function", exc, r, True) from exc
            values[k] = r
            append(r)
        self.output.collect(out, timestamps)


_MISSING = object()


class TimerOperator(_KeyedUdfOperator):
    """A keyed operator with timers (kept as keyed state): watermarks fire its
    event-time timers, the task's clock its processing-time ones."""

    timers: InternalTimerService

    def open(self) -> None:
        assert self.keyed_backend is not None
        self.timers = InternalTimerService(self.keyed_backend)
        super().open()

    def process_watermark(self, watermark: Watermark) -> None:
        self.timers.watermark = watermark.timestamp
        self._fire(TimeDomain.EVENT_TIME, watermark.timestamp)
        self.output.emit_watermark(watermark)

    def next_processing_timer(self) -> int | None:
        return self.timers.next_time(TimeDomain.PROCESSING_TIME)

    def on_processing_time(self, now_ms: int) -> None:
        self._fire(TimeDomain.PROCESSING_TIME, now_ms)

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        raise NotImplementedError


class KeyedProcessOperator(TimerOperator):
    """Runs a :class:`KeyedProcessFunction`, with event- and processing-time timers
    kept as keyed state."""

    def open(self) -> None:
        super().open()
        self._ctx = KeyedProcessFunction.Context(TimerService(self.timers, now_ms))
        self._on_timer = getattr(self.function, "on_timer", None)

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        backend = self.keyed_backend
        assert backend is not None
        key_of = self.key_selector
        f = self.call
        ctx = self._ctx
        out: list[Any] = []
        ts_out: list[int] | None = None if timestamps is None else []
        for i, r in enumerate(records):
            try:
                k = key_of(r)
                hash(k)
            except Exception as exc:
                raise self._key_failed(exc, r) from exc
            backend.current_key = ctx._key = k
            t = ctx._timestamp = None if timestamps is None else timestamps[i]
            try:
                produced = f(r, ctx)
                if produced is not None:
                    before = len(out)
                    out.extend(produced)
                    if ts_out is not None:
                        ts_out.extend([t] * (len(out) - before))  # type: ignore[list-item]
            except Exception as exc:
                raise self.fail("process function", exc, r, True) from exc
        self.output.collect(out, ts_out)

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        if self._on_timer is None:
            return
        backend = self.keyed_backend
        assert backend is not None
        ctx = self._ctx
        ctx._domain = domain
        out: list[Any] = []
        ts_out: list[int] = []
        for ts, key, _ in self.timers.due(domain, time_ms):
            backend.current_key = ctx._key = key
            ctx._timestamp = ts if domain is TimeDomain.EVENT_TIME else None
            try:
                produced = self._on_timer(ts, ctx)
            except Exception as exc:
                raise self.fail("on_timer", exc) from exc
            if produced is not None:
                before = len(out)
                out.extend(produced)
                ts_out.extend([ts] * (len(out) - before))
        ctx._domain = None
        if out:
            self.output.collect(out, ts_out if domain is TimeDomain.EVENT_TIME else None)


def now_ms() -> int:
    """Processing time: wall-clock milliseconds."""
    return int(time.time() * 1000)

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
from itertools import compress, repeat
from typing import Any, Callable, Iterable, NamedTuple

from weir.runtime.config import RuntimeExecutionMode
from weir.runtime.errors import InvalidConfigurationError, KeySelectionError, RecordTypeError, UserFunctionError
from weir.runtime.events import MAX_WATERMARK, MIN_WATERMARK, Watermark, WatermarkStatus
from weir.runtime.functions import (
    BroadcastProcessFunction,
    Function,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeContext,
)
from weir.runtime.incremental import Keyed
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.metrics import MetricGroup
from weir.runtime.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    KeyedStateBackend,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    OperatorSnapshot,
    OperatorStateStore,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
    broadcast_copy,
    keyed_state,
    redistribute_lists,
    union_lists,
)
from weir.runtime.state_backend import HashMapStateBackend, StateBackend
from weir.runtime.timers import InternalTimerService, TimeDomain, TimerService
from weir.runtime.typeinfo import RecordTypes, TypeInformation


class Output:
    """Where an operator's records go: the next operator of the chain or the task's
    writers. ``timestamps``, when given, is the event time of each record. Side
    outputs (by tag id) go to the writers of the edges that read that tag (none:
    dropped); they never chain."""

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


class TypedOutput(Output):
    """The output of an operator whose records have declared types (PyFlink's
    ``output_type=``, a source's ``type_info=``, the type of an ``OutputTag`` a
    side output is read with): each record is checked and converted to its
    type on its way out, as PyFlink's serializers do between operators. A
    record that does not fit fails the task with :class:`RecordTypeError`."""

    def __init__(self, inner: Output, types: RecordTypes, operator: str) -> None:
        self._inner = inner
        self._types = types
        self._operator = operator

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._inner.collect(self._convert(self._types.main, records), timestamps)

    def collect_side(self, tag: str, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._inner.collect_side(tag, self._convert(self._types.sides.get(tag), records), timestamps)

    def emit_watermark(self, watermark: Watermark) -> None:
        self._inner.emit_watermark(watermark)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._inner.emit_watermark_status(status)

    def _convert(self, type_info: TypeInformation | None, records: list[Any]) -> list[Any]:
        if type_info is None:
            return records
        convert, at_source = type_info.convert, self._types.at_source
        out: list[Any] = []
        append = out.append
        r = None
        try:
            for r in records:
                append(convert(r, at_source))
        except TypeError as exc:
            raise RecordTypeError(self._operator, type_info, r, exc) from exc
        return out


class Stamped(NamedTuple):
    """Records a function returns each with its own event time, in place of the
    input record's (an interval join's results carry the later of two records')."""

    records: list[Any]
    timestamps: list[int]


class Emitted:
    """What one call of an operator produced: its main records and, per side
    output, the records sent there (``yield tag, value`` with an
    :class:`OutputTag`), each with its event time when the stream has one
    (``timed``). Collected, then :meth:`flush` ed to the operator's output."""

    __slots__ = ("records", "timestamps", "side")

    def __init__(self, timed: bool) -> None:
        self.records: list[Any] = []
        self.timestamps: list[int | None] | None = [] if timed else None
        self.side: dict[str, tuple[list[Any], list[int | None] | None]] = {}

    def add(self, produced: Iterable[Any] | None, timestamp: int | None) -> None:
        """What a user function returned or yielded."""
        if produced is None:
            return
        if type(produced) is Stamped:
            self.records.extend(produced.records)
            if self.timestamps is not None:
                self.timestamps.extend(produced.timestamps)
            return
        records = self.records
        append = records.append
        before = len(records)
        tag = OutputTag  # by exact type: this loop runs per record (a keyed process op at 1.3M/s, 1.6M/s before)
        for item in produced:
            if type(item) is tuple:
                if len(item) == 2 and type(item[0]) is tag:
                    self.to_side(item[0].tag_id, item[1], timestamp)
                    continue
            elif type(item) is tag:
                raise TypeError(
                    f"yielded the OutputTag {item.tag_id!r} alone; send a record to it with `yield tag, value`"
                )
            append(item)
        if self.timestamps is not None:
            self.timestamps.extend([timestamp] * (len(records) - before))

    def to_side(self, tag_id: str, record: Any, timestamp: int | None) -> None:
        side = self.side.get(tag_id)
        if side is None:
            side = self.side[tag_id] = ([], None if self.timestamps is None else [])
        side[0].append(record)
        if side[1] is not None:
            side[1].append(timestamp)

    def flush(self, output: "Output") -> None:
        if self.records:
            output.collect(self.records, self.timestamps)  # type: ignore[arg-type]
        for tag_id, (records, timestamps) in self.side.items():
            output.collect_side(tag_id, records, timestamps)  # type: ignore[arg-type]


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
    runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING  # the job's, resolved: never AUTOMATIC
    # The submission this subtask runs for (the same across its failovers and
    # rescales): a sink names what it leaves behind with it, so that its cleanup
    # never touches what another job, or another run of this one, wrote.
    run_id: str = ""
    state_backend: StateBackend = field(default_factory=HashMapStateBackend)  # makes its keyed state backend

    @property
    def key_groups(self) -> KeyGroupRange:
        return KeyGroupRange.for_subtask(self.max_parallelism, self.parallelism, self.subtask)

    @property
    def batch(self) -> bool:
        """The job runs in BATCH mode (see :class:`RuntimeExecutionMode`)."""
        return self.runtime_mode is RuntimeExecutionMode.BATCH


@dataclass
class RestoredState:
    """The state an operator subtask starts from, already redistributed."""

    keyed: list[tuple[KeyGroupRange, Keyed]] = field(default_factory=list)  # each old subtask's, with its key groups
    lists: dict[str, list[Any]] = field(default_factory=dict)
    union_lists: dict[str, list[Any]] = field(default_factory=dict)
    broadcast: dict[str, dict[Any, Any]] = field(default_factory=dict)
    is_restored: bool = False
    checkpoint_id: int | None = None  # the checkpoint it comes from (None: a savepoint, or nothing restored)

    @staticmethod
    def from_snapshots(
        snapshots: list[OperatorSnapshot], subtask: int, parallelism: int, max_parallelism: int
    ) -> "RestoredState":
        """What subtask ``subtask`` of ``parallelism`` gets from the snapshots of all
        subtasks of the previous run: the key groups in its range (each subtask's
        backend filters them), an even share of list state, all of union list state,
        one subtask's copy of broadcast state."""
        held = len(snapshots)
        return RestoredState(
            keyed=[
                (KeyGroupRange.for_subtask(max_parallelism, held, i), s.keyed)
                for i, s in enumerate(snapshots)
                if s.keyed
            ],
            lists=redistribute_lists([s.lists for s in snapshots], subtask, parallelism),
            union_lists=union_lists([s.union_lists for s in snapshots]),
            broadcast=broadcast_copy(snapshots, subtask),
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
        self.metrics = MetricGroup()  # its user functions' metrics (get_metrics_group())
        self.operator_state = OperatorStateStore()
        self.keyed_backend: KeyedStateBackend | None = None

    def setup(self, ctx: OperatorContext, output: Output) -> None:
        self.ctx = ctx
        self.output = output

    def initialize_state(self, restored: RestoredState) -> None:
        self.operator_state.lists = {k: list(v) for k, v in restored.lists.items()}
        self.operator_state.union_lists = {k: list(v) for k, v in restored.union_lists.items()}
        self.operator_state.broadcast = restored.broadcast
        if self.keyed:
            ctx = self.ctx
            self.keyed_backend = ctx.state_backend.create_keyed_backend(
                ctx.max_parallelism,
                ctx.key_groups,
                f"{ctx.job_name}-{ctx.task_name}-{ctx.subtask}-{ctx.attempt_id[:12]}",
                self.uid,
                self.name,
            )
            self.keyed_backend.restore(restored.keyed, restored.checkpoint_id)

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

    def quiesce_timers(self) -> None:
        """End of input, before ``end_input``/``finish()``: take no new timers and
        drop the processing-time ones not fired yet (Flink's Task Lifecycle)."""

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(
            keyed=self.keyed_backend.snapshot(checkpoint_id) if self.keyed_backend is not None else None,
            lists={k: list(v) for k, v in self.operator_state.lists.items()},
            union_lists={k: list(v) for k, v in self.operator_state.union_lists.items()},
            broadcast={k: dict(v) for k, v in self.operator_state.broadcast.items()},
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

    def get_metrics_group(self) -> MetricGroup:
        return self._op.metrics

    def _backend(self) -> KeyedStateBackend:
        if self._op.keyed_backend is None:
            raise RuntimeError(f"operator '{self._op.name}' is not keyed: use key_by() before keyed state")
        return self._op.keyed_backend

    def get_state(self, descriptor: ValueStateDescriptor[Any]) -> ValueState[Any]:
        return keyed_state(self._backend(), descriptor)

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> ListState[Any]:
        if self._op.keyed_backend is not None:
            return keyed_state(self._backend(), descriptor)
        return self._op.operator_state.get_list_state(self._operator_state(descriptor))

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> ListState[Any]:
        if self._op.keyed_backend is not None:
            raise RuntimeError(
                f"operator '{self._op.name}' is keyed: union list state is operator state, of non-keyed functions"
            )
        return self._op.operator_state.get_union_list_state(self._operator_state(descriptor))

    def _operator_state(self, descriptor: ListStateDescriptor[Any]) -> str:
        if descriptor.ttl_config is not None:
            raise InvalidConfigurationError(
                f"time to live of state '{descriptor.name}'",
                descriptor.ttl_config,
                f"operator '{self._op.name}' is not keyed, and only keyed state has a time to live: key_by() first",
            )
        return descriptor.name

    def get_map_state(self, descriptor: MapStateDescriptor[Any, Any]) -> MapState[Any, Any]:
        return keyed_state(self._backend(), descriptor)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor[Any]) -> ReducingState[Any]:
        return keyed_state(self._backend(), descriptor)

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState[Any, Any]:
        return keyed_state(self._backend(), descriptor)


class UdfOperator(StreamOperator):
    """An operator around one user function (or a few); runs their open/close hooks."""

    def __init__(self, name: str, uid: str, function: Any, call: Callable[..., Any]) -> None:
        super().__init__(name, uid)
        self.function = function
        self.call = call

    def user_functions(self) -> tuple[Any, ...]:
        return (self.function,)

    def open(self) -> None:
        for function in self.user_functions():
            if isinstance(function, Function):
                try:
                    function.open(_Context(self))
                except Exception as exc:
                    raise self.fail("open()", exc) from exc

    def close(self) -> None:
        for function in self.user_functions():
            if isinstance(function, Function):
                function.close()

    def call_each(self, what: str, records: list[Any]) -> list[Any]:
        """The function's result for every record, the loop run by ``map`` in C; a
        failure names the record it failed on."""
        out: list[Any] = []
        try:
            out.extend(map(self.call, records))
        except Exception as exc:  # CPython's extend keeps what it took before the failure
            raise self.fail(what, exc, records[len(out)], True) from exc
        return out


class MapOperator(UdfOperator):
    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self.output.collect(self.call_each("map function", records), timestamps)


class FlatMapOperator(UdfOperator):
    """Emits every record of the iterable the function returns (None: nothing);
    each keeps the timestamp of the record it came from."""

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        f = self.call
        out: list[Any] = []
        extend = out.extend
        r = None
        ts_out: list[int] | None = None
        try:
            if timestamps is None:
                for r in records:
                    produced = f(r)
                    if produced is not None:
                        extend(produced)
            else:
                ts_out = []
                add, add_all = ts_out.append, ts_out.extend
                n = 0
                for t, r in zip(timestamps, records):
                    produced = f(r)
                    if produced is not None:
                        extend(produced)
                        k = len(out) - n  # most records make one or none: no list per record
                        n += k
                        if k == 1:
                            add(t)
                        elif k:
                            add_all([t] * k)
        except Exception as exc:
            raise self.fail("flat_map function", exc, r, True) from exc
        self.output.collect(out, ts_out)


class FilterOperator(UdfOperator):
    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        keep = self.call_each("filter function", records)
        self.output.collect(
            list(compress(records, keep)), None if timestamps is None else list(compress(timestamps, keep))
        )


class ProcessOperator(UdfOperator):
    """A :class:`ProcessFunction`: ``process_element(value, ctx)`` yields what to emit
    (``tag, value`` to a side output), each with the record's timestamp;
    ``ctx.timestamp()`` is the record's event time (None without one)."""

    def open(self) -> None:
        super().open()
        self._ctx = ProcessFunction.Context()

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._process("process function", self.call, self._ctx, records, timestamps)

    def _process(
        self, role: str, f: Callable[..., Any], ctx: Any, records: list[Any], timestamps: list[int] | None
    ) -> None:
        emitted = Emitted(timestamps is not None)
        r = None
        try:
            for i, r in enumerate(records):
                t = ctx._timestamp = None if timestamps is None else timestamps[i]
                emitted.add(f(r, ctx), t)
        except Exception as exc:
            raise self.fail(role, exc, r, True) from exc
        emitted.flush(self.output)


class TwoInputOperator(StreamOperator):
    """An operator of two inputs (``connect``): the first input's records come to
    ``process_batch``, the second's to ``process_batch2``. The task aligns
    checkpoint barriers across the channels of both and gives it the minimum
    watermark over them; ``end_input(0)`` / ``end_input(1)`` as each input ends."""

    def process_batch2(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        raise NotImplementedError


Calls = tuple[tuple[str, Callable[..., Any]], tuple[str, Callable[..., Any]]]  # per input: (role, f(value, ctx))


class CoProcessOperator(ProcessOperator, TwoInputOperator):
    """A two-input function on non-keyed inputs: CoMap, CoFlatMap and CoProcess
    functions, and a :class:`BroadcastProcessFunction` when ``broadcast`` names
    the states its second (broadcast) input keeps. Each input's call returns
    what to emit, as a process function's does."""

    def __init__(
        self, name: str, uid: str, function: Any, calls: Calls, broadcast: tuple[MapStateDescriptor[Any, Any], ...] = ()
    ) -> None:
        super().__init__(name, uid, function, calls[0][1])
        self.calls = calls
        self.broadcast = broadcast
        self._watermark = MIN_WATERMARK

    def initialize_state(self, restored: RestoredState) -> None:
        super().initialize_state(restored)
        _declare_broadcast(self)

    def open(self) -> None:
        super().open()
        if self.broadcast:
            store, watermark = self.operator_state, lambda: self._watermark
            self._contexts: tuple[Any, Any] = (
                BroadcastProcessFunction.ReadOnlyContext(store, now_ms, watermark),
                BroadcastProcessFunction.Context(store, now_ms, watermark),
            )
        else:
            self._contexts = (self._ctx, self._ctx)

    def process_watermark(self, watermark: Watermark) -> None:
        self._watermark = watermark.timestamp
        super().process_watermark(watermark)

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._process(*self.calls[0], self._contexts[0], records, timestamps)

    def process_batch2(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._process(*self.calls[1], self._contexts[1], records, timestamps)


def _declare_broadcast(op: "CoProcessOperator | KeyedCoProcessOperator") -> None:
    """The broadcast states an operator declared exist from its start (empty unless restored)."""
    for descriptor in op.broadcast:
        op.operator_state.broadcast.setdefault(descriptor.name, {})


class _KeyedUdfOperator(UdfOperator):
    keyed = True

    def __init__(
        self, name: str, uid: str, function: Any, call: Callable[..., Any], key_selector: Callable[[Any], Any]
    ) -> None:
        super().__init__(name, uid, function, call)
        self.key_selector = key_selector

    def _key_failed(self, exc: Exception, record: Any) -> KeySelectionError:
        return KeySelectionError(self.name, "key selector", exc, record, True)

    def _keys(self, records: list[Any], key_of: Callable[[Any], Any]) -> list[Any]:
        """The key of each record, in one loop in C; a key selector that fails names its record."""
        keys: list[Any] = []
        try:
            keys.extend(map(key_of, records))
        except Exception as exc:  # extend kept the keys before the failing record
            raise self._key_failed(exc, records[len(keys)]) from exc
        return keys


class KeyedReduceOperator(_KeyedUdfOperator):
    """Reduce per key, each key's aggregate kept as keyed state. STREAMING: a
    running reduce, emitting the new aggregate for every record. BATCH: not
    rolling, as Flink's: nothing until the end of input, where ``finish()``
    emits each key's final aggregate once (at ``MAX_WATERMARK`` when its input
    had event time, as Flink's batch reduce stamps it)."""

    STATE = "_reduce"

    def open(self) -> None:
        super().open()
        assert self.keyed_backend is not None
        self._values = self.keyed_backend.table(self.STATE)
        self._final_only = self.ctx.batch
        self._timed = False  # BATCH: a batch came with event time

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        values = self._values
        get = values.get
        keys = self._keys(records, self.key_selector)
        self.keyed_backend.read_ahead(keys)  # type: ignore[union-attr]
        f = self.call
        missing = _MISSING
        out: list[Any] = []
        append = out.append
        for k, r in zip(keys, records):
            try:
                prev = get(k, missing)
            except Exception as exc:  # an unhashable key
                raise self._key_failed(exc, r) from exc
            if prev is not missing:
                try:
                    r = f(prev, r)
                except Exception as exc:
                    raise self.fail("reduce function", exc, r, True) from exc
            values[k] = r
            append(r)
        self.keyed_backend.changed(keys)  # type: ignore[union-attr]
        if self._final_only:
            self._timed = self._timed or timestamps is not None
        else:
            self.output.collect(out, timestamps)

    def finish(self) -> None:
        if self._final_only and self._values:
            final = list(self._values.values())
            self.output.collect(final, [MAX_WATERMARK] * len(final) if self._timed else None)


_MISSING = object()


class TimerOperator(_KeyedUdfOperator):
    """A keyed operator with timers (kept as keyed state): watermarks fire its
    event-time timers, the task's clock its processing-time ones.

    BATCH (Flink's batch timer service): processing time does not advance for
    timers while the job runs; at the end of input (``MAX_WATERMARK``) every
    event-time timer fires, then every processing-time timer, each in time
    order, and a timer registered from then on is ignored (the timer service is
    quiesced, so a timer that re-registers itself cannot loop forever).
    ``current_processing_time()`` still reads the wall clock."""

    timers: InternalTimerService

    def open(self) -> None:
        assert self.keyed_backend is not None
        self.timers = InternalTimerService(self.keyed_backend)
        super().open()

    def process_watermark(self, watermark: Watermark) -> None:
        self.timers.watermark = watermark.timestamp
        end_of_batch = self.ctx.batch and watermark.timestamp == MAX_WATERMARK
        if end_of_batch:
            self.timers.quiesce()
        self._fire(TimeDomain.EVENT_TIME, watermark.timestamp)
        if end_of_batch:
            self._fire(TimeDomain.PROCESSING_TIME, MAX_WATERMARK)
        self.output.emit_watermark(watermark)

    def next_processing_timer(self) -> int | None:
        if self.ctx.batch:
            return None  # they fire at the end of input
        return self.timers.next_time(TimeDomain.PROCESSING_TIME)

    def quiesce_timers(self) -> None:
        self.timers.quiesce()
        self.timers.clear(TimeDomain.PROCESSING_TIME)

    def on_processing_time(self, now_ms: int) -> None:
        self._fire(TimeDomain.PROCESSING_TIME, now_ms)

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        raise NotImplementedError


class KeyedProcessOperator(TimerOperator):
    """Runs a :class:`KeyedProcessFunction`, with event- and processing-time timers
    kept as keyed state; also a keyed stream's map, flat_map and filter (``role``
    names the function in errors), which have keyed state as in PyFlink."""

    def __init__(
        self,
        name: str,
        uid: str,
        function: Any,
        call: Callable[..., Any],
        key_selector: Callable[[Any], Any],
        role: str = "process function",
    ) -> None:
        super().__init__(name, uid, function, call, key_selector)
        self.role = role

    def open(self) -> None:
        super().open()
        self._ctx = self._timer_context()
        self._on_timer = getattr(self.function, "on_timer", None)

    def _timer_context(self) -> Any:
        """The context of ``on_timer`` (and of process_element here)."""
        return KeyedProcessFunction.Context(TimerService(self.timers, now_ms))

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._process(self.role, self.call, self.key_selector, self._ctx, records, timestamps)

    def _process(
        self,
        role: str,
        f: Callable[..., Any],
        key_of: Callable[[Any], Any] | None,
        ctx: Any,
        records: list[Any],
        timestamps: list[int] | None,
    ) -> None:
        """``f(record, ctx)`` per record with its key current; without ``key_of``
        (a broadcast input) there is no current key."""
        backend = self.keyed_backend
        assert backend is not None
        emitted = Emitted(timestamps is not None)
        keyed = key_of is not None
        keys: Iterable[Any]
        if key_of is not None:
            keys = self._keys(records, key_of)
            backend.read_ahead(keys)
        else:
            backend.current_key = NO_KEY
            keys = repeat(None)
        touch = backend.touch
        for r, k, t in zip(records, keys, repeat(None) if timestamps is None else timestamps):
            if keyed:
                try:
                    hash(k)
                except Exception as exc:
                    raise self._key_failed(exc, r) from exc
                touch(k)
                ctx._key = k
            ctx._timestamp = t
            try:
                produced = f(r, ctx)
                if produced is not None:  # a function that returns nothing (no generator)
                    emitted.add(produced, t)
            except Exception as exc:
                raise self.fail(role, exc, r, True) from exc
        emitted.flush(self.output)

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        if self._on_timer is None:
            return
        backend = self.keyed_backend
        assert backend is not None
        ctx = self._ctx
        ctx._domain = domain
        event_time = domain is TimeDomain.EVENT_TIME
        emitted = Emitted(event_time)
        for ts, key, _ in self.timers.due(domain, time_ms):
            backend.touch(key)
            ctx._key = key
            ctx._timestamp = ts if event_time else None
            try:
                emitted.add(self._on_timer(ts, ctx), ts)
            except Exception as exc:
                raise self.fail("on_timer", exc) from exc
        ctx._domain = None
        emitted.flush(self.output)


class _NoKey:
    """The current key on a broadcast input: there is none, so keyed state and
    timers refuse it, as Flink's do."""

    def __hash__(self) -> int:
        raise TypeError(
            "process_broadcast_element has no current key, so no keyed state or timers: "
            "reach every key's state with ctx.apply_to_keyed_state(descriptor, function)"
        )

    def __repr__(self) -> str:
        return "<no key>"


NO_KEY: Any = _NoKey()


class KeyedCoProcessOperator(KeyedProcessOperator, TwoInputOperator):
    """A two-input function on keyed inputs: records of both inputs with equal
    keys share the key's state and timers. ``key_selectors[1]`` None: the second
    input is broadcast (a :class:`KeyedBroadcastProcessFunction`, whose states
    ``broadcast`` names); its records have no current key."""

    def __init__(
        self,
        name: str,
        uid: str,
        function: Any,
        calls: Calls,
        key_selectors: tuple[Callable[[Any], Any], Callable[[Any], Any] | None],
        broadcast: tuple[MapStateDescriptor[Any, Any], ...] = (),
    ) -> None:
        super().__init__(name, uid, function, calls[0][1], key_selectors[0])
        self.calls = calls
        self.key_selectors = key_selectors
        self.broadcast = broadcast

    def initialize_state(self, restored: RestoredState) -> None:
        super().initialize_state(restored)
        _declare_broadcast(self)

    def open(self) -> None:
        super().open()
        self._contexts: tuple[Any, Any] = (self._ctx, self._ctx)
        if self.broadcast:
            self._contexts = (
                self._ctx,
                KeyedBroadcastProcessFunction.Context(
                    self.operator_state, self._ctx.timer_service(), self._apply_to_keyed_state
                ),
            )

    def _timer_context(self) -> Any:
        if not self.broadcast:
            return super()._timer_context()
        return KeyedBroadcastProcessFunction.ReadOnlyContext(self.operator_state, TimerService(self.timers, now_ms))

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._process(*self.calls[0], self.key_selectors[0], self._contexts[0], records, timestamps)

    def process_batch2(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._process(*self.calls[1], self.key_selectors[1], self._contexts[1], records, timestamps)

    def _apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        backend = self.keyed_backend
        assert backend is not None
        state = keyed_state(backend, descriptor)
        try:
            for key in list(backend.table(descriptor.name)):
                backend.touch(key)
                function(key, state)
        finally:
            backend.current_key = NO_KEY


def now_ms() -> int:
    """Processing time: wall-clock milliseconds."""
    return int(time.time() * 1000)

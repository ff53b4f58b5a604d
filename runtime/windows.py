"""Windows: assigners, triggers, window functions and the window operator.

``keyed.window(TumblingEventTimeWindows.of(Time.minutes(1)))`` groups each key's
records into windows; a trigger decides when a window's result is emitted; the
window's contents are kept as keyed state (per key group, so they snapshot,
restore and rescale), and so are the timers that fire it. A window is dropped
at its cleanup time: its end plus the allowed lateness. A record for windows
that are all past cleanup is late: dropped, or sent to the late side output.
Session windows merge when they overlap.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, TypeVar

from weir.runtime.config import _whole
from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.events import MAX_WATERMARK, MIN_WATERMARK
from weir.runtime.functions import Function, OutputTag, as_callable
from weir.runtime.operators import Emitted, TimerOperator, now_ms
from weir.runtime.timers import TimeDomain
from weir.runtime.window_contents import _EMPTY, _Contents
from weir.runtime.window_contents import AggregateContents as AggregateContents  # re-exported: its home was here
from weir.runtime.window_contents import AllRecords as AllRecords
from weir.runtime.window_contents import LastElements as LastElements
from weir.runtime.window_contents import ReduceContents as ReduceContents

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
W = TypeVar("W")  # the window type: TimeWindow or CountWindow
CW = TypeVar("CW")  # the window type of a window function's context (Context[TimeWindow])


@dataclass(frozen=True, order=True)
class TimeWindow:
    """``[start, end)`` in milliseconds."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        return self.start <= other.end and other.start <= self.end

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


@dataclass(frozen=True, order=True)
class CountWindow:
    """The ``id``-th count window of a key (PyFlink's): ``CountTumblingWindowAssigner``'s
    and ``CountSlidingWindowAssigner``'s. It never ends in time: it fires, and is
    dropped, when its trigger says it is full."""

    id: int

    def max_timestamp(self) -> int:
        return MAX_WATERMARK


def _positive_ms(setting: str, value: int) -> int:
    if not isinstance(value, int) or value <= 0:
        raise InvalidConfigurationError(
            setting, value, "must be a positive number of milliseconds (e.g. Time.seconds(5))"
        )
    return value


# --------------------------------------------------------------------- assigners
class AssignerContext:
    """What an assigner sees when it assigns a record: the processing time, and
    values it keeps for the record's key (a count assigner's count), kept as the
    window operator's keyed state."""

    def __init__(self, op: "WindowOperator") -> None:
        self._op = op
        self.now_ms = 0

    def current_processing_time(self) -> int:
        return self.now_ms

    def get_state(self, name: str, default: Any = None) -> Any:
        return self._op.trigger_state().get((name, None), default)

    def set_state(self, name: str, value: Any) -> None:
        self._op.trigger_state()[(name, None)] = value


class WindowAssigner(ABC):
    event_time = True
    merging = False
    ends_when_fired = False  # a window fires once and is then dropped (a count window: it takes no more records)

    @abstractmethod
    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]: ...

    def assign_windows(self, element: Any, timestamp: int | None, context: AssignerContext) -> list[Any]:
        """The windows ``element`` belongs to (PyFlink's signature); by default by its
        timestamp or the processing time alone (:meth:`assign`)."""
        return self.assign(timestamp, context.current_processing_time())

    def default_trigger(self) -> "Trigger":
        return EventTimeTrigger() if self.event_time else ProcessingTimeTrigger()


def _window_start(timestamp: int, offset: int, size: int) -> int:
    return timestamp - (timestamp - offset) % size


class TumblingEventTimeWindows(WindowAssigner):
    def __init__(self, size: int, offset: int = 0) -> None:
        self.size = _positive_ms("window size", size)
        self.offset = offset % size

    @classmethod
    def of(cls, size: int, offset: int = 0) -> "TumblingEventTimeWindows":
        return cls(size, offset)

    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]:
        t = _event_time(timestamp) if self.event_time else now_ms
        start = _window_start(t, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]


class TumblingProcessingTimeWindows(TumblingEventTimeWindows):
    event_time = False


class SlidingEventTimeWindows(WindowAssigner):
    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        self.size = _positive_ms("window size", size)
        self.slide = _positive_ms("window slide", slide)
        self.offset = offset % slide

    @classmethod
    def of(cls, size: int, slide: int, offset: int = 0) -> "SlidingEventTimeWindows":
        return cls(size, slide, offset)

    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]:
        t = _event_time(timestamp) if self.event_time else now_ms
        last = _window_start(t, self.offset, self.slide)
        return [TimeWindow(s, s + self.size) for s in range(last, t - self.size, -self.slide)]


class SlidingProcessingTimeWindows(SlidingEventTimeWindows):
    event_time = False


class SessionWindowTimeGapExtractor(ABC):
    """A session gap per record: ``with_dynamic_gap(extractor)`` opens each record a
    session of ``extract(element)`` milliseconds."""

    @abstractmethod
    def extract(self, element: Any) -> int: ...


class EventTimeSessionWindows(WindowAssigner):
    """A key's records less than ``gap`` apart fall into one window; with a
    :class:`SessionWindowTimeGapExtractor`, each record's own gap."""

    merging = True

    def __init__(self, gap: int | SessionWindowTimeGapExtractor) -> None:
        self.extractor: SessionWindowTimeGapExtractor | None = None
        if isinstance(gap, SessionWindowTimeGapExtractor):
            self.gap, self.extractor = 0, gap
        else:
            self.gap = _positive_ms("session gap", gap)

    @classmethod
    def with_gap(cls, gap: int) -> "EventTimeSessionWindows":
        return cls(gap)

    @classmethod
    def with_dynamic_gap(cls, extractor: SessionWindowTimeGapExtractor) -> "EventTimeSessionWindows":
        if not isinstance(extractor, SessionWindowTimeGapExtractor):
            raise InvalidConfigurationError(
                "session gap extractor", extractor, "subclass SessionWindowTimeGapExtractor"
            )
        return cls(extractor)

    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]:
        t = _event_time(timestamp) if self.event_time else now_ms
        return [TimeWindow(t, t + self.gap)]

    def assign_windows(self, element: Any, timestamp: int | None, context: AssignerContext) -> list[Any]:
        if self.extractor is None:
            return super().assign_windows(element, timestamp, context)
        t = _event_time(timestamp) if self.event_time else context.current_processing_time()
        return [TimeWindow(t, t + _positive_ms(f"session gap of record {element!r}", self.extractor.extract(element)))]


class ProcessingTimeSessionWindows(EventTimeSessionWindows):
    event_time = False


class GlobalWindows(WindowAssigner):
    """One window per key over all time, fired only by its trigger (by default
    never): ``count_window`` is this with a count trigger. Records need no
    timestamps, and what the window emits carries the end of time as its own."""

    event_time = False
    WINDOW = TimeWindow(MIN_WATERMARK, MAX_WATERMARK + 1)  # max_timestamp(): the end of time

    @classmethod
    def create(cls) -> "GlobalWindows":
        return cls()

    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]:
        return [self.WINDOW]

    def default_trigger(self) -> "Trigger":
        return NeverTrigger()


class CountTumblingWindowAssigner(WindowAssigner):
    """PyFlink's count windows: a key's records ``0..size-1`` are :class:`CountWindow`
    0, the next ``size`` window 1, ...; each fires when full, then is dropped."""

    event_time = False
    ends_when_fired = True

    def __init__(self, size: int) -> None:
        self.size = _whole("count window size", size)

    @classmethod
    def of(cls, size: int) -> "CountTumblingWindowAssigner":
        return cls(size)

    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]:
        raise TypeError("a count window assigner assigns by the key's count: call assign_windows")

    def _count(self, context: AssignerContext) -> int:
        """The record's index among its key's records."""
        n: int = context.get_state("count", 0)
        context.set_state("count", n + 1)
        return n

    def assign_windows(self, element: Any, timestamp: int | None, context: AssignerContext) -> list[Any]:
        return [CountWindow(self._count(context) // self.size)]

    def default_trigger(self) -> "Trigger":
        return CountTrigger(self.size)


class CountSlidingWindowAssigner(CountTumblingWindowAssigner):
    """PyFlink's sliding count windows: window ``i`` holds a key's records
    ``i*slide .. i*slide+size-1`` and fires once it has them all, so a record
    belongs to up to ``size/slide`` windows and a window not full at the end
    never fires."""

    def __init__(self, size: int, slide: int) -> None:
        super().__init__(size)
        self.slide = _whole("count window slide", slide)

    @classmethod
    def of(cls, size: int, slide: int) -> "CountSlidingWindowAssigner":  # type: ignore[override]
        return cls(size, slide)

    def assign_windows(self, element: Any, timestamp: int | None, context: AssignerContext) -> list[Any]:
        n = self._count(context)
        first = max(0, -((self.size - 1 - n) // self.slide))  # the oldest window still open at record n
        return [CountWindow(i) for i in range(n // self.slide, first - 1, -1)]


def _event_time(timestamp: int | None) -> int:
    if timestamp is None:
        raise _no_timestamps()
    return timestamp


def _no_timestamps() -> InvalidConfigurationError:
    return InvalidConfigurationError(
        "window assigner",
        "event time",
        "records have no timestamps: give the source a WatermarkStrategy with a timestamp assigner",
    )


# --------------------------------------------------------------------- triggers
class TriggerResult(enum.Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def fire(self) -> bool:
        return self.value[0]

    @property
    def purge(self) -> bool:
        return self.value[1]


class TriggerContext:
    """What a trigger sees of the current key and window: timers and per-window state."""

    def __init__(self, op: "WindowOperator") -> None:
        self._op = op
        self.window: TimeWindow | None = None

    def current_watermark(self) -> int:
        return self._op.timers.watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        self._op.timers.register(TimeDomain.EVENT_TIME, timestamp, self.window)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._op.timers.register(TimeDomain.PROCESSING_TIME, timestamp, self.window)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._op.timers.delete(TimeDomain.EVENT_TIME, timestamp, self.window)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._op.timers.delete(TimeDomain.PROCESSING_TIME, timestamp, self.window)

    def get_state(self, name: str, default: Any = None) -> Any:
        return self._op.trigger_state().get((name, self.window), default)

    def set_state(self, name: str, value: Any) -> None:
        self._op.trigger_state()[(name, self.window)] = value

    def clear_state(self, name: str) -> None:
        self._op.trigger_state().pop((name, self.window), None)


class Trigger(ABC):
    @abstractmethod
    def on_element(
        self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult: ...

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        """Session windows merged into ``window``; re-register what it needs."""

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        """The window is gone: drop the trigger's timers and state."""


class EventTimeTrigger(Trigger):
    """Fires when the watermark passes the window's end (and again for each late
    record within the allowed lateness)."""

    @classmethod
    def create(cls) -> "EventTimeTrigger":
        return cls()

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        if window.max_timestamp() > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    @classmethod
    def create(cls) -> "ProcessingTimeTrigger":
        return cls()

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class NeverTrigger(Trigger):
    """Never fires: the trigger of :class:`GlobalWindows` until you give another."""

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    @classmethod
    def create(cls) -> "NeverTrigger":
        return cls()


class CountTrigger(Trigger):
    """Fires every ``count`` records of a window."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise InvalidConfigurationError("CountTrigger count", count, "must be at least 1")
        self.count = count

    @classmethod
    def of(cls, count: int) -> "CountTrigger":
        return cls(count)

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        n = ctx.get_state("count", 0) + 1
        if n >= self.count:
            ctx.clear_state("count")
            return TriggerResult.FIRE
        ctx.set_state("count", n)
        return TriggerResult.CONTINUE

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.clear_state("count")


class PurgingTrigger(Trigger):
    """Wraps a trigger: every FIRE becomes FIRE_AND_PURGE."""

    def __init__(self, inner: Trigger) -> None:
        self.inner = inner

    @classmethod
    def of(cls, inner: Trigger) -> "PurgingTrigger":
        return cls(inner)

    def _purging(self, r: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if r.fire else r

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.inner.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.inner.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.inner.on_processing_time(time, window, ctx))

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        self.inner.on_merge(window, ctx)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        self.inner.clear(window, ctx)


# --------------------------------------------------------------------- window functions
class AggregateFunction(Function, Generic[IN, ACC, OUT]):
    """Incremental aggregation: one accumulator per key and window."""

    @abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    def merge(self, a: ACC, b: ACC) -> ACC:
        raise NotImplementedError("merge() is needed for session windows")


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """``apply(key, window, inputs)`` when a window fires: all its records
    (``apply``), or its one reduced or aggregated value (``reduce(f, window_function=...)``,
    ``aggregate(agg, window_function=...)``). Yields the records to emit."""

    @abstractmethod
    def apply(self, key: Any, window: TimeWindow, inputs: Iterable[IN]) -> Iterable[OUT]: ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """As a :class:`WindowFunction`, for ``window_all``: ``apply(window, inputs)``."""

    @abstractmethod
    def apply(self, window: TimeWindow, inputs: Iterable[IN]) -> Iterable[OUT]: ...


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """``process(key, context, elements)`` when a window fires: all its records
    (``process``), or its one reduced or aggregated value (``reduce(f,
    window_function=...)``, ``aggregate(agg, window_function=...)``). Yields the
    records to emit, and ``tag, value`` for a side output. ``clear(context)``
    runs when the window is dropped, at its end plus the allowed lateness."""

    class Context(Generic[CW]):
        def __init__(self, window: TimeWindow, watermark: int) -> None:
            self._window = window
            self._watermark = watermark

        def window(self) -> TimeWindow:
            return self._window

        def current_watermark(self) -> int:
            return self._watermark

        def current_processing_time(self) -> int:
            return now_ms()

    @abstractmethod
    def process(self, key: Any, context: "ProcessWindowFunction.Context", elements: Iterable[IN]) -> Iterable[OUT]: ...

    def clear(self, context: "ProcessWindowFunction.Context") -> None:
        """The window is gone (its cleanup time passed): release what you kept for it."""


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """``window_all(...).process(f)``: as a :class:`ProcessWindowFunction`, without a key."""

    Context = ProcessWindowFunction.Context

    @abstractmethod
    def process(self, context: "ProcessWindowFunction.Context", elements: Iterable[IN]) -> Iterable[OUT]: ...

    def clear(self, context: "ProcessWindowFunction.Context") -> None:
        """The window is gone (its cleanup time passed): release what you kept for it."""


class WindowCall:
    """What a firing window's elements (its records, or its one reduced or
    aggregated value) go through: a :class:`WindowFunction` (``apply``), a
    :class:`ProcessWindowFunction` (``process``, and ``clear`` when the window
    is dropped) or a callable taking what ``process`` takes; their all-window
    forms take no key. ``None`` emits the elements as they are."""

    def __init__(self, fn: Any, keyed: bool, where: str) -> None:
        self.fn = fn
        self.keyed = keyed
        apply, process = getattr(fn, "apply", None), getattr(fn, "process", None)
        if fn is None:
            self._call: Callable[..., Any] | None = None
        elif callable(process) or not callable(apply):
            self._call = as_callable(fn, "process", where)
        else:
            self._call = apply
        self._with_window = self._call is apply and apply is not None
        clear = getattr(fn, "clear", None)
        # The base classes' clear() does nothing: not called per key and window.
        inherited = getattr(type(fn), "clear", None) in (ProcessWindowFunction.clear, ProcessAllWindowFunction.clear)
        self._clear = clear if callable(clear) and not self._with_window and not inherited else None
        self.role = "window function" if self._with_window else "process window function"

    def emit(self, key: Any, window: TimeWindow, watermark: int, elements: list[Any]) -> Iterable[Any] | None:
        return self.emitter(window, watermark)(key, elements)

    def emitter(self, window: TimeWindow, watermark: int) -> Callable[[Any, list[Any]], Iterable[Any] | None]:
        """:meth:`emit` for one window, every key of it: its context is made once."""
        call = self._call
        if call is None:
            return lambda key, elements: elements
        where: Any = window if self._with_window else ProcessWindowFunction.Context(window, watermark)
        if self.keyed:
            return lambda key, elements: call(key, where, elements)
        return lambda key, elements: call(where, elements)

    @property
    def clears(self) -> bool:
        """A process window function with ``clear()``, to call as each key's window goes."""
        return self._clear is not None

    def clear(self, window: TimeWindow, watermark: int) -> None:
        if self._clear is not None:
            self._clear(ProcessWindowFunction.Context(window, watermark))


# --------------------------------------------------------------------- the operator
class WindowOperator(TimerOperator):
    """Keyed windows. State per key: ``{window: contents}`` (for sessions, the
    current windows themselves are that dict's keys), trigger state, and timers
    namespaced by window."""

    WINDOWS = "_windows"
    TRIGGER_STATE = "_trigger"

    def __init__(
        self,
        name: str,
        uid: str,
        contents: _Contents,
        window_function: WindowCall,
        key_selector: Callable[[Any], Any],
        assigner: WindowAssigner,
        trigger: Trigger | None,
        allowed_lateness_ms: int,
        late_tag: OutputTag | None,
    ) -> None:
        super().__init__(name, uid, contents.fn, contents.add, key_selector)
        self.contents = contents
        self.window_function = window_function
        self.assigner = assigner
        self.trigger = trigger or assigner.default_trigger()
        self.lateness = allowed_lateness_ms if assigner.event_time else 0
        self.late_tag = late_tag

    def user_functions(self) -> tuple[Any, ...]:
        return (self.function, self.window_function.fn)

    def open(self) -> None:
        super().open()
        assert self.keyed_backend is not None
        self._windows = self.keyed_backend.table(self.WINDOWS)
        self._trigger_state = self.keyed_backend.table(self.TRIGGER_STATE)
        self._tctx = TriggerContext(self)
        self._actx = AssignerContext(self)
        # Session windows with their assigner's own trigger merge a batch at a time (see _merge_batch);
        # without allowed lateness, a key's sessions share one timer (see _fire_sessions).
        self._by_batch = self.assigner.merging and type(self.trigger) is type(self.assigner.default_trigger())
        self._one_timer = self._by_batch and self.lateness == 0

    def trigger_state(self) -> dict[Any, Any]:
        key = self.keyed_backend.current_key  # type: ignore[union-attr]
        state = self._trigger_state.get(key)
        if state is None:
            state = self._trigger_state[key] = {}
        return state

    def _cleanup_time(self, window: TimeWindow) -> int:
        t = window.max_timestamp() + self.lateness
        return t if t >= window.max_timestamp() else MAX_WATERMARK

    def _is_late(self, window: TimeWindow) -> bool:
        return self.assigner.event_time and self._cleanup_time(window) <= self.timers.watermark

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        if self._by_batch:
            self._merge_batch(records, timestamps)
            return
        backend = self.keyed_backend
        assert backend is not None
        keys = self._keys(records, self.key_selector)
        backend.read_ahead(keys)
        self._actx.now_ms = now_ms()
        emitted = Emitted(timed=True)
        for i, r in enumerate(records):
            t = None if timestamps is None else timestamps[i]
            k = keys[i]
            try:
                hash(k)
            except Exception as exc:
                raise self._key_failed(exc, r) from exc
            backend.touch(k)
            windows = self._assign(r, t)
            if self.assigner.merging:
                windows = [self._merge_into_sessions(k, windows[0])]
            kept = False
            for w in windows:
                if self._is_late(w):
                    continue
                kept = True
                self._add(k, w, r)
                self._tctx.window = w
                self._act(k, w, self.trigger.on_element(r, t, w, self._tctx), emitted)
                self._register_cleanup(w)
            if not kept and self.late_tag is not None:
                emitted.to_side(self.late_tag.tag_id, r, t)
        emitted.flush(self.output)

    def _add(self, key: Any, window: TimeWindow, value: Any) -> None:
        per_key = self._windows.get(key)
        if per_key is None:
            per_key = self._windows[key] = {}
        try:
            per_key[window] = self.contents.add(per_key.get(window, _EMPTY), value)
        except Exception as exc:
            raise self.fail(self.contents.role, exc, value, True) from exc

    def _merge_into_sessions(self, key: Any, new: TimeWindow) -> TimeWindow:
        """Merge ``new`` with the key's overlapping session windows; the merged
        window takes over their contents, and their timers are replaced."""
        per_key = self._windows.get(key, {})
        overlapping = [w for w in per_key if w.intersects(new)]
        if not overlapping:
            return new
        merged = new
        for w in overlapping:
            merged = merged.cover(w)
        if overlapping == [merged]:
            return merged
        state: Any = _EMPTY
        for w in overlapping:
            state = self._merge_contents(state, per_key.pop(w))
            self._tctx.window = w
            self.trigger.clear(w, self._tctx)
            self.timers.delete(self._domain, self._cleanup_time(w), w)
        per_key[merged] = state
        self._tctx.window = merged
        self.trigger.on_merge(merged, self._tctx)
        return merged

    def _merge_contents(self, a: Any, b: Any) -> Any:
        try:
            return self.contents.merge(a, b)
        except Exception as exc:
            raise self.fail(self.contents.role, exc) from exc

    def _merge_batch(self, records: list[Any], timestamps: list[int] | None) -> None:
        """Session windows with their assigner's own trigger, a batch at a time: each
        key's sessions are read once, merged in memory record by record in arrival
        order (``[start, end, contents, stored window or None, took records]``, in
        their order in state) with the per-record path's ``add`` and ``merge`` calls
        in its order, then written once; a session merged away has its timer deleted
        and one that took records has one registered, once a batch. Late records, and a late record
        within the allowed lateness firing its session at once, are as there. The
        default triggers make it exact: ``on_merge`` registers the timer
        ``on_element`` does, and they fire on a record only a session whose end
        passed; a custom trigger may act on each record: it takes the per-record path."""
        backend = self.keyed_backend
        assert backend is not None
        keys = self._keys(records, self.key_selector)
        backend.read_ahead(keys)
        now = self._actx.now_ms = now_ms()
        if not self.assigner.event_time:
            stamps: list[int] = [now] * len(records)
            watermark = MIN_WATERMARK  # nothing is late or fires on a record
        elif timestamps is None:
            raise _no_timestamps()
        else:
            stamps, watermark = timestamps, self.timers.watermark
        gap = None if self.assigner.extractor is not None else self.assigner.gap  # type: ignore[attr-defined]
        lateness, windows, add = self.lateness, self._windows, self.contents.add
        sessions: dict[Any, list[list[Any]]] = {}  # key -> its sessions
        emitted = Emitted(timed=True)
        for i, r in enumerate(records):
            k = keys[i]
            try:
                mine = sessions.get(k)
            except TypeError as exc:
                raise self._key_failed(exc, r) from exc
            if mine is None:
                stored = windows.get(k)
                mine = sessions[k] = [[w.start, w.end, c, w, False] for w, c in stored.items()] if stored else []
            if gap is None:  # a gap of its own
                (w,) = self._assign(r, stamps[i])
                start, end = w.start, w.end
            else:
                start = stamps[i]
                end = start + gap
            if len(mine) == 1 and (x := mine[0])[0] <= end and start <= x[1]:  # the key's one session: the usual case
                if start < x[0]:
                    x[0], x[3] = start, None
                if x[1] < end:
                    x[1], x[3] = end, None
            elif not (hits := [x for x in mine if x[0] <= end and start <= x[1]]):
                if end - 1 + lateness <= watermark:  # a session of its own, past its cleanup time
                    if self.late_tag is not None:
                        emitted.to_side(self.late_tag.tag_id, r, stamps[i])
                    continue
                x = [start, end, _EMPTY, None, True]
                mine.append(x)
            elif len(hits) == 1 and hits[0][0] <= start and end <= hits[0][1]:
                x = hits[0]
            else:
                x = self._cover(mine, hits, start, end)
            x[4] = True
            try:
                x[2] = add(x[2], r)
            except Exception as exc:
                raise self.fail(self.contents.role, exc, r, True) from exc
            if x[1] - 1 <= watermark:  # its end has passed: the trigger fires it
                self._emit(k, TimeWindow(x[0], x[1]), x[2], emitted)
        for k, mine in sessions.items():
            self._write_sessions(k, mine)
        emitted.flush(self.output)

    def _assign(self, record: Any, timestamp: int | None) -> list[Any]:
        try:
            return self.assigner.assign_windows(record, timestamp, self._actx)
        except InvalidConfigurationError:
            raise
        except Exception as exc:
            raise self.fail("window assigner", exc, record, True) from exc

    def _cover(self, mine: list[list[Any]], hits: list[list[Any]], start: int, end: int) -> list[Any]:
        """The session ``[start, end)`` merges the key's sessions it overlaps (``hits``,
        in the key's order) into one, which goes last, as the per-record path
        puts it in the key's state."""
        if len(hits) == 1 and mine[-1] is hits[0]:  # the key's newest session grows: the usual case
            x = hits[0]
            x[0], x[1], x[3] = min(start, x[0]), max(end, x[1]), None
            return x
        contents: Any = _EMPTY
        for x in hits:
            start, end = min(start, x[0]), max(end, x[1])
            contents = self._merge_contents(contents, x[2])
        mine[:] = [x for x in mine if all(x is not h for h in hits)]
        merged = [start, end, contents, None, True]
        mine.append(merged)
        return merged

    def _write_sessions(self, key: Any, mine: list[list[Any]]) -> None:
        """A key's sessions after a batch into its state; the timers of sessions
        merged away deleted, those of the sessions that took records registered.
        With one timer a key, only a session ending before every stored one registers."""
        self.keyed_backend.touch(key)  # type: ignore[union-attr]
        stored = self._windows.get(key)
        now: dict[TimeWindow, Any] = {}
        took = []
        for start, end, contents, window, fresh in mine:
            if window is None:
                window = TimeWindow(start, end)
            if fresh:  # its timer, as on_element registers it (again, after a restore set the watermark back)
                took.append(window)
            now[window] = contents
        if self._one_timer:
            first = min(w.end for w in now) if now else None
            if first is not None and (not stored or first < min(w.end for w in stored)):
                self.timers.register(self._domain, first - 1)
            if now:
                self._windows[key] = now
            return
        # The default trigger's timer is at the window's end: without allowed lateness, the cleanup timer too.
        for window in stored or ():
            if window not in now:
                self._tctx.window = window
                self.trigger.clear(window, self._tctx)
                if self.lateness:
                    self.timers.delete(self._domain, self._cleanup_time(window), window)
        for window in took:
            self._tctx.window = window
            self.trigger.on_merge(window, self._tctx)
            if self.lateness:
                self._register_cleanup(window)
        if now:
            self._windows[key] = now

    @property
    def _domain(self) -> TimeDomain:
        return TimeDomain.EVENT_TIME if self.assigner.event_time else TimeDomain.PROCESSING_TIME

    def _register_cleanup(self, window: TimeWindow) -> None:
        """A timer at the window's cleanup time, namespaced by the window: when the
        trigger's own timer falls on the same time it is the same timer (as in Flink).
        A window that never ends (a global one) gets none, as in Flink."""
        cleanup = self._cleanup_time(window)
        if cleanup != MAX_WATERMARK:
            self.timers.register(self._domain, cleanup, window)

    def _act(self, key: Any, window: TimeWindow, result: TriggerResult, emitted: Emitted) -> None:
        if result.fire:
            self._emit(key, window, self._windows.get(key, {}).get(window, _EMPTY), emitted)
            if self.assigner.ends_when_fired:
                self._clear(key, window)
                return
        if result.purge:
            per_key = self._windows.get(key)
            if per_key is not None and window in per_key:
                per_key[window] = _EMPTY

    def _emit(self, key: Any, window: TimeWindow, state: Any, emitted: Emitted) -> None:
        """The window's result, through the window function (an empty window emits nothing, as in Flink)."""
        if state is _EMPTY:
            return
        try:
            elements = self.contents.result(state)
        except Exception as exc:
            raise self.fail(self.contents.role, exc) from exc
        try:
            emitted.add(self.window_function.emit(key, window, self.timers.watermark, elements), window.max_timestamp())
        except Exception as exc:
            raise self.fail(self.window_function.role, exc) from exc

    def _clear(self, key: Any, window: TimeWindow) -> None:
        per_key = self._windows.get(key)
        if per_key is not None:
            per_key.pop(window, None)
            if not per_key:
                del self._windows[key]
        self._clear_function(window)
        self._tctx.window = window
        self.trigger.clear(window, self._tctx)
        trigger_state = self._trigger_state.get(key)
        if trigger_state is not None:
            for k in [k for k in trigger_state if k[1] == window]:
                del trigger_state[k]
            if not trigger_state:
                del self._trigger_state[key]

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        if self._one_timer:
            self._fire_sessions(domain, time_ms)
            return
        backend = self.keyed_backend
        assert backend is not None
        emitted = Emitted(timed=True)
        for ts, key, window in self.timers.due(domain, time_ms):
            backend.touch(key)
            if window is None and self.assigner.merging:  # a key's one timer, from a snapshot without lateness
                for window in self._windows.get(key, ()):
                    self.timers.register(self._domain, window.max_timestamp(), window)
                    self._register_cleanup(window)
                continue
            if window not in self._windows.get(key, {}):
                continue  # merged away or cleaned up
            self._tctx.window = window
            if domain is TimeDomain.EVENT_TIME:
                result = self.trigger.on_event_time(ts, window, self._tctx)
            else:
                result = self.trigger.on_processing_time(ts, window, self._tctx)
            self._act(key, window, result, emitted)
            if domain is self._domain and ts == self._cleanup_time(window):
                self._clear(key, window)
        emitted.flush(self.output)

    def _fire_sessions(self, domain: TimeDomain, time_ms: int) -> None:
        """Session windows without allowed lateness keep one timer a key (no
        namespace), at or before the end of its earliest session: a session that
        grows moves no timer. When it fires, every session of the key whose end
        the time passed fires and goes, and the timer moves to the earliest left.
        A timer of one window (a snapshot taken with allowed lateness) does the same."""
        backend = self.keyed_backend
        assert backend is not None
        emitted = Emitted(timed=True)
        for _, key, _ in self.timers.due(domain, time_ms):
            backend.touch(key)
            per_key = self._windows.get(key)
            if not per_key:
                continue
            for window in sorted(w for w in per_key if w.max_timestamp() <= time_ms):
                self._emit(key, window, per_key.pop(window), emitted)
                self._clear_function(window)
            if per_key:
                self.timers.register(domain, min(w.end for w in per_key) - 1)
            else:
                del self._windows[key]
        emitted.flush(self.output)

    def _clear_function(self, window: TimeWindow) -> None:
        try:
            self.window_function.clear(window, self.timers.watermark)
        except Exception as exc:
            raise self.fail("clear()", exc) from exc

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

from runtime.errors import InvalidConfigurationError
from runtime.events import MAX_WATERMARK
from runtime.functions import Function
from runtime.operators import TimerOperator, now_ms
from runtime.timers import TimeDomain

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")


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


@dataclass(frozen=True)
class OutputTag:
    """Names a side output: ``result.get_side_output(tag)``."""

    name: str


def _positive_ms(setting: str, value: int) -> int:
    if not isinstance(value, int) or value <= 0:
        raise InvalidConfigurationError(setting, value, "must be a positive number of milliseconds (e.g. Time.seconds(5))")
    return value


# --------------------------------------------------------------------- assigners
class WindowAssigner(ABC):
    event_time = True
    merging = False

    @abstractmethod
    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]: ...

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


class EventTimeSessionWindows(WindowAssigner):
    """A key's records less than ``gap`` apart fall into one window."""

    merging = True

    def __init__(self, gap: int) -> None:
        self.gap = _positive_ms("session gap", gap)

    @classmethod
    def with_gap(cls, gap: int) -> "EventTimeSessionWindows":
        return cls(gap)

    def assign(self, timestamp: int | None, now_ms: int) -> list[TimeWindow]:
        t = _event_time(timestamp) if self.event_time else now_ms
        return [TimeWindow(t, t + self.gap)]


class ProcessingTimeSessionWindows(EventTimeSessionWindows):
    event_time = False


def _event_time(timestamp: int | None) -> int:
    if timestamp is None:
        raise InvalidConfigurationError(
            "window assigner", "event time", "records have no timestamps: give the source a WatermarkStrategy with a timestamp assigner"
        )
    return timestamp


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
    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult: ...

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
    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


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


class ProcessWindowFunction(Function, Generic[IN, OUT]):
    """Sees every record of a window when it fires (they are kept until then)."""

    class Context:
        def __init__(self, window: TimeWindow, watermark: int) -> None:
            self._window = window
            self._watermark = watermark

        def window(self) -> TimeWindow:
            return self._window

        def current_watermark(self) -> int:
            return self._watermark

    @abstractmethod
    def process(self, key: Any, context: "ProcessWindowFunction.Context", elements: Iterable[IN]) -> Iterable[OUT]: ...


class _Contents(ABC):
    """How a window keeps its records: reduced, aggregated, or all of them."""

    role = "window function"

    @abstractmethod
    def add(self, state: Any, value: Any) -> Any: ...

    @abstractmethod
    def merge(self, a: Any, b: Any) -> Any: ...

    @abstractmethod
    def emit(self, key: Any, window: TimeWindow, state: Any, watermark: int) -> list[Any]: ...


_EMPTY = ("weir-empty-window",)


class ReduceContents(_Contents):
    role = "reduce function"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def add(self, state: Any, value: Any) -> Any:
        return value if state is _EMPTY else self.fn(state, value)

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is _EMPTY else b if a is _EMPTY else self.fn(a, b)

    def emit(self, key: Any, window: TimeWindow, state: Any, watermark: int) -> list[Any]:
        return [] if state is _EMPTY else [state]


class AggregateContents(_Contents):
    role = "aggregate function"

    def __init__(self, agg: AggregateFunction[Any, Any, Any]) -> None:
        self.agg = agg

    def add(self, state: Any, value: Any) -> Any:
        return self.agg.add(value, self.agg.create_accumulator() if state is _EMPTY else state)

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is _EMPTY else b if a is _EMPTY else self.agg.merge(a, b)

    def emit(self, key: Any, window: TimeWindow, state: Any, watermark: int) -> list[Any]:
        return [] if state is _EMPTY else [self.agg.get_result(state)]


class ProcessContents(_Contents):
    role = "process window function"

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._call = fn.process if hasattr(fn, "process") else fn

    def add(self, state: Any, value: Any) -> Any:
        if state is _EMPTY:
            return [value]
        state.append(value)
        return state

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is _EMPTY else b if a is _EMPTY else a + b

    def emit(self, key: Any, window: TimeWindow, state: Any, watermark: int) -> list[Any]:
        if state is _EMPTY:
            return []
        return list(self._call(key, ProcessWindowFunction.Context(window, watermark), list(state)) or [])


# --------------------------------------------------------------------- the operator
class WindowOperator(TimerOperator):
    """Keyed windows. State per key: ``{window: contents}`` (for sessions, the
    current windows themselves are that dict's keys), trigger state, and timers
    namespaced by window."""

    WINDOWS = "_windows"
    TRIGGER_STATE = "_trigger"

    def __init__(
        self, name: str, uid: str, contents: _Contents, key_selector: Callable[[Any], Any], assigner: WindowAssigner,
        trigger: Trigger | None, allowed_lateness_ms: int, late_tag: OutputTag | None,
    ) -> None:
        function = getattr(contents, "fn", None) or getattr(contents, "agg", None)
        super().__init__(name, uid, function, contents.add, key_selector)
        self.contents = contents
        self.assigner = assigner
        self.trigger = trigger or assigner.default_trigger()
        self.lateness = allowed_lateness_ms if assigner.event_time else 0
        self.late_tag = late_tag

    def open(self) -> None:
        super().open()
        assert self.keyed_backend is not None
        self._windows = self.keyed_backend.table(self.WINDOWS)
        self._trigger_state = self.keyed_backend.table(self.TRIGGER_STATE)
        self._tctx = TriggerContext(self)

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
        backend = self.keyed_backend
        assert backend is not None
        key_of = self.key_selector
        now = now_ms()
        out: list[Any] = []
        out_ts: list[int] = []
        late: list[Any] = []
        late_ts: list[int] = []
        for i, r in enumerate(records):
            t = None if timestamps is None else timestamps[i]
            try:
                k = key_of(r)
                hash(k)
            except Exception as exc:
                raise self._key_failed(exc, r) from exc
            backend.current_key = k
            windows = self.assigner.assign(t, now)
            if self.assigner.merging:
                windows = [self._merge_into_sessions(k, windows[0])]
            kept = False
            for w in windows:
                if self._is_late(w):
                    continue
                kept = True
                self._add(k, w, r)
                self._tctx.window = w
                self._act(k, w, self.trigger.on_element(r, t, w, self._tctx), out, out_ts)
                self._register_cleanup(w)
            if not kept:
                late.append(r)
                late_ts.append(t)  # type: ignore[arg-type]
        if out:
            self.output.collect(out, out_ts)
        if late and self.late_tag is not None:
            self.output.collect_side(self.late_tag.name, late, None if timestamps is None else late_ts)

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
            try:
                state = self.contents.merge(state, per_key.pop(w))
            except Exception as exc:
                raise self.fail(self.contents.role, exc) from exc
            self._tctx.window = w
            self.trigger.clear(w, self._tctx)
            self.timers.delete(self._domain, self._cleanup_time(w), w)
        per_key[merged] = state
        self._tctx.window = merged
        self.trigger.on_merge(merged, self._tctx)
        return merged

    @property
    def _domain(self) -> TimeDomain:
        return TimeDomain.EVENT_TIME if self.assigner.event_time else TimeDomain.PROCESSING_TIME

    def _register_cleanup(self, window: TimeWindow) -> None:
        """A timer at the window's cleanup time, namespaced by the window: when the
        trigger's own timer falls on the same time it is the same timer (as in Flink)."""
        self.timers.register(self._domain, self._cleanup_time(window), window)

    def _act(self, key: Any, window: TimeWindow, result: TriggerResult, out: list[Any], out_ts: list[int]) -> None:
        if result.fire:
            state = self._windows.get(key, {}).get(window, _EMPTY)
            try:
                produced = self.contents.emit(key, window, state, self.timers.watermark)
            except Exception as exc:
                raise self.fail(self.contents.role, exc) from exc
            out.extend(produced)
            out_ts.extend([window.max_timestamp()] * len(produced))
        if result.purge:
            per_key = self._windows.get(key)
            if per_key is not None and window in per_key:
                per_key[window] = _EMPTY

    def _clear(self, key: Any, window: TimeWindow) -> None:
        per_key = self._windows.get(key)
        if per_key is not None:
            per_key.pop(window, None)
            if not per_key:
                del self._windows[key]
        self._tctx.window = window
        self.trigger.clear(window, self._tctx)
        trigger_state = self._trigger_state.get(key)
        if trigger_state is not None:
            for k in [k for k in trigger_state if k[1] == window]:
                del trigger_state[k]
            if not trigger_state:
                del self._trigger_state[key]

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        backend = self.keyed_backend
        assert backend is not None
        out: list[Any] = []
        out_ts: list[int] = []
        for ts, key, window in self.timers.due(domain, time_ms):
            backend.current_key = key
            if window not in self._windows.get(key, {}):
                continue  # merged away or cleaned up
            self._tctx.window = window
            if domain is TimeDomain.EVENT_TIME:
                result = self.trigger.on_event_time(ts, window, self._tctx)
            else:
                result = self.trigger.on_processing_time(ts, window, self._tctx)
            self._act(key, window, result, out, out_ts)
            if domain is self._domain and ts == self._cleanup_time(window):
                self._clear(key, window)
        if out:
            self.output.collect(out, out_ts)


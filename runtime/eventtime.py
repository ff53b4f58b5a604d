"""Event time: durations, timestamp assigners, watermark strategies and generators.

A :class:`WatermarkStrategy` says how records get their event time and how
downstream learns how far event time has progressed. It runs in a source (one
watermark generator per split; the subtask's watermark is the minimum over its
splits that are not idle) or in ``assign_timestamps_and_watermarks`` anywhere in
the stream (one generator per subtask); both drive a :class:`WatermarkEmitter`.
A task's watermark is the minimum over its input channels that are neither idle
nor finished.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any, Callable, Hashable, Iterable, Protocol

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.events import MAX_WATERMARK, MIN_WATERMARK, Watermark, WatermarkStatus
from weir.runtime.operators import StreamOperator, now_ms


class Time:
    """Durations in milliseconds, PyFlink's spelling: ``Time.seconds(5) == 5000``."""

    @staticmethod
    def milliseconds(n: float) -> int:
        return int(n)

    @staticmethod
    def seconds(n: float) -> int:
        return int(n * 1000)

    @staticmethod
    def minutes(n: float) -> int:
        return int(n * 60_000)

    @staticmethod
    def hours(n: float) -> int:
        return int(n * 3_600_000)

    @staticmethod
    def days(n: float) -> int:
        return int(n * 86_400_000)


class Duration:
    """PyFlink's ``Duration`` (``pyflink.common.Duration``), in weir's unit:
    ``Duration.of_seconds(5) == 5000`` milliseconds, taken wherever weir takes ms."""

    of_millis = staticmethod(Time.milliseconds)
    of_seconds = staticmethod(Time.seconds)
    of_minutes = staticmethod(Time.minutes)
    of_hours = staticmethod(Time.hours)
    of_days = staticmethod(Time.days)


class TimestampAssigner(ABC):
    """PyFlink's interface for a record's event time. ``record_timestamp`` is the
    timestamp the record had (None without one); a plain callable ``record -> int``
    works as well."""

    @abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int | None) -> int: ...


class WatermarkGenerator(ABC):
    """Watches the timestamps of one split and says how far event time has come."""

    @abstractmethod
    def on_event(self, timestamp: int) -> None: ...

    def on_batch(self, timestamps: list[int]) -> None:
        for t in timestamps:
            self.on_event(t)

    @abstractmethod
    def current_watermark(self) -> int:
        """Asked periodically (the auto-watermark interval)."""

    def snapshot(self) -> Any:
        return None

    def restore(self, state: Any) -> None:
        pass


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Records may come up to ``max_out_of_orderness_ms`` late: the watermark is the
    largest timestamp seen minus that, minus 1 (as in Flink)."""

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        self._delay = max_out_of_orderness_ms
        self._max = MIN_WATERMARK + max_out_of_orderness_ms + 1

    def on_event(self, timestamp: int) -> None:
        if timestamp > self._max:
            self._max = timestamp

    def on_batch(self, timestamps: list[int]) -> None:
        if timestamps:
            self.on_event(max(timestamps))

    def current_watermark(self) -> int:
        return self._max - self._delay - 1

    def snapshot(self) -> Any:
        return self._max

    def restore(self, state: Any) -> None:
        self._max = state


def _as_assigner(assigner: Any) -> Callable[[Any, int | None], int]:
    extract = getattr(assigner, "extract_timestamp", None)
    if callable(extract):
        return extract  # type: ignore[no-any-return]
    if callable(assigner):
        return lambda record, _: assigner(record)
    raise InvalidConfigurationError(
        "timestamp assigner", assigner, "must be callable or have extract_timestamp(value, record_timestamp)"
    )


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source stamps records (``with_timestamp_assigner``) and generates
    watermarks. Build one with the static constructors."""

    generator_factory: Callable[[], WatermarkGenerator] | None
    timestamp_assigner: Callable[[Any, int | None], int] | None = None  # (record, its timestamp or None)
    idleness_ms: int | None = None

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness_ms: int) -> "WatermarkStrategy":
        if max_out_of_orderness_ms < 0:
            raise InvalidConfigurationError("max out-of-orderness", max_out_of_orderness_ms, "must be zero or more")
        return WatermarkStrategy(lambda: BoundedOutOfOrdernessWatermarks(max_out_of_orderness_ms))

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy(lambda: BoundedOutOfOrdernessWatermarks(0))

    @staticmethod
    def for_generator(factory: Callable[[], WatermarkGenerator]) -> "WatermarkStrategy":
        """A custom :class:`WatermarkGenerator`, one per split."""
        return WatermarkStrategy(factory)

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        return WatermarkStrategy(None)

    def with_timestamp_assigner(self, assigner: Any) -> "WatermarkStrategy":
        """``assigner(record) -> int`` milliseconds, or a :class:`TimestampAssigner`."""
        return replace(self, timestamp_assigner=_as_assigner(assigner))

    def with_idleness(self, idle_timeout_ms: int) -> "WatermarkStrategy":
        """A split with no records for this long stops holding back the watermark."""
        if idle_timeout_ms <= 0:
            raise InvalidConfigurationError("idleness", idle_timeout_ms, "must be positive")
        return replace(self, idleness_ms=int(idle_timeout_ms))


class WatermarkOutput(Protocol):
    def emit_watermark(self, watermark: Watermark) -> None: ...

    def emit_watermark_status(self, status: WatermarkStatus) -> None: ...


class WatermarkEmitter:
    """A strategy at work in one operator subtask (a source's, or the operator of
    ``assign_timestamps_and_watermarks``): stamps records, feeds one generator per
    split (``None`` where there are no splits), and on :meth:`emit` sends the
    minimum watermark over the splits that are not idle, only when it advanced;
    when every split is idle it says so once (``WatermarkStatus``). As in Flink's
    idleness timer, time is read only at :meth:`emit` (the caller's clock, in
    milliseconds): a split is idle when no batch came between emits for the
    idleness timeout. Runs on the task's loop thread only."""

    def __init__(self, strategy: WatermarkStrategy, interval_ms: int) -> None:
        self.strategy = strategy
        self.interval_ms = interval_ms
        self.generators: dict[Hashable, WatermarkGenerator] = {}
        self._last_active_ms: dict[Hashable, float] = {}
        self._active: set[Hashable] = set()  # splits with records since the last emit
        self.emitted = MIN_WATERMARK
        self._idle = False

    @property
    def generates(self) -> bool:
        return self.strategy.generator_factory is not None

    def for_batch(self) -> None:
        """BATCH execution: the watermark is perfect (none until ``MAX_WATERMARK``
        at the end of input), so the strategy's generator and idleness are
        dropped, as Flink ignores them in BATCH mode; its assigner still stamps."""
        self.strategy = replace(self.strategy, generator_factory=None, idleness_ms=None)

    def stamp(
        self,
        records: list[Any],
        previous: list[int] | None,
        operator: str,
        fail: Callable[[str, Exception, Any, bool], Exception],
    ) -> list[int]:
        """Each record's event time from the assigner (``previous``: the timestamps
        the records had, if any; without an assigner they stay);
        ``fail(role, exc, record, True)`` makes the error for a failing assigner."""
        assign = self.strategy.timestamp_assigner
        if assign is None:
            if previous is None:
                raise InvalidConfigurationError(
                    f"watermark strategy of operator '{operator}'",
                    "no timestamp assigner",
                    "its records have no timestamps: add .with_timestamp_assigner(...)",
                )
            return previous
        # One C loop (map) calls the assigner: 147 against 193 ns a record for a
        # loop; extend keeps the times before a failing record, which names it.
        out: list[int] = []
        try:
            out.extend(map(assign, records, repeat(None) if previous is None else previous))
        except Exception as exc:
            raise fail("timestamp assigner", exc, records[len(out)], True) from exc
        if set(map(type, out)) != {int}:  # numpy's integers pass as ints; anything else names its record
            for i, t in enumerate(out):
                if type(t) is not int:
                    try:
                        out[i] = _millis(t)
                    except TypeError as exc:
                        raise fail("timestamp assigner", exc, records[i], True) from exc
        return out

    def generator(self, split: Hashable) -> WatermarkGenerator:
        gen = self.generators.get(split)
        if gen is None:
            assert self.strategy.generator_factory is not None
            gen = self.generators[split] = self.strategy.generator_factory()
        return gen

    def on_batch(self, split: Hashable, timestamps: list[int]) -> None:
        if self.generates and timestamps:
            self.generator(split).on_batch(timestamps)
            self._active.add(split)

    def emit(self, now_ms: float, splits: Iterable[Hashable], output: WatermarkOutput) -> None:
        idleness = self.strategy.idleness_ms
        watermarks = []
        for split in splits:
            if split in self._active:
                self._last_active_ms[split] = now_ms
            last = self._last_active_ms.setdefault(split, now_ms)
            if idleness is None or now_ms - last < idleness:
                watermarks.append(self.generator(split).current_watermark())
        self._active.clear()
        if not watermarks:
            if not self._idle:
                self._idle = True
                output.emit_watermark_status(WatermarkStatus(idle=True))
            return
        if self._idle:
            self._idle = False
            output.emit_watermark_status(WatermarkStatus(idle=False))
        wm = min(watermarks)
        if wm > self.emitted:
            self.emitted = wm
            output.emit_watermark(Watermark(wm))


def _millis(t: Any) -> int:
    if isinstance(t, bool) or not isinstance(t, numbers.Integral):
        raise TypeError(f"returned {t!r} ({type(t).__name__}); an event time is an int of milliseconds since the epoch")
    return int(t)


class TimestampsAndWatermarksOperator(StreamOperator):
    """``stream.assign_timestamps_and_watermarks(strategy)`` (Flink's operator of the
    same name): stamps each record with the assigner (without one, records keep
    the timestamps they have) and runs one watermark generator per subtask,
    emitting its watermark every auto-watermark interval of processing time, and
    once more at ``finish()``. Watermarks from upstream are dropped, except
    ``MAX_WATERMARK`` (the end of input), and so are upstream idleness statuses:
    this operator's strategy alone says how far event time is. As in Flink, the
    generator is not checkpointed: after a restore it starts from scratch, and
    the records replayed since the checkpoint bring the watermark back. In
    BATCH mode it only stamps: the end of input's ``MAX_WATERMARK`` is the one
    watermark."""

    def __init__(self, name: str, uid: str, strategy: WatermarkStrategy, interval_ms: int) -> None:
        super().__init__(name, uid)
        self._watermarks = WatermarkEmitter(strategy, interval_ms)
        self._next_emit_ms: int | None = None  # None: nothing more to emit

    def open(self) -> None:
        if self.ctx.batch:
            self._watermarks.for_batch()
        if self._watermarks.generates:
            self._next_emit_ms = now_ms() + self._watermarks.interval_ms

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        wm = self._watermarks
        stamped = wm.stamp(records, timestamps, self.name, self.fail)
        wm.on_batch(None, stamped)
        self.output.collect(records, stamped)

    def next_processing_timer(self) -> int | None:
        return self._next_emit_ms

    def on_processing_time(self, now_ms: int) -> None:
        if self._next_emit_ms is not None and now_ms >= self._next_emit_ms:
            self._watermarks.emit(now_ms, [None], self.output)
            self._next_emit_ms = now_ms + self._watermarks.interval_ms

    def process_watermark(self, watermark: Watermark) -> None:
        if watermark.timestamp == MAX_WATERMARK:
            self._next_emit_ms = None
            self._watermarks.emitted = MAX_WATERMARK
            self.output.emit_watermark(watermark)

    def process_watermark_status(self, status: WatermarkStatus) -> None:
        pass

    def finish(self) -> None:
        if self._next_emit_ms is not None:
            self._watermarks.emit(now_ms(), [None], self.output)
            self._next_emit_ms = None

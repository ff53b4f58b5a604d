"""Event time: durations, timestamp assigners, watermark strategies and generators.

A :class:`WatermarkStrategy` says how a source stamps records with event time and
how it tells downstream how far event time has progressed. Sources run one
watermark generator per split; a source subtask's watermark is the minimum over
its splits that are not idle, and a task's watermark is the minimum over its
input channels that are neither idle nor finished.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, Callable

from runtime.errors import InvalidConfigurationError
from runtime.events import MIN_WATERMARK


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


def _as_assigner(assigner: Any) -> Callable[[Any], int]:
    extract = getattr(assigner, "extract_timestamp", None)
    if callable(extract):
        return lambda record: extract(record, None)
    if callable(assigner):
        return assigner
    raise InvalidConfigurationError("timestamp assigner", assigner, "must be callable or have extract_timestamp(value, record_timestamp)")


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source stamps records (``with_timestamp_assigner``) and generates
    watermarks. Build one with the static constructors."""

    generator_factory: Callable[[], WatermarkGenerator] | None
    timestamp_assigner: Callable[[Any], int] | None = None
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
        """``assigner(record) -> int`` milliseconds (or a PyFlink TimestampAssigner)."""
        return replace(self, timestamp_assigner=_as_assigner(assigner))

    def with_idleness(self, idle_timeout_ms: int) -> "WatermarkStrategy":
        """A split with no records for this long stops holding back the watermark."""
        if idle_timeout_ms <= 0:
            raise InvalidConfigurationError("idleness", idle_timeout_ms, "must be positive")
        return replace(self, idleness_ms=int(idle_timeout_ms))

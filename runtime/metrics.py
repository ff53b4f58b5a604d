"""User metrics, PyFlink's ``runtime_context.get_metrics_group()``: counters,
meters, gauges and distributions a function keeps while it runs. Each operator
subtask has its own group; the values live in that subtask and are read from
the metric objects themselves (weir reports them nowhere yet, and they start
again from zero after a restore, as Flink's do)."""

from __future__ import annotations

import time
from typing import Any, Callable


class Counter:
    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count


class Meter:
    """Events, and their rate per second over the last ``time_span_in_seconds``."""

    def __init__(self, time_span_in_seconds: int) -> None:
        self._span_s = time_span_in_seconds
        self._count = 0
        self._events: list[tuple[float, int]] = []  # (monotonic time, events) within the span

    def mark_event(self, value: int = 1) -> None:
        now = time.monotonic()
        self._count += value
        self._events = [(t, n) for t, n in self._events if now - t < self._span_s] + [(now, value)]

    def get_count(self) -> int:
        return self._count

    def get_rate(self) -> float:
        now = time.monotonic()
        return sum(n for t, n in self._events if now - t < self._span_s) / self._span_s


class Distribution:
    """The count, sum, minimum and maximum of the values it was updated with."""

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0
        self.min: int | None = None
        self.max: int | None = None

    def update(self, value: int) -> None:
        self.count += 1
        self.sum += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)


class MetricGroup:
    """Named metrics, and subgroups (``add_group(name)``, or ``add_group(key, value)``
    for Flink's key-value groups). Asking twice for one name gives the same metric."""

    def __init__(self) -> None:
        self.metrics: dict[str, Counter | Meter | Distribution | Callable[[], int]] = {}
        self.groups: dict[str, MetricGroup] = {}

    def add_group(self, name: str, extra: str | None = None) -> "MetricGroup":
        key = name if extra is None else f"{name}.{extra}"
        return self.groups.setdefault(key, MetricGroup())

    def counter(self, name: str) -> Counter:
        return self._named(name, Counter)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._named(name, lambda: Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        return self._named(name, Distribution)

    def gauge(self, name: str, obj: Callable[[], int]) -> None:
        self.metrics[name] = obj

    def _named(self, name: str, make: Callable[[], Any]) -> Any:
        metric = self.metrics.get(name)
        if metric is None:
            metric = self.metrics[name] = make()
        return metric

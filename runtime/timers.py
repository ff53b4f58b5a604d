"""Timers of a keyed operator: event time and processing time, per key and namespace.

Timers are keyed state: they live in the operator's keyed backend (one table per
time domain: key -> set of (timestamp, namespace)), so they are snapshotted per
key group and restored, also with another parallelism. A heap per domain orders
them for firing; it is rebuilt from the tables on restore, and an entry whose
timer was deleted is skipped when it comes up.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from typing import Any, Iterator

from weir.runtime.events import MIN_WATERMARK
from weir.runtime.state import KeyedStateBackend


class TimeDomain(enum.Enum):
    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


_TABLES = {TimeDomain.EVENT_TIME: "_timers/event", TimeDomain.PROCESSING_TIME: "_timers/processing"}


class InternalTimerService:
    def __init__(self, backend: KeyedStateBackend) -> None:
        self._backend = backend
        self._tables = {d: backend.table(name) for d, name in _TABLES.items()}
        self._heaps: dict[TimeDomain, list[tuple[int, int, Any, Any]]] = {d: [] for d in TimeDomain}
        self._seq = itertools.count()
        self.watermark = MIN_WATERMARK
        self._quiesced = False
        for domain, table in self._tables.items():  # after a restore
            for key, timers in table.items():
                for ts, ns in timers:
                    self._heaps[domain].append((ts, next(self._seq), key, ns))
            heapq.heapify(self._heaps[domain])

    def quiesce(self) -> None:
        """From now on :meth:`register` ignores new timers (a BATCH job's end of
        input, where every timer fires once)."""
        self._quiesced = True

    def clear(self, domain: TimeDomain) -> None:
        """Drop every timer of ``domain``."""
        self._backend.touched.update(self._tables[domain])
        self._tables[domain].clear()
        self._heaps[domain].clear()

    def register(self, domain: TimeDomain, timestamp: int, namespace: Any = None, key: Any = None) -> None:
        if self._quiesced:
            return
        key = self._backend.current_key if key is None else key
        timers = self._tables[domain].setdefault(key, set())
        if (timestamp, namespace) not in timers:
            timers.add((timestamp, namespace))
            heapq.heappush(self._heaps[domain], (timestamp, next(self._seq), key, namespace))

    def delete(self, domain: TimeDomain, timestamp: int, namespace: Any = None, key: Any = None) -> None:
        key = self._backend.current_key if key is None else key
        timers = self._tables[domain].get(key)
        if timers is not None:
            timers.discard((timestamp, namespace))
            if not timers:
                del self._tables[domain][key]

    def due(self, domain: TimeDomain, time: int) -> Iterator[tuple[int, Any, Any]]:
        """Pop and yield ``(timestamp, key, namespace)`` of every live timer at or
        before ``time``, in time order. Timers registered while iterating fire too
        if they are due."""
        heap, table = self._heaps[domain], self._tables[domain]
        while heap and heap[0][0] <= time:
            ts, _, key, ns = heapq.heappop(heap)
            timers = table.get(key)
            if timers is None or (ts, ns) not in timers:
                continue  # deleted
            timers.discard((ts, ns))
            if not timers:
                del table[key]
            yield ts, key, ns

    def next_time(self, domain: TimeDomain) -> int | None:
        heap, table = self._heaps[domain], self._tables[domain]
        while heap:
            ts, _, key, ns = heap[0]
            if (ts, ns) in table.get(key, ()):
                return ts
            heapq.heappop(heap)
        return None


class TimerService:
    """What a user function sees: timers for the current key."""

    def __init__(self, timers: InternalTimerService, now_ms: Any) -> None:
        self._timers = timers
        self._now_ms = now_ms

    def current_processing_time(self) -> int:
        return self._now_ms()

    def current_watermark(self) -> int:
        return self._timers.watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        self._timers.register(TimeDomain.EVENT_TIME, int(timestamp))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._timers.register(TimeDomain.PROCESSING_TIME, int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._timers.delete(TimeDomain.EVENT_TIME, int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._timers.delete(TimeDomain.PROCESSING_TIME, int(timestamp))

"""Timers of a keyed operator: event time and processing time, per key and namespace.

Timers are keyed state: they live in the operator's keyed backend (one table per
time domain: key -> set of (timestamp, namespace)), so they are snapshotted per
key group and restored, also with another parallelism. A heap per domain orders
them for firing; it is rebuilt from the tables on restore. A deleted timer
leaves the table at once; its heap entry is skipped when it comes up, and once
the heap holds more deleted entries than live ones it is rebuilt from the
tables, so a function that deletes and registers a timer for every record (an
inactivity timeout) keeps memory in proportion to its live timers.
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
        self._live = {d: 0 for d in TimeDomain}  # timers in each table (the heap may hold deleted ones too)
        self._seq = itertools.count()
        self.watermark = MIN_WATERMARK
        self._quiesced = False
        for domain in TimeDomain:  # after a restore
            self._rebuild(domain)

    def _rebuild(self, domain: TimeDomain) -> None:
        """The heap of ``domain`` from its table: every live timer, no deleted one."""
        heap = [(ts, next(self._seq), key, ns) for key, timers in self._tables[domain].items() for ts, ns in timers]
        heapq.heapify(heap)
        self._heaps[domain] = heap
        self._live[domain] = len(heap)

    def quiesce(self) -> None:
        """From now on :meth:`register` ignores new timers (a BATCH job's end of
        input, where every timer fires once)."""
        self._quiesced = True

    def clear(self, domain: TimeDomain) -> None:
        """Drop every timer of ``domain``."""
        self._backend.touched.update(self._tables[domain])
        self._tables[domain].clear()
        self._heaps[domain].clear()
        self._live[domain] = 0

    def register(self, domain: TimeDomain, timestamp: int, namespace: Any = None, key: Any = None) -> None:
        if self._quiesced:
            return
        key = self._backend.current_key if key is None else key
        timers = self._tables[domain].setdefault(key, set())
        if (timestamp, namespace) not in timers:
            timers.add((timestamp, namespace))
            self._live[domain] += 1
            heap = self._heaps[domain]
            heapq.heappush(heap, (timestamp, next(self._seq), key, namespace))
            if len(heap) > 2 * self._live[domain] + 1024:  # mostly deleted timers
                self._rebuild(domain)

    def delete(self, domain: TimeDomain, timestamp: int, namespace: Any = None, key: Any = None) -> None:
        key = self._backend.current_key if key is None else key
        timers = self._tables[domain].get(key)
        if timers is not None and (timestamp, namespace) in timers:
            timers.discard((timestamp, namespace))
            self._live[domain] -= 1
            if not timers:
                del self._tables[domain][key]

    def due(self, domain: TimeDomain, time: int) -> Iterator[tuple[int, Any, Any]]:
        """Pop and yield ``(timestamp, key, namespace)`` of every live timer at or
        before ``time``, in time order. Timers registered while iterating fire too
        if they are due."""
        heaps, table = self._heaps, self._tables[domain]
        while (heap := heaps[domain]) and heap[0][0] <= time:  # a timer registered meanwhile may rebuild it
            ts, _, key, ns = heapq.heappop(heap)
            timers = table.get(key)
            if timers is None or (ts, ns) not in timers:
                continue  # deleted
            timers.discard((ts, ns))
            self._live[domain] -= 1
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

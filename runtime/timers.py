"""Timers of a keyed operator: event time and processing time, per key and namespace.

Timers are keyed state, kept by the operator's keyed backend as one queue per
time domain (``KeyedStateBackend.timers``, see ``weir.runtime.timer_queues``),
so they are snapshotted per key group and restored, also with another
parallelism. On the heap a queue is a table of every key's timers and an
indexed heap of them; in RocksDB the timers sorted by time within each key
group, with only each group's earliest in memory. Either way a deleted timer is
gone at once, so a function that deletes and registers a timer for every record
(an inactivity timeout) keeps what it stores in proportion to its live timers.
"""

from __future__ import annotations

import enum
from typing import Any, Iterator

from weir.runtime.events import MIN_WATERMARK
from weir.runtime.state import KeyedStateBackend
from weir.runtime.timer_queues import TIMERS


class TimeDomain(enum.Enum):
    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


_NAMES = {TimeDomain.EVENT_TIME: f"{TIMERS}event", TimeDomain.PROCESSING_TIME: f"{TIMERS}processing"}


class InternalTimerService:
    """The timers an operator registers, deletes and fires, for the backend's
    current key unless given one. Loop thread only."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        self._backend = backend
        self._queues = {d: backend.timers(name) for d, name in _NAMES.items()}
        self.watermark = MIN_WATERMARK
        self._quiesced = False

    def quiesce(self) -> None:
        """From now on :meth:`register` ignores new timers (a BATCH job's end of
        input, where every timer fires once)."""
        self._quiesced = True

    def clear(self, domain: TimeDomain) -> None:
        """Drop every timer of ``domain``."""
        self._queues[domain].clear()

    def register(self, domain: TimeDomain, timestamp: int, namespace: Any = None, key: Any = None) -> None:
        if not self._quiesced:
            self._queues[domain].add(timestamp, self._backend.current_key if key is None else key, namespace)

    def delete(self, domain: TimeDomain, timestamp: int, namespace: Any = None, key: Any = None) -> None:
        self._queues[domain].remove(timestamp, self._backend.current_key if key is None else key, namespace)

    def due(self, domain: TimeDomain, time: int) -> Iterator[tuple[int, Any, Any]]:
        """Pop and yield ``(timestamp, key, namespace)`` of every timer at or before
        ``time``, in time order. Timers registered while iterating fire too if
        they are due."""
        queue = self._queues[domain]
        while (ts := queue.peek()) is not None and ts <= time:
            yield queue.pop()

    def next_time(self, domain: TimeDomain) -> int | None:
        return self._queues[domain].peek()


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

"""Time, injected: code that decides by time takes a :class:`Clock`, so a test
moves time by hand (a :class:`ManualClock`) instead of sleeping and hoping.

``now()`` is monotonic seconds: the zero means nothing, only differences do.
:data:`SYSTEM_CLOCK` is the machine's and the default everywhere. Code that takes
a plain ``Callable[[], float]`` (the job master, a watched folder's enumerator)
takes ``clock.now``.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds. Safe to call from any thread."""
        ...


class SystemClock:
    """The machine's monotonic clock."""

    def now(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """Time that moves only when a test says so: :meth:`advance` or :meth:`set`
    moves it, forward only, and every thread reading it sees the new time at
    once. Thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time ``seconds`` forward; the new time."""
        if seconds < 0:
            raise ValueError(f"a manual clock moves forward only, not by {seconds}s")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, now: float) -> None:
        """Move time forward to ``now``."""
        with self._lock:
            if now < self._now:
                raise ValueError(f"a manual clock moves forward only: it reads {self._now}, not {now}")
            self._now = now


__all__ = ["Clock", "ManualClock", "SYSTEM_CLOCK", "SystemClock"]

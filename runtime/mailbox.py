"""A task's mailbox: the one queue its loop thread reads.

Any thread may put letters; only the loop thread takes them. Control letters
(trigger, notify, cancel, ...) overtake data. Data arrives per input channel with
a sequence number, possibly out of order (Ray runs a threaded actor's calls in no
set order); the mailbox hands out each channel's deliveries strictly in sequence.
Each channel holds at most ``capacity`` deliveries: a producer putting more blocks
until the loop thread took one, which is what backpressure rests on. Channels the
barrier handler holds back are skipped by :meth:`take`.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Collection, Generic, TypeVar


class MailboxClosedError(Exception):
    pass


class DataLetter:
    __slots__ = ("channel", "payload")

    def __init__(self, channel: int, payload: Any) -> None:
        self.channel = channel
        self.payload = payload


# The control letters a mailbox takes (a task's, or a job master's: see letters.py).
L = TypeVar("L")


class Mailbox(Generic[L]):
    def __init__(self, channels: int, capacity: int = 4) -> None:
        self._cond = threading.Condition()
        self._control: collections.deque[L] = collections.deque()
        self._pending: list[dict[int, Any]] = [{} for _ in range(channels)]
        self._next_seq = [0] * channels
        self._capacity = capacity
        self._rr = 0
        self._closed = False
        self.idle_s = 0.0  # time take() spent waiting for a letter (the loop's idle time); read by any thread

    @property
    def queued(self) -> int:
        """Data deliveries waiting to be taken, over every channel (a snapshot, unlocked)."""
        return sum(len(p) for p in self._pending)

    @property
    def channels(self) -> int:
        """How many input channels it takes data on: 0 to ``channels - 1``."""
        return len(self._pending)

    def put_control(self, letter: L) -> None:
        with self._cond:
            if self._closed:
                raise MailboxClosedError("mailbox closed")
            self._control.append(letter)
            self._cond.notify_all()

    def put_data(self, channel: int, seq: int, payload: Any) -> None:
        with self._cond:
            pending = self._pending[channel]
            if seq < self._next_seq[channel] or seq in pending:
                raise ValueError(f"delivery {seq} on channel {channel} arrived twice")
            # Block only while the channel's head is there to be taken: a delivery that
            # fills a gap in the sequence must get in, or the channel would stall.
            while not self._closed and len(pending) >= self._capacity and self._next_seq[channel] in pending:
                self._cond.wait()
            if self._closed:
                raise MailboxClosedError("mailbox closed")
            pending[seq] = payload
            self._cond.notify_all()

    def take(self, timeout_s: float | None, blocked: Collection[int] = ()) -> L | DataLetter | None:
        """The next letter, or ``None`` after ``timeout_s`` (``None``: wait forever)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._control:
                    return self._control.popleft()
                letter = self._take_data(blocked)
                if letter is not None:
                    self._cond.notify_all()
                    return letter
                if self._closed:
                    raise MailboxClosedError("mailbox closed")
                # Timed only when it waits: a busy loop never gets here.
                waited = time.monotonic()
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - waited
                    if remaining <= 0:
                        return None
                    self._cond.wait(remaining)
                self.idle_s += time.monotonic() - waited

    def _take_data(self, blocked: Collection[int]) -> DataLetter | None:
        n = len(self._pending)
        for i in range(n):
            channel = (self._rr + i) % n
            if channel in blocked:
                continue
            seq = self._next_seq[channel]
            pending = self._pending[channel]
            if seq in pending:
                self._next_seq[channel] = seq + 1
                self._rr = channel + 1
                return DataLetter(channel, pending.pop(seq))
        return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

"""A source reader that stops at a known point, for tests that act on a running
job there (a savepoint, a stop, a kill) instead of sleeping until it is probably
there; and a generator source whose readers stop there until a file appears,
which reaches task actors in other processes; and a generator source paced until
a file appears, then read at full speed."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from weir.runtime.sources import GeneratorSource, Poll, RateLimit, SourceReader


class _Wrapping(SourceReader):
    """A reader that passes everything but ``poll`` on to ``self._reader``."""

    _reader: SourceReader

    def add_splits(self, splits: list[Any]) -> None:
        self._reader.add_splits(splits)

    def snapshot_splits(self) -> list[Any]:
        return self._reader.snapshot_splits()

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        return self._reader.snapshot_state(checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._reader.notify_checkpoint_complete(checkpoint_id)

    def close(self) -> None:
        self._reader.close()


class PausingReader(_Wrapping):
    """Passes on the first ``records`` records of ``reader``, then reads no more
    and asks for no other split: its task waits (and takes checkpoints) until
    the job is stopped, or until ``released()`` says to read on. Sets
    ``reached`` when it stops."""

    WAIT_S = 0.01  # a letter wakes the task sooner

    def __init__(
        self,
        reader: SourceReader,
        records: int,
        reached: threading.Event,
        released: Callable[[], bool] = lambda: False,
    ) -> None:
        self._reader, self._left, self._reached, self._released = reader, records, reached, released

    def poll(self, max_records: int) -> Poll:
        if self._left <= 0:
            if self._released():
                return self._reader.poll(max_records)
            self._reached.set()
            return Poll([], wait_s=self.WAIT_S)
        poll = self._reader.poll(min(max_records, self._left))
        self._left -= len(poll.records)
        return poll


class GatedGenerator(GeneratorSource):
    """``from_generator(generator, count, records_per_second)`` whose every reader
    passes on ``free`` records (at that pace, if given), then waits until the
    file ``gate`` exists (a test creates it): what the test does meanwhile
    happens while the source still runs, however slowly the job started."""

    def __init__(
        self,
        generator: Callable[[int], Any],
        count: int,
        gate: str,
        free: int,
        records_per_second: float | None = None,
    ) -> None:
        super().__init__(generator, count, records_per_second)
        self.gate, self.free = gate, free

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        gate = self.gate
        reader = super().create_reader(subtask, parallelism)
        return PausingReader(reader, self.free, threading.Event(), released=lambda: os.path.exists(gate))


class PacedUntil(_Wrapping):
    """Passes on ``reader``'s records at most ``per_second`` a second until
    ``released()`` says so, then as fast as ``reader`` reads."""

    def __init__(self, reader: SourceReader, per_second: float, released: Callable[[], bool]) -> None:
        self._reader, self._released = reader, released
        self._limit: RateLimit | None = RateLimit(per_second)

    def poll(self, max_records: int) -> Poll:
        if self._limit is not None and self._released():
            self._limit = None
        if self._limit is None:
            return self._reader.poll(max_records)
        max_records, wait_s = self._limit.allowance(max_records)
        if not max_records:
            return Poll([], wait_s=wait_s)
        poll = self._reader.poll(max_records)
        self._limit.spend(len(poll.records))
        return poll


class PacedUntilGate(GeneratorSource):
    """``from_generator(generator, count, records_per_second)`` whose readers keep
    to the rate only until the file ``gate`` exists (a test creates it): the test
    acts on the job while its records flow at a known pace (a kill lands with
    records in flight, after checkpoints), then lets the rest run out at full
    speed instead of for the paced seconds left."""

    def __init__(self, generator: Callable[[int], Any], count: int, records_per_second: float, gate: str) -> None:
        super().__init__(generator, count, None)
        self.per_second, self.gate = records_per_second, gate

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        gate = self.gate
        reader = super().create_reader(subtask, parallelism)
        return PacedUntil(reader, self.per_second / parallelism, released=lambda: os.path.exists(gate))

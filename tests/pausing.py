"""A source reader that stops at a known point, for tests that act on a running
job there (a savepoint, a stop) instead of sleeping until it is probably there."""

from __future__ import annotations

import threading
from typing import Any

from weir.runtime.sources import Poll, SourceReader


class PausingReader(SourceReader):
    """Passes on the first ``records`` records of ``reader``, then reads no more
    and asks for no other split: its task waits (and takes checkpoints) until
    the job is stopped. Sets ``reached`` when it stops."""

    WAIT_S = 0.01  # a letter wakes the task sooner

    def __init__(self, reader: SourceReader, records: int, reached: threading.Event) -> None:
        self._reader, self._left, self._reached = reader, records, reached

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

    def poll(self, max_records: int) -> Poll:
        if self._left <= 0:
            self._reached.set()
            return Poll([], wait_s=self.WAIT_S)
        poll = self._reader.poll(min(max_records, self._left))
        self._left -= len(poll.records)
        return poll

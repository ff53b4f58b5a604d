"""``stream.execute_and_collect()``: a job's records back in the driver, exactly once.

A :class:`CollectSink` (parallelism 1) is a two-phase-commit sink whose
transaction is the records since the last checkpoint: ``prepare_commit`` turns
them into one committable with a unique id, kept in the checkpoint, and
``commit`` (at the checkpoint's completion, again after a restore) publishes it
on a :class:`CollectChannel` that the executor supplies: a queue in this process
for the in-process executor, a Ray queue for Ray (``weir.actors.collect``), so this
module stays free of Ray. The driver's :class:`CloseableIterator` hands out each
committable's records once (a re-commit after a restore repeats an id it has
seen), so the iterator shows exactly what completed checkpoints committed: never
a record twice, never one a failover took back. Records therefore arrive per
checkpoint; without periodic checkpoints a bounded job delivers all of them at
its final checkpoint, and an unbounded one would deliver nothing, which
``execute_and_collect`` refuses.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import uuid
import weakref
from typing import Any, Iterator

from weir.runtime.errors import WeirError
from weir.runtime.executor import CollectChannel, Committed, JobClient, Publisher
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import Sink, SinkWriter

log = logging.getLogger(__name__)


class CollectSink(Sink):
    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _CollectWriter(self.publisher)


class _CollectWriter(SinkWriter):
    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._records: list[Any] = []

    def write(self, records: list[Any]) -> None:
        self._records.extend(records)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if not self._records:
            return []
        committed, self._records = (uuid.uuid4().hex, self._records), []
        return [committed]

    def commit(self, committables: list[Any]) -> None:
        self._publisher.publish(committables)


class CloseableIterator(Iterator[Any]):
    """PyFlink's ``CloseableIterator``: the records of ``execute_and_collect()``,
    as completed checkpoints commit them, while the job runs. ``close()`` (or
    leaving a ``with`` block) cancels the job if it still runs; so does dropping
    the iterator unclosed (a notebook cell re-run), since no one could read what
    the job goes on committing. Iteration ends
    when the job has finished and every committed record was handed out; if the
    job failed or was cancelled by someone else, that error is raised after the
    committed records. Not thread-safe: one reader."""

    POLL_S = 0.05  # how long one wait for records lasts before the job's status is asked again

    def __init__(self, client: "JobClient", channel: CollectChannel) -> None:
        self.job_client = client  # weir's: the running job (PyFlink's iterator has none)
        self._channel = channel
        self._seen: set[str] = set()
        self._buffer: collections.deque[Any] = collections.deque()
        self._ended = False
        self._error: BaseException | None = None
        self._dropped = weakref.finalize(self, _cancel_dropped, client, channel)

    def __iter__(self) -> "CloseableIterator":
        return self

    def __next__(self) -> Any:
        while not self._buffer:
            if self._ended:
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                raise StopIteration
            self._fetch()
        return self._buffer.popleft()

    def _fetch(self) -> None:
        # A job that has ended published everything before: one more poll drains it.
        ended = self.job_client.status().is_terminal
        for committed_id, records in self._channel.poll(0 if ended else self.POLL_S):
            if committed_id not in self._seen:  # else a restore committed it again
                self._seen.add(committed_id)
                self._buffer.extend(records)
        if ended:
            self._ended = True
            self._dropped.detach()
            self._channel.close()
            try:
                self.job_client.wait()
            except WeirError as exc:
                self._error = exc

    def close(self) -> None:
        if not self._ended:
            self._ended = True
            self._buffer.clear()
            self._dropped.detach()
            _cancel_if_running(self.job_client, self._channel)

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _cancel_if_running(client: "JobClient", channel: CollectChannel) -> None:
    try:
        running = not client.status().is_terminal
    except WeirError:
        running = False  # its record is gone: it ended long ago
    if running:
        client.cancel()
    channel.close()


def _cancel_dropped(client: "JobClient", channel: CollectChannel) -> None:
    """An iterator was collected unclosed; also at the driver's exit."""
    log.warning(
        "the execute_and_collect() iterator of job '%s' was dropped without close(): cancelling the job",
        client.job_name,
    )
    try:
        _cancel_if_running(client, channel)
    except Exception as exc:  # e.g. Ray already shut down at the driver's exit
        log.warning("could not cancel job '%s': %s", client.job_name, exc)


# ------------------------------------------------------------------ in-process
_LOCAL_CHANNELS: dict[str, "queue.SimpleQueue[Committed]"] = {}
_LOCAL_LOCK = threading.Lock()


class LocalCollectChannel(CollectChannel):
    """For the in-process executor: a queue of this process, found by id (what
    the task gets is a pickled copy of the sink, which must not hold the queue)."""

    def __init__(self) -> None:
        self._id = uuid.uuid4().hex
        self._queue: "queue.SimpleQueue[Committed]" = queue.SimpleQueue()
        with _LOCAL_LOCK:
            _LOCAL_CHANNELS[self._id] = self._queue

    def publisher(self) -> Publisher:
        return _LocalPublisher(self._id)

    def poll(self, timeout_s: float) -> list[Committed]:
        try:
            out = [self._queue.get(timeout=timeout_s) if timeout_s > 0 else self._queue.get_nowait()]
        except queue.Empty:
            return []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out

    def close(self) -> None:
        with _LOCAL_LOCK:
            _LOCAL_CHANNELS.pop(self._id, None)


class _LocalPublisher:
    def __init__(self, channel_id: str) -> None:
        self._channel_id = channel_id

    def publish(self, committed: list[Committed]) -> None:
        with _LOCAL_LOCK:
            q = _LOCAL_CHANNELS.get(self._channel_id)
        if q is None:
            return  # the iterator was closed: the job is being cancelled
        for c in committed:
            q.put(c)

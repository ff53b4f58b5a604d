"""The Ray end of ``execute_and_collect``: a Ray queue (an actor owned by the
driver) between the collect sink's task actor and the driver's iterator. The
protocol (commit at checkpoints, ids against repeats) is in ``weir.runtime.collect``."""

from __future__ import annotations

from typing import Any

from ray.util.queue import Empty, Queue

from weir.runtime.executor import CollectChannel, Committed


class RayCollectChannel(CollectChannel):
    def __init__(self) -> None:
        # No CPU: it must not hold a share a task actor needs.
        self._queue = Queue(actor_options={"num_cpus": 0})

    def publisher(self) -> "_RayPublisher":
        return _RayPublisher(self._queue)

    def poll(self, timeout_s: float) -> list[Committed]:
        try:
            first = self._queue.get(block=timeout_s > 0, timeout=timeout_s if timeout_s > 0 else None)
        except Empty:
            return []
        return [first, *self._queue.get_nowait_batch(self._queue.qsize())]

    def close(self) -> None:
        self._queue.shutdown(force=True)  # the job has ended: nothing publishes any more


class _RayPublisher:
    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def publish(self, committed: list[Committed]) -> None:
        self._queue.put_nowait_batch(committed)  # waits until the queue holds them (unbounded: never full)

"""Async I/O, PyFlink 2.x's ``AsyncDataStream``: an :class:`AsyncFunction`'s
``async def async_invoke(value)`` awaits a remote service for each record,
many records at once, instead of one after another.

    AsyncDataStream.unordered_wait(stream, Lookup(), timeout=Duration.of_seconds(5), capacity=100)

As Flink's ``AsyncWaitOperator``: the operator keeps a queue of at most
``capacity`` records whose calls are in flight, on an event loop of its own in a
thread of its own, and the queue stays full across batches: a record waits
only when the queue is full (backpressure), and the task's loop goes on taking
records, watermarks and barriers while the calls run. Results go out as the
task looks (at each batch, and about every millisecond while calls are in
flight): ``ordered_wait`` in its records' order, ``unordered_wait`` as the
calls complete, but never past a watermark that came after their record
(watermarks wait in the queue). A checkpoint stores the records still in the
queue, and a restore calls them again; the end of input waits for every call.
A result keeps its record's timestamp. A call that takes longer than
``timeout`` (attempts and backoffs included) gives ``timeout(value)``'s
records, by default a ``TimeoutError`` that fails the task. An
:class:`AsyncRetryStrategy` calls again after a failure or a result its
predicates accept.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import threading
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, TypeVar, cast

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.events import Watermark
from weir.runtime.functions import Function
from weir.runtime.operators import UdfOperator, now_ms
from weir.runtime.state import OperatorSnapshot

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class AsyncFunction(Function, Generic[IN, OUT]):
    """``async def async_invoke(value)`` returns the records for ``value`` (a list,
    or None for none); ``timeout(value)`` gives them when the call times out."""

    @abstractmethod
    async def async_invoke(self, value: IN) -> list[OUT]: ...

    def timeout(self, value: IN) -> list[OUT]:
        raise TimeoutError(f"async_invoke did not complete in time for {value!r}")


class AsyncRetryStrategy:
    """How often ``async_invoke`` is tried for a record: again while an attempt
    fails with an error ``exception_predicate`` accepts, or returns a result
    ``result_predicate`` accepts, up to ``max_attempts`` attempts in all, waiting
    ``backoff_ms(attempt)`` milliseconds after attempt number ``attempt``."""

    def __init__(
        self,
        max_attempts: int,
        backoff_ms: Callable[[int], float],
        result_predicate: Callable[[list[Any]], bool] | None = None,
        exception_predicate: Callable[[Exception], bool] | None = None,
    ) -> None:
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidConfigurationError(
                "async retry max_attempts", max_attempts, "must be a whole number of at least 1"
            )
        self.max_attempts = max_attempts
        self.backoff_ms = backoff_ms
        self.result_predicate = result_predicate
        self.exception_predicate = exception_predicate

    @staticmethod
    def no_restart() -> "AsyncRetryStrategy":
        return AsyncRetryStrategy(1, lambda attempt: 0)

    @staticmethod
    def fixed_delay(
        max_attempts: int,
        backoff_time_millis: int,
        result_predicate: Callable[[list[Any]], bool] | None = None,
        exception_predicate: Callable[[Exception], bool] | None = None,
    ) -> "AsyncRetryStrategy":
        _positive("async retry backoff_time_millis", backoff_time_millis)
        return AsyncRetryStrategy(
            max_attempts, lambda attempt: backoff_time_millis, result_predicate, exception_predicate
        )

    @staticmethod
    def exponential_backoff(
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: Callable[[list[Any]], bool] | None = None,
        exception_predicate: Callable[[Exception], bool] | None = None,
    ) -> "AsyncRetryStrategy":
        for setting, value in (
            ("initial_delay", initial_delay),
            ("max_retry_delay", max_retry_delay),
            ("multiplier", multiplier),
        ):
            _positive(f"async retry {setting}", value)
        return AsyncRetryStrategy(
            max_attempts,
            lambda attempt: min(initial_delay * multiplier ** (attempt - 1), max_retry_delay),
            result_predicate,
            exception_predicate,
        )

    def retries(self, attempt: int, result: list[Any] | None, error: Exception | None) -> bool:
        """Whether attempt number ``attempt``, which gave ``result`` or failed with ``error``, is tried again."""
        if attempt >= self.max_attempts:
            return False
        if error is not None:
            return self.exception_predicate is not None and bool(self.exception_predicate(error))
        return self.result_predicate is not None and bool(self.result_predicate(result or []))


def _positive(setting: str, value: float) -> None:
    if not isinstance(value, (int, float)) or value <= 0:
        raise InvalidConfigurationError(setting, value, "must be positive")


class _Failed(Exception):
    """An attempt's error, carried past the timeout (the user's own TimeoutError is not a time-out)."""


@dataclass
class _InFlight:
    """A record whose call runs (``future``), or a watermark waiting its turn (``future`` None)."""

    record: Any
    timestamp: int | None
    future: concurrent.futures.Future[Any] | None = None


class AsyncWaitOperator(UdfOperator):
    """Runs an :class:`AsyncFunction` (see the module docstring). The calls run
    on an event loop in a thread of the operator's own; everything else (the
    queue, emitting, snapshots) on the task's loop thread. ``close()``, which
    follows every failure and cancel, cancels and awaits whatever is still in
    flight, so ``async_invoke`` sees ``CancelledError`` and must let it through."""

    IN_FLIGHT = "async-in-flight"
    POLL_MS = 1  # while calls run, the task looks for results this often

    def __init__(
        self,
        name: str,
        uid: str,
        function: AsyncFunction[Any, Any],
        timeout_ms: int,
        capacity: int,
        retry: AsyncRetryStrategy,
        ordered: bool,
    ) -> None:
        super().__init__(name, uid, function, function.async_invoke)
        self.timeout_ms, self.capacity, self.retry, self.ordered = timeout_ms, capacity, retry, ordered
        self._queue: collections.deque[_InFlight] = collections.deque()
        self._calls = 0  # entries of the queue with a call

    def open(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"async-{self.name}", daemon=True)
        self._thread.start()
        super().open()
        restored = self.operator_state.lists.pop(self.IN_FLIGHT, [])
        for record, timestamp in restored:  # called again: their results had not gone out
            self._submit(record, timestamp)

    def close(self) -> None:
        if not hasattr(self, "_loop"):  # never opened
            super().close()
            return
        try:
            # Before the function's close(), which may release what the calls use.
            # Left pending, a closed loop's calls were destroyed later by the garbage
            # collector, inside unrelated code (an ast.parse raised SystemError).
            asyncio.run_coroutine_threadsafe(_cancel_all(), self._loop).result()
            super().close()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        for i, r in enumerate(records):
            while self._calls >= self.capacity:  # full: wait for room, as the results allow
                self._wait_for_a_result()
            self._submit(r, None if timestamps is None else timestamps[i])
        self._emit_done()

    def _submit(self, record: Any, timestamp: int | None) -> None:
        future = asyncio.run_coroutine_threadsafe(self._call(record), self._loop)
        self._queue.append(_InFlight(record, timestamp, future))
        self._calls += 1

    def process_watermark(self, watermark: Watermark) -> None:
        """It waits behind the records before it (see the module docstring)."""
        if not self._queue:
            self.output.emit_watermark(watermark)
            return
        self._queue.append(_InFlight(watermark, None))

    def next_processing_timer(self) -> int | None:
        return now_ms() + self.POLL_MS if self._calls else None

    def on_processing_time(self, now_ms: int) -> None:
        self._emit_done()

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        """The records still in the queue: a restore calls them again."""
        self._emit_done()
        snap = super().snapshot_state(checkpoint_id)
        snap.lists[self.IN_FLIGHT] = [(e.record, e.timestamp) for e in self._queue if e.future is not None]
        return snap

    def finish(self) -> None:
        """The end of input: every call completes and its results go out."""
        while self._queue:
            self._wait_for_a_result()
        super().finish()

    def _wait_for_a_result(self) -> None:
        """Block until a result can go out (the head's, if ordered), then emit what can."""
        if self.ordered or self._queue[0].future is None:
            head = next(e for e in self._queue if e.future is not None) if self._calls else None
            if head is not None:
                concurrent.futures.wait([head.future])  # type: ignore[list-item]
        else:
            segment = [e.future for e in self._segment()]
            concurrent.futures.wait(segment, return_when=concurrent.futures.FIRST_COMPLETED)  # type: ignore[arg-type]
        self._emit_done()

    def _segment(self) -> list[_InFlight]:
        """The records before the first waiting watermark."""
        out = []
        for e in self._queue:
            if e.future is None:
                break
            out.append(e)
        return out

    def _emit_done(self) -> None:
        """Emit the results that may go out now, and the watermarks they let through."""
        out: list[Any] = []
        stamps: list[int | None] = []
        queue = self._queue
        while queue:
            if queue[0].future is None:  # a watermark: every record before it is out
                self._flush(out, stamps)
                out, stamps = [], []
                self.output.emit_watermark(queue.popleft().record)
                continue
            if self.ordered:
                if not queue[0].future.done():
                    break
                self._take(queue.popleft(), out, stamps)
                continue
            done = [e for e in self._segment() if e.future.done()]  # type: ignore[union-attr]
            if not done:
                break
            for e in done:
                queue.remove(e)
                self._take(e, out, stamps)
            if queue and queue[0].future is not None:
                break  # the rest of the segment still runs
        self._flush(out, stamps)

    def _take(self, entry: _InFlight, out: list[Any], stamps: list[int | None]) -> None:
        self._calls -= 1
        produced = entry.future.result()  # type: ignore[union-attr]  # a failed call raises here, naming its record
        before = len(out)
        out.extend(produced or ())
        stamps.extend([entry.timestamp] * (len(out) - before))

    def _flush(self, out: list[Any], stamps: list[int | None]) -> None:
        if out:
            self.output.collect(out, cast(list[int], stamps) if any(t is not None for t in stamps) else None)

    async def _call(self, value: Any) -> Iterable[Any] | None:
        function: AsyncFunction[Any, Any] = self.function
        try:
            return await asyncio.wait_for(self._attempts(value), self.timeout_ms / 1000)
        except _Failed as failed:
            raise self.fail("async_invoke", failed.__cause__, value, True) from failed.__cause__  # type: ignore[arg-type]
        except TimeoutError:
            try:
                return function.timeout(value)
            except Exception as exc:
                raise self.fail("timeout", exc, value, True) from exc

    async def _attempts(self, value: Any) -> list[Any] | None:
        attempt = 1
        while True:
            result, error = None, None
            try:
                result = await self.call(value)
            except Exception as exc:
                error = exc
            if not self.retry.retries(attempt, result, error):
                if error is not None:
                    raise _Failed() from error
                return result
            await asyncio.sleep(self.retry.backoff_ms(attempt) / 1000)
            attempt += 1


async def _cancel_all() -> None:
    """On the operator's loop: cancel every call in flight and wait until each has ended."""
    calls = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)


def checked(async_function: Any, timeout_ms: int, capacity: int, retry: AsyncRetryStrategy) -> None:
    """Refuses, naming the setting, what ``AsyncDataStream`` cannot run."""
    if not isinstance(async_function, AsyncFunction) or not inspect.iscoroutinefunction(async_function.async_invoke):
        raise InvalidConfigurationError(
            "async function", async_function, "subclass AsyncFunction with `async def async_invoke(self, value)`"
        )
    _positive("async timeout (ms)", timeout_ms)
    if not isinstance(capacity, int) or capacity < 1:
        raise InvalidConfigurationError("async capacity", capacity, "must be a whole number of at least 1")
    if not isinstance(retry, AsyncRetryStrategy):
        raise InvalidConfigurationError(
            "async retry strategy", retry, "use AsyncRetryStrategy.fixed_delay(...) or no_restart()"
        )


# PyFlink's async_retry_predicates: what a retry strategy's predicates are usually made of.
def empty_result_predicate(result: list[Any]) -> bool:
    return not result


def has_exception_predicate(error: Exception | None) -> bool:
    return error is not None


def exception_type_predicate(error: Exception | None, expected_error_type: type[BaseException]) -> bool:
    return isinstance(error, expected_error_type)

"""Async I/O, PyFlink 2.x's ``AsyncDataStream``: an :class:`AsyncFunction`'s
``async def async_invoke(value)`` awaits a remote service for each record,
many records at once, instead of one after another.

    AsyncDataStream.unordered_wait(stream, Lookup(), timeout=Duration.of_seconds(5), capacity=100)

The operator runs the calls for the records of a batch on an event loop of its
own, at most ``capacity`` at a time, and finishes the batch only when every
call has: no call is in flight when the task takes a checkpoint, so a restore
neither loses nor repeats one (Flink keeps in-flight records in state instead;
weir's batches are small, so a checkpoint waits at most one batch's calls).
``ordered_wait`` emits each batch's results in its records' order,
``unordered_wait`` as the calls complete; either way a result keeps its
record's timestamp and never passes a watermark. A call that takes longer than
``timeout`` (attempts and backoffs included) gives ``timeout(value)``'s
records, by default a ``TimeoutError`` that fails the task. An
:class:`AsyncRetryStrategy` calls again after a failure or a result its
predicates accept.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import abstractmethod
from typing import Any, Callable, Generic, Iterable, TypeVar

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.functions import Function
from weir.runtime.operators import UdfOperator

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


class AsyncWaitOperator(UdfOperator):
    """Runs an :class:`AsyncFunction` (see the module docstring); one event loop
    per subtask, used only by the task's loop thread. A call that fails leaves
    its batch's other calls in flight (``gather`` does not stop them); ``close()``,
    which follows every failure and cancel, cancels and awaits whatever is still
    in flight, so ``async_invoke`` sees ``CancelledError`` and must let it through."""

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

    def open(self) -> None:
        self._loop = asyncio.new_event_loop()
        super().open()

    def close(self) -> None:
        if not hasattr(self, "_loop"):  # never opened
            super().close()
            return
        try:
            # Before the function's close(), which may release what the calls use.
            # Left pending, a closed loop's calls were destroyed later by the garbage
            # collector, inside unrelated code (an ast.parse raised SystemError).
            in_flight = asyncio.all_tasks(self._loop)
            for call in in_flight:
                call.cancel()
            if in_flight:  # gather() of nothing looks for the thread's loop, and a task's thread has none
                self._loop.run_until_complete(asyncio.gather(*in_flight, return_exceptions=True))
            super().close()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        done = self._loop.run_until_complete(self._calls(records))
        out: list[Any] = []
        stamps: list[int] | None = None if timestamps is None else []
        for i, produced in done:
            before = len(out)
            out.extend(produced or ())
            if stamps is not None:
                stamps.extend([timestamps[i]] * (len(out) - before))  # type: ignore[index]
        self.output.collect(out, stamps)

    async def _calls(self, records: list[Any]) -> list[tuple[int, Iterable[Any] | None]]:
        """(index of the record, its results), in record order when ordered, else as the calls complete."""
        slots = asyncio.Semaphore(self.capacity)
        done: list[tuple[int, Iterable[Any] | None]] = []

        async def call(i: int, value: Any) -> None:
            async with slots:
                done.append((i, await self._call(value)))

        await asyncio.gather(*(call(i, r) for i, r in enumerate(records)))
        return sorted(done, key=lambda d: d[0]) if self.ordered else done

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

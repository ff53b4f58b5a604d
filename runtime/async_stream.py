"""PyFlink's ``AsyncDataStream``, a layer over :mod:`weir.runtime.stream_core`:
an :class:`AsyncFunction` on each record of a stream, many calls at once (see
:mod:`weir.runtime.async_io`)."""

from __future__ import annotations

from typing import Any

from weir.runtime.async_io import AsyncFunction, AsyncRetryStrategy, AsyncWaitOperator, checked
from weir.runtime.stream_core import DataStreamCore, StreamT
from weir.runtime.typeinfo import TypeInformation


class AsyncDataStream:
    """PyFlink's async I/O (see :mod:`weir.runtime.async_io`): an :class:`AsyncFunction`
    on each record, many at once. ``timeout`` is in milliseconds (``Time.seconds(5)``),
    ``capacity`` the most calls in flight; the ``_with_retry`` forms take an
    :class:`AsyncRetryStrategy`."""

    @staticmethod
    def unordered_wait(
        data_stream: DataStreamCore[StreamT, Any],
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> StreamT:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, AsyncRetryStrategy.no_restart(), capacity, output_type, False
        )

    @staticmethod
    def ordered_wait(
        data_stream: DataStreamCore[StreamT, Any],
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> StreamT:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, AsyncRetryStrategy.no_restart(), capacity, output_type, True
        )

    @staticmethod
    def unordered_wait_with_retry(
        data_stream: DataStreamCore[StreamT, Any],
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        async_retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> StreamT:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, False
        )

    @staticmethod
    def ordered_wait_with_retry(
        data_stream: DataStreamCore[StreamT, Any],
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        async_retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> StreamT:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, True
        )

    @staticmethod
    def _wait(
        data_stream: DataStreamCore[StreamT, Any],
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        retry: AsyncRetryStrategy,
        capacity: int,
        output_type: TypeInformation | None,
        ordered: bool,
    ) -> StreamT:
        checked(async_function, timeout, capacity, retry)
        return data_stream._then(
            "AsyncWait",
            lambda n, u: AsyncWaitOperator(n, u, async_function, timeout, capacity, retry, ordered),
            output_type,
        )

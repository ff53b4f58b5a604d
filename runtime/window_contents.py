"""How a window keeps its records until it fires: reduced, aggregated, or all of
them (the contents of :class:`~weir.runtime.windows.WindowOperator`'s windows
and of :mod:`~weir.runtime.slicing`'s slices and panes). Plain values and
functions of them, with no operator around."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable


class _Contents(ABC):
    """How a window keeps its records until it fires: reduced, aggregated, or all
    of them; ``result`` is what the window function then gets."""

    role = "window function"
    fn: Any = None

    @abstractmethod
    def add(self, state: Any, value: Any) -> Any: ...

    @abstractmethod
    def merge(self, a: Any, b: Any) -> Any: ...

    @abstractmethod
    def result(self, state: Any) -> list[Any]: ...


class _Empty:
    """A window with no contents (new, or purged by its trigger): one object,
    also after a snapshot is restored (pickled as a reference to ``_EMPTY``),
    since contents are told from it by identity."""

    def __reduce__(self) -> str:
        return "_EMPTY"

    def __repr__(self) -> str:
        return "<empty window>"


_EMPTY: Any = _Empty()


class ReduceContents(_Contents):
    role = "reduce function"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def add(self, state: Any, value: Any) -> Any:
        return value if state is _EMPTY else self.fn(state, value)

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is _EMPTY else b if a is _EMPTY else self.fn(a, b)

    def result(self, state: Any) -> list[Any]:
        return [state]


class AggregateContents(_Contents):
    role = "aggregate function"

    def __init__(self, agg: Any) -> None:  # an AggregateFunction
        self.fn = agg

    def add(self, state: Any, value: Any) -> Any:
        return self.fn.add(value, self.fn.create_accumulator() if state is _EMPTY else state)

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is _EMPTY else b if a is _EMPTY else self.fn.merge(a, b)

    def result(self, state: Any) -> list[Any]:
        return [self.fn.get_result(state)]


def _append(state: Any, value: Any) -> list[Any]:
    if state is _EMPTY:
        return [value]
    state.append(value)
    return state  # type: ignore[no-any-return]


class AllRecords(_Contents):
    """Keeps every record of a window, for a window function that sees them all."""

    def add(self, state: Any, value: Any) -> Any:
        return _append(state, value)

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is _EMPTY else b if a is _EMPTY else a + b

    def result(self, state: Any) -> list[Any]:
        return list(state)


class LastElements(_Contents):
    """Keeps a window's records and, when it fires, evicts all but the last
    ``count`` before ``inner`` computes the result over them (Flink's
    ``CountEvictor``): sliding count windows. Records stay in state until then,
    whatever ``inner`` is."""

    def __init__(self, inner: _Contents, count: int) -> None:
        self.inner = inner
        self.count = count
        self.role = inner.role
        self.fn = inner.fn

    def add(self, state: Any, value: Any) -> Any:
        return _append(state, value)

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError("count windows never merge")

    def result(self, state: Any) -> list[Any]:
        del state[: -self.count]
        folded: Any = _EMPTY
        for value in state:
            folded = self.inner.add(folded, value)
        return self.inner.result(folded)

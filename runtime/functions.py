"""User function interfaces, PyFlink's names. A plain callable works wherever a
function object does (``map(lambda x: ...)``); a class gives ``open``/``close``
hooks and access to state through the :class:`RuntimeContext`.

Contract for every user function: it runs on the task's loop thread only, it
must not block forever (it would stall checkpoints), and whatever it keeps in
weir state must be picklable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Generic, Iterable, TypeVar

if TYPE_CHECKING:
    from runtime.state import (
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )

IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")


class RuntimeContext(ABC):
    """What a rich function sees of its subtask."""

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_state(self, descriptor: "ValueStateDescriptor[Any]") -> "ValueState[Any]": ...

    @abstractmethod
    def get_list_state(self, descriptor: "ListStateDescriptor[Any]") -> "ListState[Any]": ...

    @abstractmethod
    def get_map_state(self, descriptor: "MapStateDescriptor[Any, Any]") -> "MapState[Any, Any]": ...


class Function:
    """Base of rich user functions: ``open`` runs before the first record, ``close`` at the end."""

    def open(self, runtime_context: RuntimeContext) -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function, Generic[IN, OUT]):
    @abstractmethod
    def map(self, value: IN) -> OUT: ...


class FlatMapFunction(Function, Generic[IN, OUT]):
    @abstractmethod
    def flat_map(self, value: IN) -> Iterable[OUT]: ...


class FilterFunction(Function, Generic[IN]):
    @abstractmethod
    def filter(self, value: IN) -> bool: ...


class ReduceFunction(Function, Generic[IN]):
    @abstractmethod
    def reduce(self, a: IN, b: IN) -> IN: ...


class KeySelector(Function, Generic[IN, KEY]):
    @abstractmethod
    def get_key(self, value: IN) -> KEY: ...


class KeyedProcessFunction(Function, Generic[KEY, IN, OUT]):
    """Called once per record with the record's key set as current key, so the
    state objects from :class:`RuntimeContext` read and write that key's entry.
    Yield (or return an iterable of) the records to emit. Timers registered
    through ``ctx.timer_service()`` call :meth:`on_timer` with the same key set;
    records emitted there carry the timer's time (event time) as timestamp."""

    class Context:
        """Given to ``process_element`` and ``on_timer``."""

        def __init__(self, timer_service: Any) -> None:
            self._key: Any = None
            self._timestamp: int | None = None
            self._timer_service = timer_service
            self._domain: Any = None

        def get_current_key(self) -> Any:
            return self._key

        def timestamp(self) -> int | None:
            """The record's event time (in on_timer: the timer's time), None without one."""
            return self._timestamp

        def timer_service(self) -> Any:
            """A :class:`runtime.timers.TimerService` for the current key."""
            return self._timer_service

        def time_domain(self) -> Any:
            """In on_timer: which kind of timer fired (:class:`runtime.timers.TimeDomain`)."""
            return self._domain

    @abstractmethod
    def process_element(self, value: IN, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None:
        return None


class ProcessFunction(Function, Generic[IN, OUT]):
    """Non-keyed per-record function with operator-scoped hooks."""

    class Context:
        def __init__(self, timestamp: Any = lambda: None) -> None:
            self._timestamp = timestamp

        def timestamp(self) -> int | None:
            """The record's event time, None without one."""
            return self._timestamp()

    @abstractmethod
    def process_element(self, value: IN, ctx: "ProcessFunction.Context") -> Iterable[OUT] | None: ...


def as_callable(fn: Any, method: str, role: str) -> Any:
    """A plain callable for a function object or a callable; a clear error otherwise."""
    bound = getattr(fn, method, None)
    if callable(bound):
        return bound
    if callable(fn):
        return fn
    raise TypeError(f"{role} must be callable or have a {method}() method, got {type(fn).__name__}")

"""User function interfaces, PyFlink's names. A plain callable works wherever a
function object does (``map(lambda x: ...)``); a class gives ``open``/``close``
hooks and access to state through the :class:`RuntimeContext`.

Contract for every user function: it runs on the task's loop thread only, it
must not block forever (it would stall checkpoints), and whatever it keeps in
weir state must be picklable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, TypeVar

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.typeinfo import TypeInformation, type_arg

if TYPE_CHECKING:
    from weir.runtime.metrics import MetricGroup
    from weir.runtime.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        BroadcastState,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        OperatorStateStore,
        ReadOnlyBroadcastState,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )

IN = TypeVar("IN")
IN1 = TypeVar("IN1")
IN2 = TypeVar("IN2")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")


@dataclass(frozen=True)
class OutputTag:
    """Names a side output. A process function emits to it with ``yield tag, value``
    (a window sends late data to it, ``side_output_late_data``); read it with
    ``result.get_side_output(tag)``. Tags are equal when their ids are; ``type_info``
    is the side output's records' type: ``get_side_output(tag)`` converts them to
    it, as ``output_type=`` does a main output's."""

    tag_id: str
    type_info: TypeInformation | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tag_id, str) or not self.tag_id:
            raise InvalidConfigurationError("OutputTag id", self.tag_id, "must be a non-empty string")
        type_arg(self.type_info, f"type_info of OutputTag {self.tag_id!r}")


class RuntimeContext(ABC):
    """What a rich function sees of its subtask."""

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_metrics_group(self) -> "MetricGroup":
        """This subtask's user metrics (:mod:`weir.runtime.metrics`)."""

    @abstractmethod
    def get_state(self, descriptor: "ValueStateDescriptor[Any]") -> "ValueState[Any]": ...

    @abstractmethod
    def get_list_state(self, descriptor: "ListStateDescriptor[Any]") -> "ListState[Any]": ...

    @abstractmethod
    def get_map_state(self, descriptor: "MapStateDescriptor[Any, Any]") -> "MapState[Any, Any]": ...

    @abstractmethod
    def get_reducing_state(self, descriptor: "ReducingStateDescriptor[Any]") -> "ReducingState[Any]": ...

    @abstractmethod
    def get_aggregating_state(self, descriptor: "AggregatingStateDescriptor") -> "AggregatingState[Any, Any]": ...

    @abstractmethod
    def get_union_list_state(self, descriptor: "ListStateDescriptor[Any]") -> "ListState[Any]":
        """Operator state of a non-keyed function that every subtask gets whole on
        restore (Flink's ``getUnionListState``): each subtask sees the items of all."""


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


class _KeyedContext:
    """What a keyed function's context adds: the current key, timers, and in
    ``on_timer`` the kind of timer that fired. The operator sets the fields."""

    _key: Any
    _timer_service: Any
    _domain: Any

    def get_current_key(self) -> Any:
        return self._key

    def timer_service(self) -> Any:
        """A :class:`weir.runtime.timers.TimerService` for the current key."""
        return self._timer_service

    def time_domain(self) -> Any:
        """In on_timer: which kind of timer fired (:class:`weir.runtime.timers.TimeDomain`)."""
        return self._domain


class KeyedProcessFunction(Function, Generic[KEY, IN, OUT]):
    """Called once per record with the record's key set as current key, so the
    state objects from :class:`RuntimeContext` read and write that key's entry.
    Yield (or return an iterable of) the records to emit, and ``tag, value`` for
    a record to the side output ``tag`` (an :class:`OutputTag`). Timers registered
    through ``ctx.timer_service()`` call :meth:`on_timer` with the same key set;
    records emitted there carry the timer's time (event time) as timestamp."""

    class Context(_KeyedContext):
        """Given to ``process_element`` and ``on_timer``."""

        def __init__(self, timer_service: Any) -> None:
            self._key: Any = None
            self._timestamp: int | None = None
            self._timer_service = timer_service
            self._domain: Any = None

        def timestamp(self) -> int | None:
            """The record's event time (in on_timer: the timer's time), None without one."""
            return self._timestamp

    @abstractmethod
    def process_element(self, value: IN, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None:
        return None


class ProcessFunction(Function, Generic[IN, OUT]):
    """Non-keyed per-record function with operator-scoped hooks. Yield (or return
    an iterable of) the records to emit, and ``tag, value`` for a record to the
    side output ``tag`` (an :class:`OutputTag`)."""

    class Context:
        def __init__(self) -> None:
            self._timestamp: int | None = None

        def timestamp(self) -> int | None:
            """The record's event time, None without one."""
            return self._timestamp

    @abstractmethod
    def process_element(self, value: IN, ctx: "ProcessFunction.Context") -> Iterable[OUT] | None: ...


class CoMapFunction(Function, Generic[IN1, IN2, OUT]):
    """``connected.map(f)``: one record out per record in, from either input."""

    @abstractmethod
    def map1(self, value: IN1) -> OUT: ...

    @abstractmethod
    def map2(self, value: IN2) -> OUT: ...


class CoFlatMapFunction(Function, Generic[IN1, IN2, OUT]):
    """``connected.flat_map(f)``: an iterable (or None) of records per record in."""

    @abstractmethod
    def flat_map1(self, value: IN1) -> Iterable[OUT] | None: ...

    @abstractmethod
    def flat_map2(self, value: IN2) -> Iterable[OUT] | None: ...


class CoProcessFunction(Function, Generic[IN1, IN2, OUT]):
    """``connected.process(f)`` on two non-keyed inputs: as a
    :class:`ProcessFunction`, one method per input. Its state is operator state;
    timers need keyed inputs (:class:`KeyedCoProcessFunction`)."""

    Context = ProcessFunction.Context

    @abstractmethod
    def process_element1(self, value: IN1, ctx: "ProcessFunction.Context") -> Iterable[OUT] | None: ...

    @abstractmethod
    def process_element2(self, value: IN2, ctx: "ProcessFunction.Context") -> Iterable[OUT] | None: ...


class KeyedCoProcessFunction(Function, Generic[KEY, IN1, IN2, OUT]):
    """``connected.key_by(k1, k2).process(f)``: as a :class:`KeyedProcessFunction`,
    one method per input. Records of both inputs with equal keys meet in the same
    subtask and share that key's state and timers."""

    Context = KeyedProcessFunction.Context
    OnTimerContext = KeyedProcessFunction.Context

    @abstractmethod
    def process_element1(self, value: IN1, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None: ...

    @abstractmethod
    def process_element2(self, value: IN2, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None:
        return None


class BroadcastProcessFunction(Function, Generic[IN1, IN2, OUT]):
    """``stream.connect(rules.broadcast(descriptor)).process(f)``: every subtask
    sees every record of the broadcast input, in ``process_broadcast_element``,
    where it may change the broadcast state; ``process_element`` handles this
    subtask's share of the other input and may only read it. Yield records, and
    ``tag, value`` for side outputs, from either."""

    class ReadOnlyContext(ProcessFunction.Context):
        """Given to ``process_element``: broadcast state to read."""

        def __init__(
            self, broadcast: "OperatorStateStore", now_ms: Callable[[], int], watermark: Callable[[], int]
        ) -> None:
            super().__init__()
            self._broadcast = broadcast
            self._now_ms = now_ms
            self._watermark = watermark

        def get_broadcast_state(
            self, state_descriptor: "MapStateDescriptor[Any, Any]"
        ) -> "ReadOnlyBroadcastState[Any, Any]":
            return self._broadcast.get_broadcast_state(state_descriptor, writable=False)

        def current_processing_time(self) -> int:
            return self._now_ms()

        def current_watermark(self) -> int:
            return self._watermark()

    class Context(ReadOnlyContext):
        """Given to ``process_broadcast_element``: broadcast state to change."""

        def get_broadcast_state(self, state_descriptor: "MapStateDescriptor[Any, Any]") -> "BroadcastState[Any, Any]":
            return self._broadcast.get_broadcast_state(state_descriptor, writable=True)  # type: ignore[return-value]

    @abstractmethod
    def process_element(self, value: IN1, ctx: "BroadcastProcessFunction.ReadOnlyContext") -> Iterable[OUT] | None: ...

    @abstractmethod
    def process_broadcast_element(
        self, value: IN2, ctx: "BroadcastProcessFunction.Context"
    ) -> Iterable[OUT] | None: ...


class KeyedBroadcastProcessFunction(Function, Generic[KEY, IN1, IN2, OUT]):
    """``keyed.connect(rules.broadcast(descriptor)).process(f)``: as a
    :class:`BroadcastProcessFunction`, where ``process_element`` and
    ``on_timer`` also have the current key, keyed state and timers. The broadcast
    side has no current key; it reaches every key's state of this subtask with
    ``ctx.apply_to_keyed_state(descriptor, function)``."""

    class ReadOnlyContext(BroadcastProcessFunction.ReadOnlyContext, _KeyedContext):
        """Given to ``process_element`` and ``on_timer``."""

        def __init__(self, broadcast: "OperatorStateStore", timer_service: Any) -> None:
            super().__init__(broadcast, timer_service.current_processing_time, timer_service.current_watermark)
            self._key: Any = None
            self._timer_service = timer_service
            self._domain: Any = None

    OnTimerContext = ReadOnlyContext

    class Context(BroadcastProcessFunction.Context):
        """Given to ``process_broadcast_element``."""

        def __init__(
            self,
            broadcast: "OperatorStateStore",
            timer_service: Any,
            apply_to_keyed_state: Callable[[Any, Callable[[Any, Any], None]], None],
        ) -> None:
            super().__init__(broadcast, timer_service.current_processing_time, timer_service.current_watermark)
            self._apply = apply_to_keyed_state

        def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], None]) -> None:
            """``function(key, state)`` for every key of this subtask that has state
            under ``state_descriptor`` (a Value-, List- or MapStateDescriptor), with
            that key current: ``state`` reads and writes its entry."""
            self._apply(state_descriptor, function)

    @abstractmethod
    def process_element(
        self, value: IN1, ctx: "KeyedBroadcastProcessFunction.ReadOnlyContext"
    ) -> Iterable[OUT] | None: ...

    @abstractmethod
    def process_broadcast_element(
        self, value: IN2, ctx: "KeyedBroadcastProcessFunction.Context"
    ) -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedBroadcastProcessFunction.ReadOnlyContext") -> Iterable[OUT] | None:
        return None


def as_callable(fn: Any, method: str, role: str) -> Any:
    """A plain callable for a function object or a callable; a clear error otherwise."""
    bound = getattr(fn, method, None)
    if callable(bound):
        return bound
    if callable(fn):
        return fn
    raise TypeError(f"{role} must be callable or have a {method}() method, got {type(fn).__name__}")

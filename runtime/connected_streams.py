"""PyFlink's streams of two inputs, a layer over :mod:`weir.runtime.stream_core`:
``stream1.connect(stream2)`` (:class:`ConnectedStreams`), a broadcast stream and a
stream connected to it (:class:`BroadcastStream`, :class:`BroadcastConnectedStream`),
and the interval join of two keyed streams (:class:`IntervalJoin`). Each is
generic in the stream class it hands back (``StreamT``: PyFlink's
:class:`~weir.runtime.datastream.DataStream`)."""

from __future__ import annotations

from typing import Any, Callable, Generic

from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError
from weir.runtime.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from weir.runtime.joins import IntervalJoinFunction
from weir.runtime.operators import Calls, CoProcessOperator, KeyedCoProcessOperator
from weir.runtime.state import MapStateDescriptor
from weir.runtime.stream_core import DataStreamCore, KeyedStreamCore, StreamT
from weir.runtime.typeinfo import TypeInformation


def _methods(func: Any, names: tuple[str, str], role: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The two methods of a two-input function, or a clear error."""
    found = [getattr(func, name, None) for name in names]
    if not all(callable(m) for m in found):
        raise TypeError(f"{role} takes an object with {names[0]}() and {names[1]}() methods, got {type(func).__name__}")
    return found[0], found[1]  # type: ignore[return-value]


class ConnectedStreams(Generic[StreamT]):
    """``stream1.connect(stream2)``: two streams, of any two types, into one
    operator that has a method per input (``map1``/``map2``,
    ``process_element1``/``process_element2``, ...). Checkpoint barriers align
    across both inputs and the operator's watermark is the smaller of theirs.
    Keyed (``key_by(selector1, selector2)``, or two keyed streams), records of
    both inputs with equal keys meet in one subtask and share its keyed state."""

    def __init__(self, stream1: DataStreamCore[StreamT, Any], stream2: DataStreamCore[Any, Any]) -> None:
        self.stream1 = stream1
        self.stream2 = stream2

    def key_by(
        self,
        key_selector1: Callable[[Any], Any] | Any,
        key_selector2: Callable[[Any], Any] | Any,
        key_type: TypeInformation | None = None,
    ) -> "ConnectedStreams[StreamT]":
        """Key each input with its own selector (``key_type``: as :meth:`DataStream.key_by`'s)."""
        return ConnectedStreams(
            self.stream1.key_by(key_selector1, key_type), self.stream2.key_by(key_selector2, key_type)
        )

    def map(self, func: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`CoMapFunction`: ``map1(value)`` / ``map2(value)`` each give one record."""
        m1, m2 = _methods(func, ("map1", "map2"), "ConnectedStreams.map()")
        calls: Calls = (("map1", lambda v, ctx: (m1(v),)), ("map2", lambda v, ctx: (m2(v),)))
        return self._apply("CoMap", func, calls, output_type)

    def flat_map(self, func: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`CoFlatMapFunction`: ``flat_map1`` / ``flat_map2`` each give an iterable (or None)."""
        f1, f2 = _methods(func, ("flat_map1", "flat_map2"), "ConnectedStreams.flat_map()")
        calls: Calls = (("flat_map1", lambda v, ctx: f1(v)), ("flat_map2", lambda v, ctx: f2(v)))
        return self._apply("CoFlatMap", func, calls, output_type)

    def process(self, func: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`CoProcessFunction`, or on keyed inputs a
        :class:`KeyedCoProcessFunction` (keyed state, timers, ``on_timer``)."""
        if isinstance(func, KeyedCoProcessFunction) and self._key_selectors() is None:
            raise InvalidJobGraphError(
                f"{type(func).__name__} is a KeyedCoProcessFunction: key both inputs first, connected.key_by(selector1, selector2)"
            )
        p1, p2 = _methods(func, ("process_element1", "process_element2"), "ConnectedStreams.process()")
        name = "CoProcess" if self._key_selectors() is None else "KeyedCoProcess"
        return self._apply(name, func, (("process_element1", p1), ("process_element2", p2)), output_type)

    def _key_selectors(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
        s1, s2 = self.stream1, self.stream2
        if isinstance(s1, KeyedStreamCore) != isinstance(s2, KeyedStreamCore):
            raise InvalidJobGraphError(
                "connect(): one input is keyed and the other is not; key both (connected.key_by(selector1, selector2)) or neither"
            )
        return (
            (s1._key_selector, s2._key_selector)
            if isinstance(s1, KeyedStreamCore) and isinstance(s2, KeyedStreamCore)
            else None
        )

    def _apply(self, name: str, func: Any, calls: Calls, output_type: Any) -> StreamT:
        keys = self._key_selectors()
        if keys is None:
            return self.stream1._two_inputs(
                self.stream2, name, lambda n, u: CoProcessOperator(n, u, func, calls), output_type
            )
        return self.stream1._two_inputs(
            self.stream2, name, lambda n, u: KeyedCoProcessOperator(n, u, func, calls, keys), output_type
        )


class BroadcastStream:
    """``stream.broadcast(descriptor, ...)``: a stream every subtask of the
    operator it is connected to sees whole, and the broadcast states that
    operator keeps. Only ``connect`` takes it."""

    def __init__(self, stream: DataStreamCore[Any, Any], descriptors: tuple[MapStateDescriptor[Any, Any], ...]) -> None:
        self._stream = stream
        self.broadcast_state_descriptors = descriptors


class BroadcastConnectedStream(Generic[StreamT]):
    """``stream.connect(broadcast_stream)``: ``process`` a
    :class:`BroadcastProcessFunction`, or on a keyed stream a
    :class:`KeyedBroadcastProcessFunction`. The broadcast state is checkpointed;
    on restore and rescale each subtask takes one subtask's copy."""

    def __init__(self, stream: DataStreamCore[StreamT, Any], broadcast_stream: BroadcastStream) -> None:
        self.non_broadcast_stream = stream
        self.broadcast_stream = broadcast_stream

    def process(self, func: Any, output_type: TypeInformation | None = None) -> StreamT:
        stream, descriptors = self.non_broadcast_stream, self.broadcast_stream.broadcast_state_descriptors
        keyed = isinstance(stream, KeyedStreamCore)
        wanted = KeyedBroadcastProcessFunction if keyed else BroadcastProcessFunction
        other = BroadcastProcessFunction if keyed else KeyedBroadcastProcessFunction
        if isinstance(func, other):
            raise InvalidJobGraphError(
                f"{type(func).__name__} is a {other.__name__}, but the stream connected to the broadcast stream is "
                f"{'keyed' if keyed else 'not keyed'}: use a {wanted.__name__}"
            )
        p, b = _methods(func, ("process_element", "process_broadcast_element"), "BroadcastConnectedStream.process()")
        calls: Calls = (("process_element", p), ("process_broadcast_element", b))
        if isinstance(stream, KeyedStreamCore):
            ks = stream._key_selector
            return stream._two_inputs(
                self.broadcast_stream._stream,
                "KeyedBroadcastProcess",
                lambda n, u: KeyedCoProcessOperator(n, u, func, calls, (ks, None), descriptors),
                output_type,
            )
        return stream._two_inputs(
            self.broadcast_stream._stream,
            "BroadcastProcess",
            lambda n, u: CoProcessOperator(n, u, func, calls, descriptors),
            output_type,
        )


class IntervalJoin(Generic[StreamT]):
    """``left.interval_join(right)`` of two keyed streams: ``between(lower_ms, upper_ms)``
    joins a left record at ``t`` with the right records of its key at ``t + lower``
    to ``t + upper`` (both included unless ``lower_bound_exclusive()`` /
    ``upper_bound_exclusive()``), by event time, as Flink's. Then ``process``."""

    def __init__(self, left: KeyedStreamCore[StreamT, Any], right: KeyedStreamCore[Any, Any]) -> None:
        self._left, self._right = left, right
        self._bounds: tuple[int, int] | None = None
        self._exclusive = [False, False]

    def between(self, lower_bound_ms: int, upper_bound_ms: int) -> "IntervalJoin[StreamT]":
        if not all(isinstance(b, int) for b in (lower_bound_ms, upper_bound_ms)) or lower_bound_ms > upper_bound_ms:
            raise InvalidConfigurationError(
                "interval join bounds",
                (lower_bound_ms, upper_bound_ms),
                "give whole milliseconds, the lower bound not above the upper",
            )
        self._bounds = (lower_bound_ms, upper_bound_ms)
        return self

    def lower_bound_exclusive(self) -> "IntervalJoin[StreamT]":
        self._exclusive[0] = True
        return self

    def upper_bound_exclusive(self) -> "IntervalJoin[StreamT]":
        self._exclusive[1] = True
        return self

    def process(self, process_join_function: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`ProcessJoinFunction` (or a callable ``(left, right, ctx)``) on each joined pair."""
        if self._bounds is None:
            raise InvalidConfigurationError(
                "interval join process()", process_join_function, "comes after between(lower_ms, upper_ms)"
            )
        lower = self._bounds[0] + self._exclusive[0]
        upper = self._bounds[1] - self._exclusive[1]
        joined = IntervalJoinFunction(process_join_function, lower, upper)
        return ConnectedStreams(self._left, self._right).process(joined, output_type).name("IntervalJoin")

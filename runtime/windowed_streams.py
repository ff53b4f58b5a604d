"""PyFlink's windowed streams, a layer over :mod:`weir.runtime.stream_core`:
``keyed.window(assigner)`` (:class:`WindowedStream`), ``stream.window_all(assigner)``
(:class:`AllWindowedStream`) and the window join and co-group of two streams
(:class:`CoGroupedStreams`), each a builder that ends in the operator it adds.
Each is generic in the stream class it hands back (``StreamT``: PyFlink's
:class:`~weir.runtime.datastream.DataStream`)."""

from __future__ import annotations

from typing import Any, Callable, Generic

from weir.runtime.config import _whole
from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.functions import OutputTag, as_callable
from weir.runtime.joins import SidesOfAWindow, pairing
from weir.runtime.slicing import AlignedWindowOperator, aligned
from weir.runtime.stream_core import DataStreamCore, KeyedStreamCore, StreamT
from weir.runtime.typeinfo import TypeInformation, type_arg
from weir.runtime.windows import (
    AggregateContents,
    AggregateFunction,
    AllRecords,
    CountTrigger,
    LastElements,
    PurgingTrigger,
    ReduceContents,
    Trigger,
    WindowAssigner,
    WindowCall,
    WindowOperator,
    _Contents,
)


class WindowedStream(Generic[StreamT]):
    """``keyed.window(assigner)``, then optionally ``trigger``, ``allowed_lateness``
    and ``side_output_late_data``, then one of ``reduce``, ``aggregate``, ``process``."""

    def __init__(self, keyed: KeyedStreamCore[StreamT, Any], assigner: WindowAssigner) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise InvalidConfigurationError(
                "window assigner", assigner, "use e.g. TumblingEventTimeWindows.of(Time.minutes(1))"
            )
        self._keyed = keyed
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = 0
        self._late: OutputTag | None = None
        self._keep_last: int | None = None  # sliding count windows: evict all but the last n when firing

    def _count(self, size: int, slide: int | None) -> None:
        size = _whole("count window size", size)
        if slide is None:
            self._trigger = PurgingTrigger.of(CountTrigger.of(size))
        else:
            self._trigger = CountTrigger.of(_whole("count window slide", slide))
            self._keep_last = size

    def trigger(self, trigger: Trigger) -> "WindowedStream[StreamT]":
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness_ms: int) -> "WindowedStream[StreamT]":
        """Keep windows this long after their end: late records update and re-fire them."""
        self._lateness = _whole("allowed lateness", lateness_ms, allow_zero=True)
        return self

    def side_output_late_data(self, tag: OutputTag) -> "WindowedStream[StreamT]":
        """Records too late for every window go to ``result.get_side_output(tag)``."""
        if not isinstance(tag, OutputTag):
            raise InvalidConfigurationError("late data tag", tag, "use OutputTag('name')")
        self._late = tag
        return self

    _takes_key = True  # its window functions take the key

    def _apply(
        self,
        name: str,
        contents: _Contents,
        output_type: Any,
        window_function: Any = None,
        where: str = "process()",
    ) -> StreamT:
        ks, assigner, trigger, lateness, late = (
            self._keyed._key_selector,
            self._assigner,
            self._trigger,
            self._lateness,
            self._late,
        )
        if (
            assigner.merging
            and isinstance(contents, AggregateContents)
            and type(contents.fn).merge is AggregateFunction.merge
        ):
            raise InvalidConfigurationError(
                "aggregate function", contents.fn, "session windows merge: implement merge()"
            )
        call = WindowCall(window_function, self._takes_key, where)
        if self._keep_last is None and aligned(assigner, trigger, lateness, contents):
            return self._keyed._then(
                name, lambda n, u: AlignedWindowOperator(n, u, contents, call, ks, assigner, late), output_type
            )
        if self._keep_last is not None:
            contents = LastElements(contents, self._keep_last)
        return self._keyed._then(
            name, lambda n, u: WindowOperator(n, u, contents, call, ks, assigner, trigger, lateness, late), output_type
        )

    def reduce(
        self,
        reduce_function: Callable[[Any, Any], Any] | Any,
        window_function: Any = None,
        output_type: TypeInformation | None = None,
    ) -> StreamT:
        """Emits the reduced value of each window when it fires; with a
        ``window_function`` (a :class:`WindowFunction` or :class:`ProcessWindowFunction`)
        that value goes through it, with the key and the window. Each window keeps
        one value, reduced as records come. ``output_type``: as :meth:`DataStream.map`'s;
        without it and without a window function, the reduced stream's type, as in PyFlink."""
        contents = ReduceContents(as_callable(reduce_function, "reduce", "reduce()"))
        if output_type is None and window_function is None:
            output_type = self._keyed._declared_type()
        return self._apply("Window(Reduce)", contents, output_type, window_function, "reduce() window_function")

    def aggregate(
        self,
        aggregate_function: AggregateFunction[Any, Any, Any],
        window_function: Any = None,
        accumulator_type: TypeInformation | None = None,
        output_type: TypeInformation | None = None,
    ) -> StreamT:
        """Emits ``get_result`` of each window's accumulator when it fires; with a
        ``window_function`` that result goes through it, as for :meth:`reduce`. Each
        window keeps one accumulator (``accumulator_type`` is checked to be a type
        and not used: the accumulator stays the Python object ``add`` returns)."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise TypeError(f"aggregate() takes an AggregateFunction, got {type(aggregate_function).__name__}")
        type_arg(accumulator_type, "aggregate() accumulator_type")
        contents = AggregateContents(aggregate_function)
        return self._apply("Window(Aggregate)", contents, output_type, window_function, "aggregate() window_function")

    def process(self, process_window_function: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`ProcessWindowFunction` (or a callable taking what its ``process``
        takes) on all records of a window when it fires."""
        return self._apply("Window(Process)", AllRecords(), output_type, process_window_function)

    def apply(self, window_function: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`WindowFunction`'s ``apply(key, window, inputs)`` on all records of a window when it fires."""
        if not callable(getattr(window_function, "apply", None)):
            raise TypeError(f"apply() takes a WindowFunction, got {type(window_function).__name__}")
        return self._apply("Window(Apply)", AllRecords(), output_type, window_function)


class AllWindowedStream(WindowedStream[StreamT]):
    """``stream.window_all(assigner)`` or ``count_window_all(n)``: as a
    :class:`WindowedStream` over the whole stream, run by one subtask; its
    window functions take no key: :class:`ProcessAllWindowFunction`
    (``process(context, elements)``) and :class:`AllWindowFunction` (``apply(window, inputs)``)."""

    _takes_key = False

    def _apply(
        self,
        name: str,
        contents: _Contents,
        output_type: Any,
        window_function: Any = None,
        where: str = "process()",
    ) -> StreamT:
        result = super()._apply(name.replace("Window", "AllWindow", 1), contents, output_type, window_function, where)
        return result.set_parallelism(1).set_max_parallelism(1)


class CoGroupedStreams(Generic[StreamT]):
    """``first.co_group(second)`` (or ``first.join(second)``): name each side's key
    with ``where`` and ``equal_to``, the windows with ``window``, then ``apply``."""

    def __init__(
        self, first: DataStreamCore[StreamT, Any], second: DataStreamCore[Any, Any], joins: bool = False
    ) -> None:
        self._first, self._second, self._joins = first, second, joins
        self._keys: list[Callable[[Any], Any]] = []
        self._assigner: WindowAssigner | None = None
        self._trigger: Trigger | None = None
        self._lateness_ms = 0

    def where(self, key_selector: Callable[[Any], Any] | Any) -> "CoGroupedStreams[StreamT]":
        self._keys = [as_callable(key_selector, "get_key", "where() key selector")]
        return self

    def equal_to(self, key_selector: Callable[[Any], Any] | Any) -> "CoGroupedStreams[StreamT]":
        if len(self._keys) != 1:
            raise InvalidConfigurationError("equal_to()", key_selector, "comes once, after where(key_selector)")
        self._keys.append(as_callable(key_selector, "get_key", "equal_to() key selector"))
        return self

    def window(self, assigner: WindowAssigner) -> "CoGroupedStreams[StreamT]":
        if len(self._keys) != 2:
            raise InvalidConfigurationError(
                "window()", assigner, "comes after where(key_selector).equal_to(key_selector)"
            )
        self._assigner = assigner
        return self

    def trigger(self, trigger: Trigger) -> "CoGroupedStreams[StreamT]":
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness_ms: int) -> "CoGroupedStreams[StreamT]":
        self._lateness_ms = lateness_ms
        return self

    def apply(self, function: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A join's :class:`JoinFunction` or :class:`FlatJoinFunction` (or a callable
        ``(first, second)``), a co-group's :class:`CoGroupFunction` (or a callable
        ``(first_list, second_list)``), on each key's records of each window."""
        if self._assigner is None:
            raise InvalidConfigurationError(
                "apply()", function, "comes after where(...).equal_to(...).window(assigner)"
            )
        co_group = pairing(function) if self._joins else as_callable(function, "co_group", "co_group() apply")
        key_first, key_second = self._keys
        tagged = self._first.map(lambda r: (0, r)).union(self._second.map(lambda r: (1, r)))
        windowed = WindowedStream(
            tagged.key_by(lambda t: key_second(t[1]) if t[0] else key_first(t[1])), self._assigner
        )
        if self._trigger is not None:
            windowed.trigger(self._trigger)
        windowed.allowed_lateness(self._lateness_ms)
        return windowed.process(SidesOfAWindow(function, co_group), output_type).name(
            "Join" if self._joins else "CoGroup"
        )

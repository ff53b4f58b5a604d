"""Joins of two streams, Flink's: window joins and co-groups, and interval joins.

    first.join(second).where(key1).equal_to(key2).window(assigner).apply(JoinFunction)
    first.co_group(second).where(key1).equal_to(key2).window(assigner).apply(CoGroupFunction)
    left.key_by(k1).interval_join(right.key_by(k2)).between(-5, 10).process(ProcessJoinFunction)

A window join, as Flink's, tags both inputs with their side, unites them, keys
them by their own key selectors and windows them together; when a window fires,
a co-group gets each side's records of that key and window, and a join every
pair of them (a key with records on one side only joins nothing). Its results
carry the window's end as their event time.

An interval join joins a left record at ``t`` with the right records of its key
at ``t + lower`` to ``t + upper``, by event time: each side's records wait in
keyed state until the watermark passes the last time a record of the other side
could join them; a record behind the watermark is late and dropped. Its results
carry the later of the two records' timestamps. The builders are in
:mod:`weir.runtime.datastream`; both joins keep keyed state, so they survive
failover and rescaling.
"""

from __future__ import annotations

import bisect
from abc import abstractmethod
from typing import Any, Callable, Generic, Iterable, TypeVar

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.functions import Function, KeyedCoProcessFunction, RuntimeContext, as_callable
from weir.runtime.operators import Stamped
from weir.runtime.state import MapStateDescriptor, ValueStateDescriptor
from weir.runtime.windows import ProcessWindowFunction

IN1 = TypeVar("IN1")
IN2 = TypeVar("IN2")
OUT = TypeVar("OUT")


class JoinFunction(Function, Generic[IN1, IN2, OUT]):
    """``join(first, second)``: one result per pair of records that join."""

    @abstractmethod
    def join(self, first: IN1, second: IN2) -> OUT: ...


class FlatJoinFunction(Function, Generic[IN1, IN2, OUT]):
    """``join(first, second)`` yields any number of results per pair of records that join."""

    @abstractmethod
    def join(self, first: IN1, second: IN2) -> Iterable[OUT]: ...


class CoGroupFunction(Function, Generic[IN1, IN2, OUT]):
    """``co_group(first, second)``: a key's records of a window, each side's in a
    list (one of them may be empty); yields the results."""

    @abstractmethod
    def co_group(self, first: list[IN1], second: list[IN2]) -> Iterable[OUT]: ...


class SidesOfAWindow(ProcessWindowFunction):
    """The window function behind a join or co-group: splits a window's tagged
    records by side and hands them on; opens and closes the user's function."""

    def __init__(self, user_function: Any, co_group: Callable[[list[Any], list[Any]], Iterable[Any]]) -> None:
        self.user_function = user_function
        self.co_group = co_group

    def open(self, runtime_context: RuntimeContext) -> None:
        if isinstance(self.user_function, Function):
            self.user_function.open(runtime_context)

    def close(self) -> None:
        if isinstance(self.user_function, Function):
            self.user_function.close()

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        sides: tuple[list[Any], list[Any]] = ([], [])
        for side, record in elements:
            sides[side].append(record)
        return self.co_group(*sides)


class ProcessJoinFunction(Function, Generic[IN1, IN2, OUT]):
    """``process_element(left, right, ctx)`` for each pair an interval join joins;
    yields the results, which carry ``ctx.get_timestamp()``, the larger of the
    pair's timestamps, as their event time."""

    class Context:
        def __init__(self, left_timestamp: int, right_timestamp: int) -> None:
            self._left, self._right = left_timestamp, right_timestamp

        def get_left_timestamp(self) -> int:
            return self._left

        def get_right_timestamp(self) -> int:
            return self._right

        def get_timestamp(self) -> int:
            return max(self._left, self._right)

    @abstractmethod
    def process_element(self, left: IN1, right: IN2, ctx: "ProcessJoinFunction.Context") -> Iterable[OUT]: ...


class IntervalJoinFunction(KeyedCoProcessFunction):
    """Keeps each side's records per key by timestamp (map state: timestamp ->
    its records, appended to in place) and the sorted timestamps it holds (value
    state), joins a new record with the other side's records at the timestamps
    within the bounds (found by bisection: nothing else of the other side is
    read), and drops a side's oldest timestamps once the watermark passes the last
    time a record of the other side could join them. A record behind the
    watermark is late and dropped, as in Flink."""

    def __init__(self, user_function: Any, lower: int, upper: int) -> None:
        self.user_function = user_function
        self.join = as_callable(user_function, "process_element", "interval join process()")
        self.lower, self.upper = lower, upper

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sides = tuple(
            runtime_context.get_map_state(MapStateDescriptor(f"interval-join-{side}")) for side in ("left", "right")
        )
        self.times = tuple(
            runtime_context.get_state(ValueStateDescriptor(f"interval-join-{side}-times")) for side in ("left", "right")
        )
        if isinstance(self.user_function, Function):
            self.user_function.open(runtime_context)

    def close(self) -> None:
        if isinstance(self.user_function, Function):
            self.user_function.close()

    def process_element1(self, value: Any, ctx: Any) -> Stamped:
        return self._joined(0, value, ctx)

    def process_element2(self, value: Any, ctx: Any) -> Stamped:
        return self._joined(1, value, ctx)

    def _joined(self, side: int, value: Any, ctx: Any) -> Stamped:
        t = ctx.timestamp()
        if t is None:
            raise InvalidConfigurationError(
                "interval join input",
                value,
                "has no timestamp: an interval join joins by event time (give a WatermarkStrategy)",
            )
        joined = Stamped([], [])
        if t < ctx.timer_service().current_watermark():
            return joined
        own, other = self.sides[side], self.sides[1 - side]
        records = own.get(t)
        if records is None:
            own.put(t, [value])
            times = self.times[side].value() or []
            bisect.insort(times, t)
            self.times[side].update(times)
            ctx.timer_service().register_event_time_timer(self._last_join_time(side, t))
        else:
            records.append(value)
            own.put(t, records)  # the same list: a put marks it changed for the next checkpoint
        lo, hi = (t + self.lower, t + self.upper) if side == 0 else (t - self.upper, t - self.lower)
        other_times = self.times[1 - side].value() or []
        for other_t in other_times[bisect.bisect_left(other_times, lo) : bisect.bisect_right(other_times, hi)]:
            left_t, right_t = (t, other_t) if side == 0 else (other_t, t)
            for o in other.get(other_t) or ():
                left, right = (value, o) if side == 0 else (o, value)
                results = list(self.join(left, right, ProcessJoinFunction.Context(left_t, right_t)) or ())
                joined.records.extend(results)
                joined.timestamps.extend([max(left_t, right_t)] * len(results))
        return joined

    def _last_join_time(self, side: int, t: int) -> int:
        """After the watermark passes this, no record of the other side can join a record of ``side`` at ``t``."""
        return t + max(self.upper, 0) if side == 0 else t - min(self.lower, 0)

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        """Drop each side's timestamps no record of the other side can join any more: its oldest ones."""
        for side, records in enumerate(self.sides):
            times = self.times[side].value() or []
            # _last_join_time rises with t: the timestamps to drop are a prefix.
            cut = bisect.bisect_right(times, timestamp - (max(self.upper, 0) if side == 0 else -min(self.lower, 0)))
            for t in times[:cut]:
                records.remove(t)
            if cut:
                if cut == len(times):
                    self.times[side].clear()
                else:
                    self.times[side].update(times[cut:])


def pairing(function: Any) -> Callable[[list[Any], list[Any]], Iterable[Any]]:
    """A join's function as a co-group's: every pair of a window's two sides."""
    join = as_callable(function, "join", "join() apply")
    if isinstance(function, FlatJoinFunction):
        return lambda firsts, seconds: [out for a in firsts for b in seconds for out in join(a, b)]
    return lambda firsts, seconds: [join(a, b) for a in firsts for b in seconds]

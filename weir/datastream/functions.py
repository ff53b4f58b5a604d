"""PyFlink's ``pyflink.datastream.functions``, on weir: the user function
classes weir has, as weir's own."""

from weir.runtime.async_io import AsyncFunction
from weir.runtime.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from weir.runtime.timers import TimerService
from weir.runtime.windows import (
    AggregateFunction,
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)

__all__ = [
    "RuntimeContext",
    "MapFunction",
    "CoMapFunction",
    "FlatMapFunction",
    "CoFlatMapFunction",
    "ReduceFunction",
    "AggregateFunction",
    "KeySelector",
    "FilterFunction",
    "ProcessFunction",
    "CoProcessFunction",
    "KeyedProcessFunction",
    "KeyedCoProcessFunction",
    "TimerService",
    "WindowFunction",
    "AllWindowFunction",
    "ProcessWindowFunction",
    "ProcessAllWindowFunction",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "AsyncFunction",
]

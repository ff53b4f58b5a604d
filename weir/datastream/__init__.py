"""PyFlink's ``pyflink.datastream``, on weir: the names of it that weir has, as
weir's own classes. A PyFlink program's ``from pyflink.datastream import ...``
becomes ``from weir.datastream import ...``."""

from weir.datastream import async_retry_predicates  # noqa: F401  (PyFlink has it as an attribute of the package)
from weir.datastream.functions import (  # PyFlink's datastream hands these on from its functions module too
    AggregateFunction,
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
    ProcessWindowFunction,
    ReduceFunction,
    RuntimeContext,
    TimerService,
    WindowFunction,
)
from weir.runtime.async_io import AsyncFunction, AsyncRetryStrategy
from weir.runtime.config import CheckpointConfig, CheckpointingMode, RuntimeExecutionMode
from weir.runtime.datastream import (
    AsyncDataStream,
    BroadcastConnectedStream,
    BroadcastStream,
    ConnectedStreams,
    DataStream,
    KeyedStream,
    StreamExecutionEnvironment,
    WindowedStream,
)
from weir.runtime.functions import OutputTag
from weir.runtime.timers import TimeDomain
from weir.runtime.windows import TimeWindow, Trigger, TriggerResult

__all__ = [
    "StreamExecutionEnvironment",
    "DataStream",
    "KeyedStream",
    "WindowedStream",
    "ConnectedStreams",
    "BroadcastStream",
    "BroadcastConnectedStream",
    "MapFunction",
    "CoMapFunction",
    "FlatMapFunction",
    "CoFlatMapFunction",
    "ReduceFunction",
    "FilterFunction",
    "ProcessFunction",
    "KeyedProcessFunction",
    "CoProcessFunction",
    "KeyedCoProcessFunction",
    "WindowFunction",
    "ProcessWindowFunction",
    "AggregateFunction",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "RuntimeContext",
    "TimerService",
    "CheckpointingMode",
    "CheckpointConfig",
    "RuntimeExecutionMode",
    "TimeWindow",
    "TriggerResult",
    "Trigger",
    "TimeDomain",
    "KeySelector",
    "OutputTag",
    "AsyncDataStream",
    "AsyncFunction",
    "AsyncRetryStrategy",
]

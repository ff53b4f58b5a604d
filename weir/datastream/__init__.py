"""PyFlink's ``pyflink.datastream``, on weir: the names of it that weir has, as
weir's own classes. A PyFlink program's ``from pyflink.datastream import ...``
becomes ``from weir.datastream import ...``."""

from weir.runtime.config import CheckpointConfig, CheckpointingMode, RuntimeExecutionMode
from weir.runtime.datastream import (
    BroadcastConnectedStream,
    BroadcastStream,
    ConnectedStreams,
    DataStream,
    KeyedStream,
    StreamExecutionEnvironment,
    WindowedStream,
)
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
    OutputTag,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from weir.runtime.timers import TimeDomain, TimerService
from weir.runtime.windows import (
    AggregateFunction,
    ProcessWindowFunction,
    TimeWindow,
    Trigger,
    TriggerResult,
    WindowFunction,
)

__all__ = [
    "StreamExecutionEnvironment", "DataStream", "KeyedStream", "WindowedStream", "ConnectedStreams",
    "BroadcastStream", "BroadcastConnectedStream",
    "MapFunction", "CoMapFunction", "FlatMapFunction", "CoFlatMapFunction", "ReduceFunction", "FilterFunction",
    "ProcessFunction", "KeyedProcessFunction", "CoProcessFunction", "KeyedCoProcessFunction",
    "WindowFunction", "ProcessWindowFunction", "AggregateFunction",
    "BroadcastProcessFunction", "KeyedBroadcastProcessFunction", "RuntimeContext", "TimerService",
    "CheckpointingMode", "CheckpointConfig", "RuntimeExecutionMode",
    "TimeWindow", "TriggerResult", "Trigger", "TimeDomain", "KeySelector", "OutputTag",
]

"""weir's runtime: the user API, the job graph, operators, state, checkpoints and
every protocol as a plain state machine. Never imports Ray."""

from weir.runtime.async_io import AsyncFunction, AsyncRetryStrategy
from weir.runtime.collect import CloseableIterator
from weir.runtime.config import (
    CheckpointConfig,
    CheckpointingMode,
    Configuration,
    RestartStrategies,
    RestartStrategy,
    RuntimeExecutionMode,
)
from weir.runtime.datastream import (
    AllWindowedStream,
    AsyncDataStream,
    BroadcastConnectedStream,
    BroadcastStream,
    CoGroupedStreams,
    ConnectedStreams,
    DataStream,
    IntervalJoin,
    KeyedStream,
    StreamExecutionEnvironment,
    WindowedStream,
)
from weir.runtime.eventtime import Duration, Time, TimestampAssigner, WatermarkGenerator, WatermarkStrategy
from weir.runtime.errors import (
    CheckpointDeclinedError,
    CorruptCheckpointError,
    InvalidConfigurationError,
    InvalidJobGraphError,
    JobCancelledError,
    NoResourceAvailableError,
    JobExecutionError,
    KeySelectionError,
    MalformedInputError,
    RecordDeserializationError,
    RecordSerializationError,
    RecordTypeError,
    StateSerializationError,
    TaskFailedError,
    UserFunctionError,
    WeirError,
)
from weir.runtime.executor import JobClient, JobExecutionResult, JobStatus
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
from weir.runtime.joins import CoGroupFunction, FlatJoinFunction, JoinFunction, ProcessJoinFunction
from weir.runtime.sinks import DiscardingSink, PrintSink, Sink, SinkWriter
from weir.runtime.sources import Source, SourceReader
from weir.runtime.state import (
    AggregatingStateDescriptor,
    BroadcastState,
    ListStateDescriptor,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from weir.runtime.row import Row, RowKind
from weir.runtime.timers import TimeDomain
from weir.runtime.typeinfo import TypeInformation, Types
from weir.runtime.windows import (
    AggregateFunction,
    AllWindowFunction,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    NeverTrigger,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowFunction,
)

__all__ = [
    "CloseableIterator", "CheckpointConfig", "CheckpointingMode", "Configuration", "RestartStrategies", "RestartStrategy",
    "RuntimeExecutionMode",
    "DataStream", "KeyedStream", "StreamExecutionEnvironment",
    "BroadcastConnectedStream", "BroadcastStream", "ConnectedStreams",
    "CheckpointDeclinedError", "CorruptCheckpointError", "InvalidConfigurationError", "InvalidJobGraphError",
    "JobCancelledError", "NoResourceAvailableError", "JobExecutionError", "KeySelectionError", "MalformedInputError",
    "RecordDeserializationError", "RecordSerializationError", "RecordTypeError",
    "StateSerializationError", "TaskFailedError", "UserFunctionError", "WeirError",
    "JobClient", "JobExecutionResult", "JobStatus",
    "FilterFunction", "FlatMapFunction", "KeyedProcessFunction", "KeySelector", "MapFunction",
    "BroadcastProcessFunction", "CoFlatMapFunction", "CoMapFunction", "CoProcessFunction",
    "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction",
    "ProcessFunction", "ReduceFunction", "RuntimeContext",
    "DiscardingSink", "PrintSink", "Sink", "SinkWriter", "Source", "SourceReader",
    "ListStateDescriptor", "MapStateDescriptor", "ValueStateDescriptor", "BroadcastState", "ReadOnlyBroadcastState",
    "StateDescriptor", "StateTtlConfig", "ReducingStateDescriptor", "AggregatingStateDescriptor",
    "Duration", "Time", "TimestampAssigner", "WatermarkGenerator", "WatermarkStrategy", "TimeDomain",
    "AggregateFunction", "CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "OutputTag",
    "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "ProcessWindowFunction", "PurgingTrigger",
    "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeWindow", "Trigger", "TriggerResult",
    "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "WindowedStream",
    "AllWindowedStream", "GlobalWindows", "NeverTrigger", "ProcessAllWindowFunction",
    "AllWindowFunction", "WindowFunction", "CountWindow", "CountTumblingWindowAssigner", "CountSlidingWindowAssigner",
    "SessionWindowTimeGapExtractor",
    "Row", "RowKind", "TypeInformation", "Types",
    "AsyncDataStream", "AsyncFunction", "AsyncRetryStrategy",
    "CoGroupedStreams", "IntervalJoin", "CoGroupFunction", "FlatJoinFunction", "JoinFunction", "ProcessJoinFunction",
]

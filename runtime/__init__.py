"""weir's runtime: the user API, the job graph, operators, state, checkpoints and
every protocol as a plain state machine. Never imports Ray."""

from runtime.config import CheckpointConfig, CheckpointingMode, RestartStrategies, RestartStrategy
from runtime.datastream import DataStream, KeyedStream, StreamExecutionEnvironment, WindowedStream
from runtime.eventtime import Time, WatermarkGenerator, WatermarkStrategy
from runtime.errors import (
    CheckpointDeclinedError,
    CorruptCheckpointError,
    InvalidConfigurationError,
    InvalidJobGraphError,
    JobCancelledError,
    JobExecutionError,
    KeySelectionError,
    RecordSerializationError,
    StateSerializationError,
    TaskFailedError,
    UserFunctionError,
    WeirError,
)
from runtime.executor import JobClient, JobExecutionResult, JobStatus
from runtime.functions import (
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from runtime.sinks import DiscardingSink, PrintSink, Sink, SinkWriter
from runtime.sources import Source, SourceReader
from runtime.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from runtime.timers import TimeDomain
from runtime.windows import (
    AggregateFunction,
    CountTrigger,
    EventTimeSessionWindows,
    EventTimeTrigger,
    OutputTag,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

__all__ = [
    "CheckpointConfig", "CheckpointingMode", "RestartStrategies", "RestartStrategy",
    "DataStream", "KeyedStream", "StreamExecutionEnvironment",
    "CheckpointDeclinedError", "CorruptCheckpointError", "InvalidConfigurationError", "InvalidJobGraphError",
    "JobCancelledError", "JobExecutionError", "KeySelectionError", "RecordSerializationError",
    "StateSerializationError", "TaskFailedError", "UserFunctionError", "WeirError",
    "JobClient", "JobExecutionResult", "JobStatus",
    "FilterFunction", "FlatMapFunction", "KeyedProcessFunction", "KeySelector", "MapFunction",
    "ProcessFunction", "ReduceFunction", "RuntimeContext",
    "DiscardingSink", "PrintSink", "Sink", "SinkWriter", "Source", "SourceReader",
    "ListStateDescriptor", "MapStateDescriptor", "ValueStateDescriptor",
    "Time", "WatermarkGenerator", "WatermarkStrategy", "TimeDomain",
    "AggregateFunction", "CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "OutputTag",
    "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "ProcessWindowFunction", "PurgingTrigger",
    "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeWindow", "Trigger", "TriggerResult",
    "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "WindowedStream",
]

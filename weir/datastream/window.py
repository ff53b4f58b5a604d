"""PyFlink's ``pyflink.datastream.window``, on weir: the window assigners,
windows and triggers weir has. A custom ``Trigger`` subclass keeps PyFlink's
methods; weir has no ``WindowAssigner`` of PyFlink's shape to subclass."""

from weir.runtime.windows import (
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

__all__ = [
    "TimeWindow", "TumblingProcessingTimeWindows", "TumblingEventTimeWindows", "SlidingProcessingTimeWindows",
    "SlidingEventTimeWindows", "ProcessingTimeSessionWindows", "EventTimeSessionWindows", "GlobalWindows",
    "TriggerResult", "Trigger", "EventTimeTrigger", "ProcessingTimeTrigger", "NeverTrigger", "PurgingTrigger",
    "CountTrigger", "CountWindow", "CountTumblingWindowAssigner", "CountSlidingWindowAssigner",
    "SessionWindowTimeGapExtractor",
]

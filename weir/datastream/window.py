"""PyFlink's ``pyflink.datastream.window``, on weir: the window assigners and
triggers weir has. A custom ``Trigger`` subclass keeps PyFlink's methods; weir
has no ``WindowAssigner`` of PyFlink's shape to subclass, and no count windows
but ``count_window`` on a keyed stream."""

from weir.runtime.windows import (
    CountTrigger,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
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
    "TimeWindow", "TumblingProcessingTimeWindows", "TumblingEventTimeWindows", "SlidingProcessingTimeWindows",
    "SlidingEventTimeWindows", "ProcessingTimeSessionWindows", "EventTimeSessionWindows", "GlobalWindows",
    "TriggerResult", "Trigger", "EventTimeTrigger", "ProcessingTimeTrigger", "NeverTrigger", "PurgingTrigger",
    "CountTrigger",
]

"""PyFlink's ``pyflink.datastream.state``, on weir: state descriptors, the state
a user function gets back, and state TTL."""

from weir.runtime.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    ReducingState,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)

__all__ = [
    "ValueStateDescriptor",
    "ValueState",
    "ListStateDescriptor",
    "ListState",
    "MapStateDescriptor",
    "MapState",
    "ReadOnlyBroadcastState",
    "BroadcastState",
    "StateTtlConfig",
    "ReducingStateDescriptor",
    "ReducingState",
    "AggregatingStateDescriptor",
    "AggregatingState",
]

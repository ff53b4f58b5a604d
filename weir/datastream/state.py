"""PyFlink's ``pyflink.datastream.state``, on weir: state descriptors, the state
a user function gets back, and state TTL (no reducing or aggregating state)."""

from weir.runtime.state import (
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)

__all__ = [
    "ValueStateDescriptor", "ValueState", "ListStateDescriptor", "ListState", "MapStateDescriptor", "MapState",
    "ReadOnlyBroadcastState", "BroadcastState", "StateTtlConfig",
]

"""PyFlink's ``pyflink.datastream.data_stream``, on weir: the stream classes."""

from weir.runtime.datastream import (
    BroadcastConnectedStream,
    BroadcastStream,
    ConnectedStreams,
    DataStream,
    KeyedStream,
    WindowedStream,
)

__all__ = [
    "DataStream",
    "KeyedStream",
    "WindowedStream",
    "ConnectedStreams",
    "BroadcastStream",
    "BroadcastConnectedStream",
]

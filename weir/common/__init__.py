"""PyFlink's ``pyflink.common``, on weir: the names of it that weir has, as
weir's own classes. A PyFlink program's ``from pyflink.common import ...``
becomes ``from weir.common import ...``."""

from weir.common.serialization import DeserializationSchema, Encoder, SerializationSchema, SimpleStringSchema
from weir.runtime.config import Configuration, ExecutionConfig
from weir.runtime.eventtime import Duration, Time, WatermarkStrategy
from weir.runtime.executor import JobClient, JobExecutionResult, JobStatus
from weir.runtime.row import Row, RowKind
from weir.runtime.typeinfo import TypeInformation, Types

__all__ = [
    "Configuration",
    "ExecutionConfig",
    "TypeInformation",
    "Types",
    "SerializationSchema",
    "DeserializationSchema",
    "SimpleStringSchema",
    "Encoder",
    "JobClient",
    "JobExecutionResult",
    "JobStatus",
    "Row",
    "RowKind",
    "WatermarkStrategy",
    "Duration",
    "Time",
]

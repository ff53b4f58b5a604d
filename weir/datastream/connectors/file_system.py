"""PyFlink's ``pyflink.datastream.connectors.file_system``, on weir: the file
source and sink of :mod:`weir.connectors.files`."""

from weir.connectors.file_source import BulkFormat, FileSourceBuilder, StreamFormat
from weir.connectors.files import FileSink, FileSource, OutputFileConfig, RollingPolicy

__all__ = [
    "FileSource",
    "FileSourceBuilder",
    "FileSink",
    "StreamFormat",
    "BulkFormat",
    "OutputFileConfig",
    "RollingPolicy",
]

"""weir: exactly-once stream processing with PyFlink's DataStream API.

``from weir import StreamExecutionEnvironment`` gives the user API (everything
:mod:`weir.runtime` exports). Its parts: :mod:`weir.runtime` (the API, the job
graph and every protocol, never imports Ray), :mod:`weir.actors` (the Ray
executor and the CLI), :mod:`weir.connectors` (files, Kafka, Spark).

PyFlink's module paths are mirrored: ``weir.datastream``, ``weir.common`` and
their submodules re-export weir's classes under PyFlink's names, so a PyFlink
program ports by replacing its import root ``pyflink`` with ``weir``.
"""

from weir.runtime import *  # noqa: F403 - the user API, listed once in weir.runtime.__all__
from weir.runtime import __all__ as __all__

"""PyFlink's test bases, on weir: what ``bench/pyflink_conformance.py`` runs
PyFlink's own DataStream tests through, in place of ``pyflink.testing.test_case_utils``,
``pyflink.datastream.tests.test_util``, ``pyflink.java_gateway`` and ``pyflink.util.java_utils``.

The bases give each test a fresh environment (PyFlink's share one per class, on a
mini-cluster). ``DataStreamTestSinkFunction`` is a weir sink that keeps what the
job wrote in this process (the local executor runs the job here) and hands it
back as PyFlink's does: as the Java objects' ``toString()``, or, with
``is_python_object``, as ``str()`` of the records. It formats records and never
computes one: a test passes only if the job it built ran on weir and wrote them.
Anything that needs the JVM raises :class:`JvmNotAvailable`; the conformance
script does not count the tests that call it.
"""

from __future__ import annotations

import importlib
import itertools
import shutil
import tempfile
import unittest
from typing import Any

from weir import Row, RuntimeExecutionMode, StreamExecutionEnvironment
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import Sink, SinkWriter

_collected: dict[int, list[Any]] = {}  # a test sink's records, by its id
_sink_ids = itertools.count()


class JvmNotAvailable(RuntimeError):
    """A test reached for PyFlink's Java gateway, which weir does not have."""


class MissingName(AttributeError):
    """A name a PyFlink test imports that weir does not have."""


def get_gateway() -> Any:
    raise JvmNotAvailable("weir has no Java gateway")


def get_j_env_configuration(j_env: Any) -> Any:
    raise JvmNotAvailable("weir has no Java configuration")


class _JavaConfig:
    """What the test bases' ``setUp`` sets on the Java configuration (Pekko's ask
    timeout, the Python execution mode): settings of Flink's runtime, ignored."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def java_config() -> _JavaConfig:
    return _JavaConfig()


class _MissingMeta(type):
    def __getattr__(cls, name: str) -> Any:
        raise MissingName(f"weir has no {cls.__qualname__}")

    def __getitem__(cls, item: Any) -> type:
        return cls


def weir_names(module: str, *names: str) -> Any:
    """``from module import names``, with a stand-in for each name weir lacks: a
    test module imports many names at its top, and one a test does not use must
    not fail the others. A stand-in may be subscripted and subclassed, and fails
    the test that calls it or reads from it."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        found = None
    values = []
    for name in names:
        value = getattr(found, name, None)
        if value is None:
            value = _MissingMeta(name, (), {"__qualname__": f"{module}.{name}", "__init__": _refuse})
        values.append(value)
    return values[0] if len(values) == 1 else values


def _refuse(self: Any, *args: Any, **kwargs: Any) -> None:
    raise MissingName(f"weir has no {type(self).__qualname__}")


class PyFlinkTestCase(unittest.TestCase):
    tempdir: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.tempdir = tempfile.mkdtemp()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tempdir, ignore_errors=True)


class _FreshEnvironment(PyFlinkTestCase):
    mode = RuntimeExecutionMode.STREAMING

    def setUp(self) -> None:
        super().setUp()
        self.env = StreamExecutionEnvironment.get_execution_environment()
        self.env.set_parallelism(2)
        self.env.set_runtime_mode(self.mode)


class PyFlinkStreamingTestCase(_FreshEnvironment):
    mode = RuntimeExecutionMode.STREAMING


class PyFlinkBatchTestCase(_FreshEnvironment):
    mode = RuntimeExecutionMode.BATCH


def java_string(value: Any) -> str:
    """``value`` as the Java object PyFlink hands its test sink prints it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Row):
        return f"{value.get_row_kind()}[{', '.join(java_string(v) for v in value)}]"
    if isinstance(value, tuple):
        return f"({','.join(java_string(v) for v in value)})"
    if isinstance(value, list):
        return f"[{', '.join(java_string(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{java_string(k)}={java_string(v)}" for k, v in value.items()) + "}"
    return str(value)


class _Collecting(SinkWriter):
    def __init__(self, sink_id: int) -> None:
        self._sink_id = sink_id

    def write(self, records: list[Any]) -> None:
        _collected[self._sink_id].extend(records)


class DataStreamTestSinkFunction(Sink):
    """Collects what the job writes, in this process (the local executor)."""

    def __init__(self) -> None:
        self._id = next(_sink_ids)
        _collected[self._id] = []

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _Collecting(self._id)

    def get_results(self, is_python_object: bool = False, stringify: bool = True) -> list[Any]:
        records, _collected[self._id] = _collected[self._id], []
        if not is_python_object:
            return [java_string(r) for r in records]
        return [str(r) for r in records] if stringify else records

    def clear(self) -> None:
        _collected[self._id] = []

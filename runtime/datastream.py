"""The user API: PyFlink's DataStream names in idiomatic Python.

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(0, 99).map(lambda i: (i % 10, i)).key_by(lambda kv: kv[0]) \\
       .reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink)
    env.execute("job")

This module holds the environment, which builds streams and runs jobs, and
PyFlink's :class:`DataStream` and :class:`KeyedStream`, the classes a user gets:
the core's transformations (:mod:`weir.runtime.stream_core`) with the entry
points of PyFlink's builders, which are a layer over that core:
:mod:`weir.runtime.windowed_streams` (windows, window joins),
:mod:`weir.runtime.connected_streams` (two inputs, broadcast, interval joins)
and :mod:`weir.runtime.async_stream`. Every stream class is importable from
here, as before the split.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import os
import signal
import sys
import threading
import uuid
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Sequence, overload

from weir.runtime import progress
from weir.runtime.async_stream import AsyncDataStream
from weir.runtime.collect import CloseableIterator, CollectSink
from weir.runtime.config import (
    CheckpointConfig,
    CheckpointingMode,
    Configuration,
    ExecutionConfig,
    RestartStrategy,
    RuntimeExecutionMode,
    _number,
    _whole,
)
from weir.runtime.connected_streams import BroadcastConnectedStream, BroadcastStream, ConnectedStreams, IntervalJoin
from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError
from weir.runtime.eventtime import WatermarkStrategy
from weir.runtime.executor import JobClient, JobExecutionResult, find_executor
from weir.runtime.functions import OutputTag
from weir.runtime.graph import JobGraph, PartitionSpec, Transformation, build_job_graph, topological
from weir.runtime.operators import StreamOperator
from weir.runtime.row import Row
from weir.runtime.sinks import Sink, SinkOperator
from weir.runtime.sources import (
    CollectionSource,
    GeneratorSource,
    SequenceSource,
    Source,
    SourceCoordinator,
    SourceOperator,
)
from weir.runtime.state import MapStateDescriptor
from weir.runtime.state_backend import HashMapStateBackend, StateBackend
from weir.runtime.stream_core import DataStreamCore, Inputs, KeyedStreamCore
from weir.runtime.typeinfo import TypeInformation, type_arg
from weir.runtime.windowed_streams import AllWindowedStream, CoGroupedStreams, WindowedStream
from weir.runtime.windows import GlobalWindows, WindowAssigner

__all__ = [
    "StreamExecutionEnvironment",
    "DataStream",
    "KeyedStream",
    "WindowedStream",
    "AllWindowedStream",
    "ConnectedStreams",
    "BroadcastStream",
    "BroadcastConnectedStream",
    "CoGroupedStreams",
    "IntervalJoin",
    "AsyncDataStream",
]

log = logging.getLogger("weir.environment")


def _check_source(source: Any, strategy: WatermarkStrategy | None, name: str) -> None:
    if not isinstance(source, Source):
        raise TypeError(f"from_source() takes a weir.runtime.sources.Source, got {type(source).__name__}")
    if strategy is None:
        return
    if not isinstance(strategy, WatermarkStrategy):
        raise InvalidConfigurationError("watermark strategy", strategy, "use WatermarkStrategy.for_...()")
    if strategy.generator_factory is not None and strategy.timestamp_assigner is None and not source.has_timestamps:
        raise InvalidConfigurationError(
            "watermark strategy", strategy, f"source '{name}' needs .with_timestamp_assigner(...)"
        )


def _refuse_endless_collect(env: "StreamExecutionEnvironment", inputs: list[Any]) -> None:
    upstream = topological([*env._sinks, *(t for t, _ in inputs)])
    endless = sorted({t.name for t in upstream if t.is_source and not t.bounded})
    if endless and not env.checkpoint_config.enabled:
        raise InvalidConfigurationError(
            "checkpoint interval_ms",
            None,
            f"execute_and_collect() hands out records as checkpoints commit them, and {', '.join(endless)} never ends: "
            "call env.enable_checkpointing(interval_ms)",
        )


class StreamExecutionEnvironment:
    """Builds a job and runs it. Not thread-safe; one per job script or notebook.
    As in PyFlink, each ``execute()`` (``execute_async()``, ``execute_and_collect()``)
    runs the sinks built since the one before: a notebook that runs a pipeline,
    then builds another and executes again, runs only the new one."""

    def __init__(self) -> None:
        self.config = ExecutionConfig()
        self.checkpoint_config = CheckpointConfig()
        # Defaults `weir run` sets for the script it runs (--parallelism, --from-savepoint).
        if os.environ.get("WEIR_DEFAULT_PARALLELISM"):
            self.set_parallelism(int(os.environ["WEIR_DEFAULT_PARALLELISM"]))
        if os.environ.get("WEIR_RESTORE_FROM"):
            self.restore_from_savepoint(
                os.environ["WEIR_RESTORE_FROM"], bool(os.environ.get("WEIR_ALLOW_NON_RESTORED_STATE"))
            )
        self._ids = itertools.count(1)
        self._sinks: list[Transformation] = []  # built since the last execute: what the next one runs
        self._sink_locations: dict[str, str] = {}  # a sink's exclusive location -> its operator's name
        # Each source's size_hint(), by transformation id, for the progress bar: a
        # source that ran may feed a pipeline built later, so this is not cleared.
        self._source_sizes: dict[int, int | None] = {}
        self._last_run: str | None = None  # the job the last execute ran, for the error when nothing is new
        # The graphs of the jobs submitted from here: what a job reads in the driver
        # (a DataFrame's Arrow cache in Spark lives as long as its source object)
        # must outlive the pipeline the environment forgets at each execute.
        self._submitted: list[JobGraph] = []
        self._progress_bar: bool | None = None  # None: when someone watches (a terminal, a notebook)

    @staticmethod
    def get_execution_environment(configuration: Configuration | None = None) -> "StreamExecutionEnvironment":
        """A new environment; a :class:`Configuration`'s ``parallelism.default`` and
        ``execution.runtime-mode`` (``streaming``, ``batch``, ``automatic``) set its
        parallelism and mode, and a warning names the keys weir does not apply."""
        env = StreamExecutionEnvironment()
        if configuration is None:
            return env
        settings = configuration.to_dict()
        if "parallelism.default" in settings:
            env.set_parallelism(configuration.get_integer("parallelism.default", 1))
        mode = settings.get("execution.runtime-mode")
        if mode is not None:
            if mode.upper() not in RuntimeExecutionMode.__members__:
                raise InvalidConfigurationError("execution.runtime-mode", mode, "use streaming, batch or automatic")
            env.set_runtime_mode(RuntimeExecutionMode[mode.upper()])
        ignored = sorted(settings.keys() - {"parallelism.default", "execution.runtime-mode"})
        if ignored:
            log.warning(
                "configuration keys weir does not apply: %s (set weir's settings on the environment)",
                ", ".join(ignored),
            )
        return env

    # ---------------------------------------------------------------- settings
    def get_config(self) -> ExecutionConfig:
        """PyFlink's: the job's settings (``set_auto_watermark_interval``, parallelism)."""
        return self.config

    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        self.config.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self.config.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        self.config.set_max_parallelism(max_parallelism)
        return self

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> "StreamExecutionEnvironment":
        """PyFlink's: ``RuntimeExecutionMode.STREAMING`` (the default), ``BATCH``
        (every source must be bounded: keyed reduces emit one final value per
        key, every timer fires at the end of input, no periodic checkpoints) or
        ``AUTOMATIC`` (``BATCH`` when every source is bounded). Resolved, and
        checked against the sources, when the job is submitted."""
        if not isinstance(execution_mode, RuntimeExecutionMode):
            raise InvalidConfigurationError(
                "runtime_mode", execution_mode, "use RuntimeExecutionMode.STREAMING, BATCH or AUTOMATIC"
            )
        self.config.runtime_mode = execution_mode
        return self

    def set_state_backend(self, state_backend: StateBackend) -> "StreamExecutionEnvironment":
        """PyFlink's: where keyed state lives while the job runs,
        ``HashMapStateBackend()`` (the heap, the default) or
        ``EmbeddedRocksDBStateBackend()`` (a local RocksDB per operator subtask).
        Either restores the other's savepoints and checkpoints."""
        if not isinstance(state_backend, StateBackend):
            raise InvalidConfigurationError(
                "state backend", state_backend, "use HashMapStateBackend() or EmbeddedRocksDBStateBackend()"
            )
        self.config.state_backend = state_backend
        return self

    def get_state_backend(self) -> StateBackend:
        return self.config.state_backend or HashMapStateBackend()

    def enable_checkpointing(
        self, interval_ms: int, mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    ) -> "StreamExecutionEnvironment":
        self.checkpoint_config.set_checkpoint_interval(interval_ms)
        self.checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self.checkpoint_config

    def set_restart_strategy(self, strategy: RestartStrategy) -> "StreamExecutionEnvironment":
        """How often and how soon a failed job restarts. Unset, a job with
        checkpointing restarts without limit at growing delays, and one without
        restarts 3 times (see :func:`weir.runtime.config.restart_strategy_for`)."""
        if not isinstance(strategy, RestartStrategy):
            raise InvalidConfigurationError(
                "restart strategy",
                strategy,
                "use RestartStrategy.fixed_delay(...), exponential_delay(...) or no_restart()",
            )
        self.config.restart_strategy = strategy
        return self

    def restore_from_savepoint(self, path: str, allow_non_restored_state: bool = False) -> "StreamExecutionEnvironment":
        """Start the job from a savepoint (or a retained checkpoint's ``chk-N``
        folder). Operators are matched by uid; parallelism may differ. State of a
        uid this job lacks is an error unless ``allow_non_restored_state``."""
        from weir.runtime.config import validate_storage_uri

        self.config.restore_from = validate_storage_uri(path, "savepoint path")
        self.config.allow_non_restored_state = bool(allow_non_restored_state)
        return self

    def set_auto_watermark_interval(self, interval_ms: int) -> "StreamExecutionEnvironment":
        """How often sources and ``assign_timestamps_and_watermarks`` emit watermarks (default 200 ms)."""
        self.config.set_auto_watermark_interval(interval_ms)
        return self

    def set_buffer_timeout(self, timeout_ms: int) -> "StreamExecutionEnvironment":
        self.config.transport.buffer_timeout_ms = _whole("buffer_timeout_ms", timeout_ms, allow_zero=True)
        return self

    def set_batch_size(self, records: int) -> "StreamExecutionEnvironment":
        self.config.transport.batch_size = _whole("batch_size", records)
        return self

    def set_task_cpus(self, cpus: float) -> "StreamExecutionEnvironment":
        """Ray CPUs each task actor asks for; fractions let more tasks than cores run."""
        _number("task_cpus", cpus)
        self.config.task_cpus = float(cpus)
        return self

    def set_progress_bar(self, enabled: bool) -> "StreamExecutionEnvironment":
        """Whether ``execute()`` draws a progress bar (records read of the sources'
        total where they know it, checkpoints, restarts). Default: when someone
        watches, in a terminal or a notebook; not in pipes and CI logs."""
        if not isinstance(enabled, bool):
            raise InvalidConfigurationError("progress_bar", enabled, "use True or False")
        self._progress_bar = enabled
        return self

    def set_slot_request_timeout(self, timeout_ms: int) -> "StreamExecutionEnvironment":
        """How long a deployment (the job's start, a restart, a rescale) waits for
        room on the cluster for its tasks before it fails with
        ``NoResourceAvailableError`` and the restart strategy takes over (default
        5 minutes, as Flink's ``slot.request.timeout``). A cancel stops the wait."""
        self.config.slot_request_timeout_ms = _whole("slot_request_timeout_ms", timeout_ms)
        return self

    def set_placement(self, strategy: str) -> "StreamExecutionEnvironment":
        """Where Ray puts task actors: ``"spread"`` over the nodes (the default,
        for throughput and to lose few tasks with a node) or ``"pack"`` them onto
        as few nodes as fit."""
        if strategy not in ("spread", "pack"):
            raise InvalidConfigurationError("placement", strategy, 'use "spread" or "pack"')
        self.config.placement = strategy
        return self

    def set_failover_strategy(self, strategy: str) -> "StreamExecutionEnvironment":
        """What restarts when a task fails: ``"region"`` (the default) only the
        tasks joined to it by channels (its pipelined region), while the other
        regions go on; ``"full"`` every task. Either way a restart uses up one
        attempt of the job's restart strategy."""
        if strategy not in ("region", "full"):
            raise InvalidConfigurationError("failover strategy", strategy, 'use "region" or "full"')
        self.config.failover_strategy = strategy
        return self

    # ---------------------------------------------------------------- sources
    def from_source(
        self,
        source: Source[Any],
        watermark_strategy: WatermarkStrategy | None = None,
        source_name: str = "source",
        type_info: TypeInformation | None = None,
    ) -> "DataStream":
        """Records of ``source``; with a :class:`WatermarkStrategy` they carry event
        time and the source emits watermarks (per split, idle splits excluded).
        With ``type_info`` (PyFlink's) each record is converted to that type as
        it enters the stream (see :meth:`from_collection`)."""
        _check_source(source, watermark_strategy, source_name)
        config = self.config
        t = self._add(
            f"Source: {source_name}",
            lambda n, u: SourceOperator(n, u, source, watermark_strategy, config.watermark_interval_ms),
            [],
        )
        t.record_types.main = type_arg(type_info, f"type_info of source '{source_name}'")
        t.record_types.at_source = True
        t.is_source = True
        t.bounded = source.bounded
        self._source_sizes[t.id] = source.size_hint()
        t.make_coordinator = lambda: SourceCoordinator(source)
        return DataStream(self, [(t, None)], t)

    def from_collection(
        self,
        collection: Sequence[Any] | Iterable[Any],
        type_info: TypeInformation | WatermarkStrategy | None = None,
        watermark_strategy: WatermarkStrategy | None = None,
    ) -> "DataStream":
        """The elements of ``collection``. ``type_info`` (PyFlink's) is their type:
        each element becomes a record of it as PyFlink makes it, a ROW a
        :class:`Row` of the type's field names from a tuple, list, dict or Row
        (``Types.ROW_NAMED(["id", "info"], [...])`` gives rows read as ``r.info``).
        weir's ``watermark_strategy`` stamps them with event time; it may also
        come second, in place of a type: ``from_collection(data, ws)``."""
        if isinstance(type_info, WatermarkStrategy):
            if watermark_strategy is not None:
                raise InvalidConfigurationError(
                    "from_collection() type_info",
                    type_info,
                    "is a WatermarkStrategy, and so is watermark_strategy: give one",
                )
            type_info, watermark_strategy = None, type_info
        return self.from_source(CollectionSource(list(collection)), watermark_strategy, "collection", type_info)

    def from_sequence(self, start: int, end: int) -> "DataStream":
        """The integers from ``start`` to ``end``, both included."""
        return self.from_source(SequenceSource(start, end), source_name="sequence")

    def from_generator(
        self,
        generator: Callable[[int], Any],
        count: int | None = None,
        records_per_second: float | None = None,
        watermark_strategy: WatermarkStrategy | None = None,
    ) -> "DataStream":
        """``generator(i)`` for ``i = 0, 1, ...``; ``count=None`` runs forever (stop or
        cancel the job); ``records_per_second`` limits the rate over all subtasks."""
        return self.from_source(GeneratorSource(generator, count, records_per_second), watermark_strategy, "generator")

    # ---------------------------------------------------------------- dependencies
    def add_python_file(self, file_path: str) -> None:
        """Make a Python file, package or folder importable by the job's functions,
        as PyFlink's does: its folder (a package's parent, a folder or zip itself)
        joins ``sys.path`` here, which the local executor's tasks share. Ray's task
        actors are other processes: there, install it on the cluster (or ship it in
        Ray's ``runtime_env``)."""
        path = os.path.abspath(file_path)
        if not os.path.exists(path):
            raise InvalidConfigurationError("add_python_file() path", file_path, "does not exist")
        if os.path.isfile(path) and not path.endswith(".zip"):
            folder = os.path.dirname(path)
        elif os.path.exists(os.path.join(path, "__init__.py")):
            folder = os.path.dirname(path)
        else:
            folder = path
        if folder not in sys.path:
            sys.path.insert(0, folder)

    def add_jars(self, *jars_path: str) -> None:
        """Accepted and ignored, with a warning: weir runs no JVM."""
        log.warning(
            "add_jars(%s) ignored: weir runs no JVM, so Java jars have nothing to load them", ", ".join(jars_path)
        )

    def add_classpaths(self, *classpaths: str) -> None:
        """Accepted and ignored, with a warning: weir runs no JVM."""
        log.warning(
            "add_classpaths(%s) ignored: weir runs no JVM, so Java classpaths have nothing to load them",
            ", ".join(classpaths),
        )

    # ---------------------------------------------------------------- running
    def get_job_graph(self, job_name: str | None = None) -> JobGraph:
        """The graph the next ``execute()`` runs (PyFlink's ``get_execution_plan``);
        building it runs nothing and clears nothing. Without ``job_name`` it is
        named ``weir-job-<its run id>`` (see :meth:`execute`)."""
        return self._job_graph(job_name, self._sinks)

    def get_execution_plan(self) -> str:
        """The job the next ``execute()`` runs, as Flink's JSON execution plan: a node
        per operator, before chaining (``id``, ``type`` its name, ``pact`` "Data Source",
        "Operator" or "Data Sink", ``contents``, ``parallelism``), each with its
        ``predecessors`` and their ``ship_strategy`` (FORWARD, REBALANCE, HASH,
        BROADCAST, SHUFFLE, CUSTOM). Building it runs nothing and clears nothing."""
        order = topological(self._sinks)
        sinks = {t.id for t in self._sinks}

        def parallelism(t: Transformation) -> int:
            return t.parallelism or self.get_parallelism()

        def ship_strategy(u: Transformation, t: Transformation, spec: PartitionSpec | None) -> str:
            kind = spec.kind if spec is not None else ""
            if not kind:
                kind = "forward" if parallelism(u) == parallelism(t) else "rebalance"
            return kind.upper()

        nodes = [
            {
                "id": t.id,
                "type": t.name,
                "contents": t.name,
                "parallelism": parallelism(t),
                "pact": "Data Source" if t.is_source else "Data Sink" if t.id in sinks else "Operator",
                "predecessors": [
                    {
                        "id": u.id,
                        "ship_strategy": ship_strategy(u, t, spec),
                        "side": "second" if spec is not None and spec.input_index else "first",
                    }
                    for u, spec in t.inputs
                ],
            }
            for t in order
        ]
        return json.dumps({"nodes": nodes}, indent=2)

    def _job_graph(self, job_name: str | None, sinks: list[Transformation], unnamed: str = "weir-job") -> JobGraph:
        """The graph of ``sinks``, named ``job_name``, or without one
        ``<unnamed>-<its run id>``: one name runs once at a time on a cluster, so
        two unnamed jobs (two notebook cells) must not share one."""
        run_id = uuid.uuid4().hex[:12]
        if job_name is None:
            job_name = f"{unnamed}-{run_id}"
        if not isinstance(job_name, str) or not job_name or "/" in job_name:
            raise InvalidConfigurationError("job name", job_name, "must be a non-empty string without '/'")
        if not sinks and self._last_run is not None:
            raise InvalidJobGraphError(
                f"the job has no sink: the execute() of job '{self._last_run}' already ran the operators "
                "built before it, and no sink was added since (each execute() runs what was built after "
                "the last one, as in PyFlink): build the next pipeline, ending in sink_to(...) or print(), "
                "then execute()"
            )
        graph = build_job_graph(
            job_name, list(sinks), copy.deepcopy(self.config), copy.deepcopy(self.checkpoint_config)
        )
        return replace(graph, run_id=run_id)

    def _ran(self, graph: JobGraph) -> None:
        """``graph``, of the sinks built so far, was submitted: the next execute()
        runs only what is built after this, as PyFlink's clears its
        transformations. (PyFlink clears them before submitting; weir after, so
        that a submission refused, say for a name in use, can be retried.)"""
        self._sinks = []
        self._sink_locations = {}
        self._last_run = graph.name
        self._submitted.append(graph)

    def execute_async(self, job_name: str | None = None, executor: str | None = None) -> JobClient:
        """Submit the job and return at once with a :class:`JobClient`; without
        ``job_name`` it is named as in :meth:`execute`."""
        graph = self.get_job_graph(job_name)
        client = find_executor(executor).submit(graph)
        self._ran(graph)
        return client

    def execute(self, job_name: str | None = None, executor: str | None = None) -> JobExecutionResult:
        """Run the job to its end; raise :class:`JobExecutionError` if it fails for good.
        A job named ``job_name`` runs once at a time on a cluster (a second
        submission of a running name is refused); without one it is named
        ``weir-job-<its run id>``, so unnamed jobs run side by side, as in PyFlink.
        A progress bar shows while it waits (see :meth:`set_progress_bar`).
        Ctrl-C (``KeyboardInterrupt``, a notebook's interrupt) while it waits cancels
        the job, says so, and raises on: a job started this way ends with its caller
        (``execute_async`` starts one that runs on). One that comes while the job is
        being submitted is held until it is, so that it can be cancelled; a second
        one stops waiting for the submission."""
        graph = self.get_job_graph(job_name)
        with _interrupt_held(graph.name) as held:
            client = find_executor(executor).submit(graph)
            self._ran(graph)
        try:
            if held:
                raise KeyboardInterrupt
            if progress.wanted(self._progress_bar):
                sizes = [self._source_sizes[t.id] for t in topological(graph.sinks) if t.is_source]
                return progress.watch(
                    client, graph, sum(n for n in sizes if n is not None) if None not in sizes else None
                )
            return client.wait()
        except KeyboardInterrupt:
            print(f"weir: Ctrl-C: cancelling job '{graph.name}' ...", file=sys.stderr, flush=True)
            client.cancel()
            print(
                f"weir: job '{graph.name}' cancelled (use execute_async() for a job that runs on without you)",
                file=sys.stderr,
                flush=True,
            )
            raise

    def _execute_and_collect(
        self, inputs: Inputs, job_name: str | None, limit: int | None, executor: str | None
    ) -> CloseableIterator | list[Any]:
        """:meth:`DataStream.execute_and_collect` of the stream of ``inputs``."""
        if limit is not None:
            limit = _whole("execute_and_collect() limit", limit)
        _refuse_endless_collect(self, inputs)
        ex = find_executor(executor)
        channel = ex.collect_channel()
        try:
            publisher = channel.publisher()
            collect = self._add("Sink: collect", lambda n, u: SinkOperator(n, u, CollectSink(publisher)), list(inputs))
            collect.parallelism = 1  # one committable per checkpoint, records in the order they arrive
            graph = self._job_graph(job_name or None, [*self._sinks, collect], unnamed="collect")
            records = CloseableIterator(ex.submit(graph), channel)
            self._ran(graph)
        except BaseException:
            channel.close()
            raise
        if limit is None:
            return records
        with records:
            return list(itertools.islice(records, limit))

    # ---------------------------------------------------------------- internals
    def _add(
        self,
        name: str,
        make: Callable[[str, str], StreamOperator],
        inputs: Inputs,
    ) -> Transformation:
        return Transformation(next(self._ids), name, make, inputs)

    def _add_sink(self, sink: Sink, inputs: Inputs) -> Transformation:
        """A sink reading ``inputs``, which the next ``execute()`` runs. Two sinks
        that write to one exclusive location would overwrite each other's files."""
        where = sink.exclusive_location()
        other = self._sink_locations.get(where) if where is not None else None
        if where is not None and other is not None:
            raise InvalidJobGraphError(
                f"two sinks of this job write to {where} ({other} and another {type(sink).__name__}): "
                "their files would collide; give each sink a folder of its own"
            )
        t = self._add(f"Sink: {type(sink).__name__}", lambda n, u: SinkOperator(n, u, sink), inputs)
        self._sinks.append(t)
        if where is not None:
            self._sink_locations[where] = t.name
            t.output = where
        return t


@contextlib.contextmanager
def _interrupt_held(job_name: str) -> Iterator[list[int]]:
    """Holds the first Ctrl-C while ``job_name`` is submitted (an interrupt raised
    out of the submission would leave a job running that no one can cancel) and
    yields the list it is recorded in; a second one is raised at once, for a
    submission that hangs. Only the main thread receives signals."""
    caught: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield caught
        return

    def hold(signum: int, frame: Any) -> None:
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)
        print(
            f"weir: Ctrl-C while job '{job_name}' is being submitted: it will be cancelled once it is "
            "(Ctrl-C again to stop waiting)",
            file=sys.stderr,
            flush=True,
        )

    signal.signal(signal.SIGINT, hold)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)


class DataStream(DataStreamCore["DataStream", "KeyedStream"]):
    """PyFlink's DataStream: the core's transformations (:class:`DataStreamCore`),
    and the streams that build an operator over more than this stream or over
    windows: ``connect``, ``broadcast``, ``join``, ``co_group``, ``window_all``."""

    _env: StreamExecutionEnvironment

    def _stream(self, inputs: Inputs, transformation: Transformation | None) -> DataStream:
        return DataStream(self._env, inputs, transformation)

    def _keyed_stream(self, inputs: Inputs, key_selector: Callable[[Any], Any]) -> KeyedStream:
        return KeyedStream(self._env, inputs, key_selector)

    @overload
    def connect(self, stream: "BroadcastStream") -> "BroadcastConnectedStream[DataStream]": ...

    @overload
    def connect(self, stream: "DataStream") -> "ConnectedStreams[DataStream]": ...

    def connect(
        self, stream: "DataStream | BroadcastStream"
    ) -> "ConnectedStreams[DataStream] | BroadcastConnectedStream[DataStream]":
        """This stream and another, of any type, into one operator of two inputs:
        a :class:`ConnectedStreams`, or with a :class:`BroadcastStream` (from
        ``broadcast(descriptor)``) a :class:`BroadcastConnectedStream`."""
        if isinstance(stream, BroadcastStream):
            return BroadcastConnectedStream(self, stream)
        if not isinstance(stream, DataStream):
            raise TypeError(f"connect() takes a DataStream or a BroadcastStream, got {type(stream).__name__}")
        return ConnectedStreams(self, stream)

    def join(self, other_stream: "DataStream") -> "CoGroupedStreams[DataStream]":
        """Flink's window join: ``join(other).where(key).equal_to(other_key).window(assigner)
        .apply(JoinFunction)`` joins each pair of records of a key in a window
        (see :mod:`weir.runtime.joins`)."""
        return CoGroupedStreams(self, other_stream, joins=True)

    def co_group(self, other_stream: "DataStream") -> "CoGroupedStreams[DataStream]":
        """Flink's co-group: ``co_group(other).where(key).equal_to(other_key).window(assigner)
        .apply(CoGroupFunction)`` hands over each side's records of a key in a window."""
        return CoGroupedStreams(self, other_stream)

    @overload
    def broadcast(self) -> "DataStream": ...

    @overload
    def broadcast(
        self,
        broadcast_state_descriptor: MapStateDescriptor[Any, Any],
        *other_broadcast_state_descriptors: MapStateDescriptor[Any, Any],
    ) -> "BroadcastStream": ...

    def broadcast(
        self,
        broadcast_state_descriptor: MapStateDescriptor[Any, Any] | None = None,
        *other_broadcast_state_descriptors: MapStateDescriptor[Any, Any],
    ) -> "DataStream | BroadcastStream":
        """Every record to every subtask downstream. With descriptors, a
        :class:`BroadcastStream` to ``connect`` to: its operator keeps the
        broadcast states they name."""
        if broadcast_state_descriptor is None:
            return self._partition("broadcast")
        descriptors = (broadcast_state_descriptor, *other_broadcast_state_descriptors)
        for d in descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise InvalidConfigurationError(
                    "broadcast state descriptor", d, "use MapStateDescriptor('name', key_type, value_type)"
                )
            if d.ttl_config is not None:
                raise InvalidConfigurationError(
                    f"time to live of broadcast state '{d.name}'",
                    d.ttl_config,
                    "broadcast state has none, as in Flink: only keyed state expires",
                )
        names = [d.name for d in descriptors]
        if len(set(names)) != len(names):
            raise InvalidConfigurationError("broadcast state descriptors", names, "each needs a name of its own")
        return BroadcastStream(self._partition("broadcast"), descriptors)

    def window_all(self, window_assigner: WindowAssigner) -> "AllWindowedStream[DataStream]":
        """Windows over the whole stream, not per key: one subtask sees every record
        (parallelism 1, as in Flink)."""
        return AllWindowedStream(self.key_by(_all_records), window_assigner)

    def count_window_all(self, size: int, slide: int | None = None) -> "AllWindowedStream[DataStream]":
        """Windows of ``size`` records of the whole stream; with ``slide``, a window
        of the last ``size`` records every ``slide`` records. Parallelism 1."""
        windowed = self.window_all(GlobalWindows.create())
        windowed._count(size, slide)
        return windowed

    def get_side_output(self, output_tag: OutputTag) -> "DataStream":
        """The records this operator sent to side output ``output_tag``: what a
        process function yielded as ``output_tag, value``, or a window's late data."""
        if not isinstance(output_tag, OutputTag):
            raise InvalidConfigurationError(
                "get_side_output() tag", output_tag, "use an OutputTag('name'), the one the function yields"
            )
        t = self._own("get_side_output()")
        if output_tag.type_info is not None:
            t.record_types.sides[output_tag.tag_id] = output_tag.type_info
        return self._stream([(t, PartitionSpec("", None, output_tag.tag_id))], None)

    def execute_and_collect(
        self, job_execution_name: str | None = None, limit: int | None = None, executor: str | None = None
    ) -> "CloseableIterator | list[Any]":
        """Run the job and return its records here: a :class:`CloseableIterator`
        that yields them while the job runs and cancels the job when closed (use
        ``with``), or, with ``limit``, a list of the first ``limit`` records (the
        job is cancelled then, if it still runs). The records come as completed
        checkpoints commit them, so a failover never shows one twice: per
        checkpoint interval, and at the end of a bounded job. Without periodic
        checkpoints a bounded job's records all come at its end, and an unbounded
        job is refused. Runs the environment's other sinks built since the last
        execute too, and clears them, as ``execute``; ``executor`` is weir's
        (``"local"`` runs in-process). Without ``job_execution_name`` the job is
        named ``collect-<its run id>``, so two run side by side."""
        return self._env._execute_and_collect(self._inputs, job_execution_name, limit, executor)


class KeyedStream(KeyedStreamCore["DataStream", "KeyedStream"], DataStream):
    """PyFlink's KeyedStream: the core's keyed transformations
    (:class:`KeyedStreamCore`), and ``window``, ``count_window`` and ``interval_join``."""

    broadcast = KeyedStreamCore._repartition  # type: ignore[assignment]  # as the core's other partitionings

    def execute_and_collect(
        self,
        job_execution_name: str | None = None,
        limit: int | None = None,
        executor: str | None = None,
    ) -> "CloseableIterator | list[Any]":
        """As :meth:`DataStream.execute_and_collect`, each record with its key, as
        PyFlink hands a keyed stream's records out: ``Row(f0=key, f1=record)``."""
        key_of = self._key_selector
        with_keys = self._stream(self._inputs, None).map(lambda record: Row(f0=key_of(record), f1=record))
        return with_keys.execute_and_collect(job_execution_name, limit, executor)

    def interval_join(self, other: "KeyedStream") -> "IntervalJoin[DataStream]":
        """Flink's interval join with another keyed stream: ``between(lower_ms, upper_ms)``,
        then ``process(ProcessJoinFunction)`` (see :mod:`weir.runtime.joins`)."""
        if not isinstance(other, KeyedStream):
            raise InvalidJobGraphError("interval_join() joins two keyed streams: key_by() the other stream first")
        return IntervalJoin(self, other)

    def window(self, assigner: WindowAssigner) -> "WindowedStream[DataStream]":
        """Group each key's records into windows (tumbling, sliding, session; event
        or processing time)."""
        return WindowedStream(self, assigner)

    def count_window(self, size: int, slide: int | None = None) -> "WindowedStream[DataStream]":
        """Per key, windows of ``size`` records (tumbling: each fires once it is full,
        then empties); with ``slide``, a window of the key's last ``size`` records
        every ``slide`` records. A window not yet full at the end does not fire."""
        windowed = self.window(GlobalWindows.create())
        windowed._count(size, slide)
        return windowed


def _all_records(record: Any) -> int:
    """The key of ``window_all``: one for every record."""
    return 0

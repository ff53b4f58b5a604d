"""The user API: PyFlink's DataStream names in idiomatic Python.

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(0, 99).map(lambda i: (i % 10, i)).key_by(lambda kv: kv[0]) \\
       .reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink)
    env.execute("job")
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import operator
import os
import signal
import sys
import threading
import uuid
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Sequence, overload

from weir.runtime import progress
from weir.runtime.async_io import AsyncFunction, AsyncRetryStrategy, AsyncWaitOperator, checked
from weir.runtime.batches import MapBatchesOperator
from weir.runtime.batches import batch_format as checked_batch_format
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
from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError
from weir.runtime.eventtime import TimestampsAndWatermarksOperator, WatermarkStrategy
from weir.runtime.executor import JobClient, JobExecutionResult, find_executor
from weir.runtime.functions import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    OutputTag,
    as_callable,
)
from weir.runtime.graph import JobGraph, PartitionSpec, Transformation, build_job_graph, topological
from weir.runtime.joins import IntervalJoinFunction, SidesOfAWindow, pairing
from weir.runtime.operators import (
    Calls,
    CoProcessOperator,
    FilterOperator,
    FlatMapOperator,
    KeyedCoProcessOperator,
    KeyedProcessOperator,
    KeyedReduceOperator,
    MapOperator,
    ProcessOperator,
    StreamOperator,
)
from weir.runtime.row import Row, _make_row
from weir.runtime.sinks import PrintSink, Sink, SinkOperator
from weir.runtime.slicing import AlignedWindowOperator, aligned
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
from weir.runtime.typeinfo import TupleTypeInfo, TypeInformation, Types, output_type_arg, type_arg
from weir.runtime.windows import (
    AggregateContents,
    AggregateFunction,
    AllRecords,
    CountTrigger,
    GlobalWindows,
    LastElements,
    PurgingTrigger,
    ReduceContents,
    Trigger,
    WindowAssigner,
    WindowCall,
    WindowOperator,
    _Contents,
)

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

    # ---------------------------------------------------------------- internals
    def _add(
        self,
        name: str,
        make: Callable[[str, str], StreamOperator],
        inputs: list[tuple[Transformation, PartitionSpec | None]],
    ) -> Transformation:
        return Transformation(next(self._ids), name, make, inputs)


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


class DataStream:
    def __init__(
        self,
        env: StreamExecutionEnvironment,
        inputs: list[tuple[Transformation, PartitionSpec | None]],
        transformation: Transformation | None,
    ) -> None:
        self._env = env
        self._inputs = inputs
        self._t = transformation

    # ------------------------------------------------------------ operator settings
    def _own(self, what: str) -> Transformation:
        if self._t is None:
            raise InvalidJobGraphError(
                f"{what} applies to an operator; call it right after map/filter/reduce/..., not after key_by/union/rebalance"
            )
        return self._t

    def set_parallelism(self, parallelism: int) -> "DataStream":
        self._own("set_parallelism()").parallelism = _whole("parallelism", parallelism)
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "DataStream":
        self._own("set_max_parallelism()").max_parallelism = _whole("max_parallelism", max_parallelism)
        return self

    def name(self, name: str) -> "DataStream":
        self._own("name()").name = name
        return self

    def uid(self, uid: str) -> "DataStream":
        """A stable id: state is matched to operators by uid on restore."""
        if not uid or not isinstance(uid, str):
            raise InvalidConfigurationError("uid", uid, "must be a non-empty string")
        self._own("uid()").uid = uid
        return self

    def with_resources(
        self,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        memory: int | None = None,
        resources: dict[str, float] | None = None,
    ) -> "DataStream":
        """Ray resources for each task actor running this operator (fractions
        allowed), e.g. ``.map(score).with_resources(num_gpus=1)`` or
        ``resources={"ssd": 1}``. A chain asks for the most of its operators' asks.
        A request no node of the cluster can ever meet fails at submission."""
        t = self._own("with_resources()")
        asks = {"num_cpus": num_cpus, "num_gpus": num_gpus, "memory": memory, **(resources or {})}
        for name, amount in asks.items():
            if amount is None:
                continue
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                raise InvalidConfigurationError(f"resource {name}", amount, "must be a number of zero or more")
            t.resources[name] = float(amount)
        return self

    def get_name(self) -> str:
        return self._own("get_name()").name

    def get_type(self) -> TypeInformation:
        """The type declared for this stream's records (PyFlink's ``output_type=``,
        ``type_info=``; a side output's: its tag's), else ``Types.PICKLED_BYTE_ARRAY()``:
        any picklable object."""
        return self._declared_type() or Types.PICKLED_BYTE_ARRAY()

    def _declared_type(self) -> TypeInformation | None:
        t, spec = self._inputs[0]  # a union's streams have one type, as in PyFlink
        tag = _tag(spec)
        return t.record_types.main if tag is None else t.record_types.sides.get(tag)

    # ------------------------------------------------------------ transformations
    def _then(self, name: str, make: Callable[[str, str], StreamOperator], output_type: Any = None) -> "DataStream":
        """A new operator reading this stream; ``output_type`` (PyFlink's) is its records' type."""
        t = self._env._add(name, make, list(self._inputs))
        t.record_types.main = output_type_arg(output_type, f"output_type of {name}")
        return DataStream(self._env, [(t, None)], t)

    def map(self, func: Callable[[Any], Any] | Any, output_type: TypeInformation | None = None) -> "DataStream":
        """``func(record)`` per record. With ``output_type`` (a :class:`TypeInformation`)
        each result is checked and converted to it, as PyFlink's serializer does
        (a ROW type takes :class:`Row` s and gives rows with its field names)."""
        call = as_callable(func, "map", "map()")
        return self._then("Map", lambda n, u: MapOperator(n, u, func, call), output_type)

    def flat_map(
        self, func: Callable[[Any], Iterable[Any]] | Any, output_type: TypeInformation | None = None
    ) -> "DataStream":
        call = as_callable(func, "flat_map", "flat_map()")
        return self._then("FlatMap", lambda n, u: FlatMapOperator(n, u, func, call), output_type)

    def filter(self, func: Callable[[Any], bool] | Any) -> "DataStream":
        """The records ``func`` keeps; they keep this stream's declared type, as in PyFlink."""
        call = as_callable(func, "filter", "filter()")
        return self._then("Filter", lambda n, u: FilterOperator(n, u, func, call), self._declared_type())

    def process(self, func: Any, output_type: TypeInformation | None = None) -> "DataStream":
        call = as_callable(func, "process_element", "process()")
        return self._then("Process", lambda n, u: ProcessOperator(n, u, func, call), output_type)

    def map_batches(
        self,
        fn: Callable[[Any], Any] | type,
        batch_size: int = 1024,
        batch_format: str = "default",
        batch_timeout_ms: int | None = 100,
        fn_constructor_args: Iterable[Any] | None = None,
        fn_constructor_kwargs: dict[str, Any] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
    ) -> "DataStream":
        """Ray Data's ``map_batches``: ``fn`` over batches of ``batch_size`` rows
        (dict records), given as ``batch_format`` ``"pyarrow"`` (a Table),
        ``"pandas"`` (a DataFrame) or ``"numpy"`` (``"default"``: a dict of
        arrays), returning a batch of that format whose rows are emitted. A class
        is constructed once per subtask (with ``fn_constructor_args`` /
        ``_kwargs``). ``num_cpus`` / ``num_gpus`` are :meth:`with_resources`'.
        Exactly-once: a partial batch goes through ``fn`` before each checkpoint
        barrier, before each watermark, at the end of input, and once its oldest
        row has waited ``batch_timeout_ms`` (None: never for that reason), so
        ``fn`` should compute each row from that row alone."""
        if not callable(fn):
            raise TypeError(f"map_batches() takes a function or a callable class, got {type(fn).__name__}")
        size = _whole("map_batches batch_size", batch_size)
        fmt = checked_batch_format(batch_format)
        timeout = None if batch_timeout_ms is None else _whole("map_batches batch_timeout_ms", batch_timeout_ms)
        args, kwargs = tuple(fn_constructor_args or ()), dict(fn_constructor_kwargs or {})
        if (args or kwargs) and not isinstance(fn, type):
            raise InvalidConfigurationError(
                "map_batches fn_constructor_args", args or kwargs, "fn is not a class to construct"
            )
        result = self._then("MapBatches", lambda n, u: MapBatchesOperator(n, u, fn, size, fmt, timeout, args, kwargs))
        if num_cpus is not None or num_gpus is not None:
            result.with_resources(num_cpus=num_cpus, num_gpus=num_gpus)
        return result

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy) -> "DataStream":
        """Stamp records with event time and emit watermarks here, anywhere in the
        stream (``from_collection(data).map(parse).assign_timestamps_and_watermarks(ws)``):
        the assigner gives each record its timestamp (without one, records keep
        theirs), one watermark generator per subtask runs every auto-watermark
        interval, and watermarks from upstream are replaced by this strategy's."""
        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise InvalidConfigurationError(
                "assign_timestamps_and_watermarks() strategy", watermark_strategy, "use WatermarkStrategy.for_...()"
            )
        config = self._env.config
        return self._then(
            "Timestamps/Watermarks",
            lambda n, u: TimestampsAndWatermarksOperator(n, u, watermark_strategy, config.watermark_interval_ms),
        )

    def transform(self, name: str, make_operator: Callable[[str, str], StreamOperator]) -> "DataStream":
        """A custom :class:`StreamOperator`: ``make_operator(name, uid)`` builds one per
        subtask, on the task. The operator sees the whole lifecycle, watermarks included."""
        return self._then(name, make_operator)

    def key_by(
        self, key_selector: Callable[[Any], Any] | Any, key_type: TypeInformation | None = None
    ) -> "KeyedStream":
        """Partition by ``key_selector(record)``. ``key_type`` (PyFlink's) is checked to be a
        type and not used: keys are hashed as Python values (see the key rules)."""
        type_arg(key_type, "key_by() key_type")
        ks = as_callable(key_selector, "get_key", "key_by()")
        return KeyedStream(self._env, [(t, PartitionSpec("hash", ks, _tag(s))) for t, s in self._inputs], ks)

    @overload
    def connect(self, stream: "BroadcastStream") -> "BroadcastConnectedStream": ...

    @overload
    def connect(self, stream: "DataStream") -> "ConnectedStreams": ...

    def connect(self, stream: "DataStream | BroadcastStream") -> "ConnectedStreams | BroadcastConnectedStream":
        """This stream and another, of any type, into one operator of two inputs:
        a :class:`ConnectedStreams`, or with a :class:`BroadcastStream` (from
        ``broadcast(descriptor)``) a :class:`BroadcastConnectedStream`."""
        if isinstance(stream, BroadcastStream):
            return BroadcastConnectedStream(self, stream)
        if not isinstance(stream, DataStream):
            raise TypeError(f"connect() takes a DataStream or a BroadcastStream, got {type(stream).__name__}")
        return ConnectedStreams(self, stream)

    def _two_inputs(
        self,
        second: "DataStream",
        name: str,
        make: Callable[[str, str], StreamOperator],
        output_type: Any = None,
    ) -> "DataStream":
        """An operator whose first input is this stream and whose second is ``second``."""
        if second._env is not self._env:
            raise InvalidJobGraphError(f"{name}: connect() joins two streams of one StreamExecutionEnvironment")
        inputs: list[tuple[Transformation, PartitionSpec | None]] = [(t, _input(s, 0)) for t, s in self._inputs]
        inputs += [(t, _input(s, 1)) for t, s in second._inputs]
        t = self._env._add(name, make, inputs)
        t.record_types.main = output_type_arg(output_type, f"output_type of {name}")
        return DataStream(self._env, [(t, None)], t)

    def join(self, other_stream: "DataStream") -> "CoGroupedStreams":
        """Flink's window join: ``join(other).where(key).equal_to(other_key).window(assigner)
        .apply(JoinFunction)`` joins each pair of records of a key in a window
        (see :mod:`weir.runtime.joins`)."""
        return CoGroupedStreams(self, other_stream, joins=True)

    def co_group(self, other_stream: "DataStream") -> "CoGroupedStreams":
        """Flink's co-group: ``co_group(other).where(key).equal_to(other_key).window(assigner)
        .apply(CoGroupFunction)`` hands over each side's records of a key in a window."""
        return CoGroupedStreams(self, other_stream)

    def union(self, *streams: "DataStream") -> "DataStream":
        inputs = list(self._inputs)
        for s in streams:
            inputs += s._inputs
        return DataStream(self._env, inputs, None)

    def _partition(self, kind: str) -> "DataStream":
        return DataStream(self._env, [(t, PartitionSpec(kind, None, _tag(s))) for t, s in self._inputs], None)

    def rebalance(self) -> "DataStream":
        return self._partition("rebalance")

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

    def forward(self) -> "DataStream":
        return self._partition("forward")

    def shuffle(self) -> "DataStream":
        """Each record to a downstream subtask drawn at random."""
        return self._partition("shuffle")

    def rescale(self) -> "DataStream":
        """Round-robin, as :meth:`rebalance`: weir has no local exchange for Flink's rescale to prefer."""
        return self._partition("rescale")

    def partition_custom(self, partitioner: Any, key_selector: Callable[[Any], Any] | Any) -> "DataStream":
        """Each record to subtask ``partitioner(key, num_partitions)`` of its key
        (``key_selector``'s); ``partitioner`` is a callable or has PyFlink's ``partition`` method."""
        choose = as_callable(partitioner, "partition", "partition_custom()")
        select = as_callable(key_selector, "get_key", "partition_custom() key_selector")
        return DataStream(
            self._env, [(t, PartitionSpec("custom", select, _tag(s), custom=choose)) for t, s in self._inputs], None
        )

    def project(self, *field_indexes: int) -> "DataStream":
        """The fields at ``field_indexes`` of each record of a TUPLE stream, as PyFlink's."""
        declared = self._declared_type()
        if not isinstance(declared, TupleTypeInfo):
            raise InvalidJobGraphError(
                f"project{field_indexes}: only a stream of a declared Types.TUPLE can be projected, this one is {declared!r}"
            )
        fields = declared.get_field_types()
        if not field_indexes or any(not isinstance(i, int) or not 0 <= i < len(fields) for i in field_indexes):
            raise InvalidConfigurationError(
                "project() field indexes", field_indexes, f"give fields of the tuple, 0..{len(fields) - 1}"
            )
        return self.map(
            lambda record: tuple(record[i] for i in field_indexes), Types.TUPLE([fields[i] for i in field_indexes])
        ).name("Projection")

    def force_non_parallel(self) -> "DataStream":
        """Run this operator as one subtask, now and after any rescale."""
        return self.set_parallelism(1).set_max_parallelism(1)

    def window_all(self, window_assigner: WindowAssigner) -> "AllWindowedStream":
        """Windows over the whole stream, not per key: one subtask sees every record
        (parallelism 1, as in Flink)."""
        if not isinstance(window_assigner, WindowAssigner):
            raise InvalidConfigurationError(
                "window assigner", window_assigner, "use e.g. TumblingEventTimeWindows.of(Time.minutes(1))"
            )
        return AllWindowedStream(self.key_by(_all_records), window_assigner)

    def count_window_all(self, size: int, slide: int | None = None) -> "AllWindowedStream":
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
        return DataStream(self._env, [(t, PartitionSpec("", None, output_tag.tag_id))], None)

    # ------------------------------------------------------------ sinks
    def sink_to(self, sink: Sink) -> "DataStream":
        if not isinstance(sink, Sink):
            raise TypeError(f"sink_to() takes a weir.runtime.sinks.Sink, got {type(sink).__name__}")
        where = sink.exclusive_location()
        other = self._env._sink_locations.get(where) if where is not None else None
        if where is not None and other is not None:
            raise InvalidJobGraphError(
                f"two sinks of this job write to {where} ({other} and another {type(sink).__name__}): "
                "their files would collide; give each sink a folder of its own"
            )
        s = self._then(f"Sink: {type(sink).__name__}", lambda n, u: SinkOperator(n, u, sink))
        assert s._t is not None
        self._env._sinks.append(s._t)
        if where is not None:
            self._env._sink_locations[where] = s._t.name
            s._t.output = where
        return s

    def add_sink(self, sink_func: Sink) -> "DataStream":
        """PyFlink's name for :meth:`sink_to`: ``sink_func`` is a weir :class:`Sink`
        (weir has no legacy Java ``SinkFunction``)."""
        return self.sink_to(sink_func)

    def print(self, sink_identifier: str | None = None) -> "DataStream":
        """Print each record (see :class:`PrintSink`: PyFlink's format)."""
        return self.sink_to(PrintSink(sink_identifier, self._declared_type()))

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
        if limit is not None:
            limit = _whole("execute_and_collect() limit", limit)
        env = self._env
        _refuse_endless_collect(env, self._inputs)
        ex = find_executor(executor)
        channel = ex.collect_channel()
        try:
            publisher = channel.publisher()
            collect = env._add(
                "Sink: collect", lambda n, u: SinkOperator(n, u, CollectSink(publisher)), list(self._inputs)
            )
            collect.parallelism = 1  # one committable per checkpoint, records in the order they arrive
            graph = env._job_graph(job_execution_name or None, [*env._sinks, collect], unnamed="collect")
            records = CloseableIterator(ex.submit(graph), channel)
            env._ran(graph)
        except BaseException:
            channel.close()
            raise
        if limit is None:
            return records
        with records:
            return list(itertools.islice(records, limit))


class KeyedStream(DataStream):
    def __init__(
        self,
        env: StreamExecutionEnvironment,
        inputs: list[tuple[Transformation, PartitionSpec | None]],
        key_selector: Callable[[Any], Any],
    ) -> None:
        super().__init__(env, inputs, None)
        self._key_selector = key_selector

    def reduce(self, func: Callable[[Any, Any], Any] | Any) -> DataStream:
        """A running reduce per key: emits the new aggregate for every record
        (in BATCH mode, as Flink's: each key's final aggregate once, at the end
        of input). Its records have this stream's declared type, as in PyFlink."""
        call = as_callable(func, "reduce", "reduce()")
        ks = self._key_selector
        return self._then("Reduce", lambda n, u: KeyedReduceOperator(n, u, func, call, ks), self._declared_type())

    def map(self, func: Callable[[Any], Any] | Any, output_type: TypeInformation | None = None) -> DataStream:
        """As :meth:`DataStream.map`, keyed as in PyFlink: the function has the
        key's state (``get_state`` on the context ``open`` gets)."""
        f = as_callable(func, "map", "map()")
        return self._keyed("Map", func, lambda v, ctx: (f(v),), "map function", output_type)

    def flat_map(
        self, func: Callable[[Any], Iterable[Any]] | Any, output_type: TypeInformation | None = None
    ) -> DataStream:
        """As :meth:`DataStream.flat_map`, with the key's state (see :meth:`map`)."""
        f = as_callable(func, "flat_map", "flat_map()")
        return self._keyed("FlatMap", func, lambda v, ctx: f(v), "flat_map function", output_type)

    def filter(self, func: Callable[[Any], bool] | Any) -> DataStream:
        """As :meth:`DataStream.filter`, with the key's state (see :meth:`map`)."""
        f = as_callable(func, "filter", "filter()")
        return self._keyed(
            "Filter", func, lambda v, ctx: (v,) if f(v) else (), "filter function", self._declared_type()
        )

    def _keyed(self, name: str, func: Any, call: Callable[[Any, Any], Any], role: str, output_type: Any) -> DataStream:
        """An operator that calls ``call(record, ctx)`` with the record's key current."""
        ks = self._key_selector
        return self._then(name, lambda n, u: KeyedProcessOperator(n, u, func, call, ks, role), output_type)

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        """Running sum of field ``position_to_sum`` per key (a tuple's or a Row's index, a
        Row's field name, a dict's key; a record that is a number is summed whole); the
        other fields come from the key's first record. In BATCH mode each key's final
        sum only, as :meth:`reduce`."""
        return self.reduce(_fold_field(position_to_sum, operator.add)).name("Sum")

    def min(self, position_to_min: int | str = 0) -> DataStream:
        """Running minimum of a field per key (see :meth:`sum`), the other fields the first record's."""
        return self.reduce(_fold_field(position_to_min, min)).name("Min")

    def max(self, position_to_max: int | str = 0) -> DataStream:
        """Running maximum of a field per key (see :meth:`sum`), the other fields the first record's."""
        return self.reduce(_fold_field(position_to_max, max)).name("Max")

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        """Per key, the record with the smallest field so far (the first of equal ones)."""
        return self.reduce(_pick_by(position_to_min_by, operator.lt)).name("MinBy")

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        """Per key, the record with the largest field so far (the first of equal ones)."""
        return self.reduce(_pick_by(position_to_max_by, operator.gt)).name("MaxBy")

    def execute_and_collect(
        self,
        job_execution_name: str | None = None,
        limit: int | None = None,
        executor: str | None = None,
    ) -> "CloseableIterator | list[Any]":
        """As :meth:`DataStream.execute_and_collect`, each record with its key, as
        PyFlink hands a keyed stream's records out: ``Row(f0=key, f1=record)``."""
        key_of = self._key_selector
        with_keys = DataStream(self._env, self._inputs, None).map(lambda record: Row(f0=key_of(record), f1=record))
        return with_keys.execute_and_collect(job_execution_name, limit, executor)

    def interval_join(self, other: "KeyedStream") -> "IntervalJoin":
        """Flink's interval join with another keyed stream: ``between(lower_ms, upper_ms)``,
        then ``process(ProcessJoinFunction)`` (see :mod:`weir.runtime.joins`)."""
        if not isinstance(other, KeyedStream):
            raise InvalidJobGraphError("interval_join() joins two keyed streams: key_by() the other stream first")
        return IntervalJoin(self, other)

    def _repartition(self, *args: Any) -> DataStream:
        raise InvalidJobGraphError(
            "a keyed stream's records go to the subtask of their key: rebalance(), broadcast(), forward(), shuffle(), "
            "rescale() and partition_custom() apply to a stream before key_by(), as in PyFlink"
        )

    rebalance = broadcast = forward = shuffle = rescale = partition_custom = _repartition  # type: ignore[assignment]

    def window(self, assigner: WindowAssigner) -> "WindowedStream":
        """Group each key's records into windows (tumbling, sliding, session; event
        or processing time)."""
        if not isinstance(assigner, WindowAssigner):
            raise InvalidConfigurationError(
                "window assigner", assigner, "use e.g. TumblingEventTimeWindows.of(Time.minutes(1))"
            )
        return WindowedStream(self, assigner)

    def count_window(self, size: int, slide: int | None = None) -> "WindowedStream":
        """Per key, windows of ``size`` records (tumbling: each fires once it is full,
        then empties); with ``slide``, a window of the key's last ``size`` records
        every ``slide`` records. A window not yet full at the end does not fire."""
        windowed = self.window(GlobalWindows.create())
        windowed._count(size, slide)
        return windowed

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`KeyedProcessFunction` (or a callable ``(value, ctx) -> iterable``)."""
        call = as_callable(func, "process_element", "process()")
        return self._keyed("KeyedProcess", func, call, "process function", output_type)


def _field(record: Any, position: int | str) -> Any:
    """Field ``position`` of a tuple, list, Row or dict; a scalar record is its own field."""
    if isinstance(record, (tuple, list)):
        return record[_index(record, position)]
    return record[position] if isinstance(record, (Row, dict)) else record


def _index(record: tuple[Any, ...] | list[Any], position: int | str) -> int:
    if not isinstance(position, int):
        raise TypeError(f"field {position!r} of a {type(record).__name__} record {record!r}: give the field's index")
    return position


def _with_field(record: Any, position: int | str, value: Any) -> Any:
    """``record`` with field ``position`` set to ``value`` (a copy: records are never changed in place)."""
    if isinstance(record, Row):
        values, names = list(record), record._fields or []
        if not isinstance(position, int) and position not in names:
            raise TypeError(f"field {position!r} of Row {record!r}: its fields are {names}")
        values[position if isinstance(position, int) else names.index(position)] = value
        return _make_row(record._fields, values, record.get_row_kind())
    if isinstance(record, (tuple, list)):
        i = _index(record, position)
        changed = [*record[:i], value, *record[i + 1 :]]
        return tuple(changed) if isinstance(record, tuple) else changed
    if isinstance(record, dict):
        return {**record, position: value}
    return value


def _fold_field(position: int | str, combine: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def fold(a: Any, b: Any) -> Any:
        return _with_field(a, position, combine(_field(a, position), _field(b, position)))

    return fold


def _pick_by(position: int | str, better: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def pick(a: Any, b: Any) -> Any:
        return b if better(_field(b, position), _field(a, position)) else a

    return pick


def _tag(spec: PartitionSpec | None) -> str | None:
    return None if spec is None else spec.side_output


def _all_records(record: Any) -> int:
    """The key of ``window_all``: one for every record."""
    return 0


def _input(spec: PartitionSpec | None, index: int) -> PartitionSpec:
    return replace(spec or PartitionSpec(""), input_index=index)


def _methods(func: Any, names: tuple[str, str], role: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The two methods of a two-input function, or a clear error."""
    found = [getattr(func, name, None) for name in names]
    if not all(callable(m) for m in found):
        raise TypeError(f"{role} takes an object with {names[0]}() and {names[1]}() methods, got {type(func).__name__}")
    return found[0], found[1]  # type: ignore[return-value]


class CoGroupedStreams:
    """``first.co_group(second)`` (or ``first.join(second)``): name each side's key
    with ``where`` and ``equal_to``, the windows with ``window``, then ``apply``."""

    def __init__(self, first: DataStream, second: DataStream, joins: bool = False) -> None:
        self._first, self._second, self._joins = first, second, joins
        self._keys: list[Callable[[Any], Any]] = []
        self._assigner: WindowAssigner | None = None
        self._trigger: Trigger | None = None
        self._lateness_ms = 0

    def where(self, key_selector: Callable[[Any], Any] | Any) -> "CoGroupedStreams":
        self._keys = [as_callable(key_selector, "get_key", "where() key selector")]
        return self

    def equal_to(self, key_selector: Callable[[Any], Any] | Any) -> "CoGroupedStreams":
        if len(self._keys) != 1:
            raise InvalidConfigurationError("equal_to()", key_selector, "comes once, after where(key_selector)")
        self._keys.append(as_callable(key_selector, "get_key", "equal_to() key selector"))
        return self

    def window(self, assigner: WindowAssigner) -> "CoGroupedStreams":
        if len(self._keys) != 2:
            raise InvalidConfigurationError(
                "window()", assigner, "comes after where(key_selector).equal_to(key_selector)"
            )
        self._assigner = assigner
        return self

    def trigger(self, trigger: Trigger) -> "CoGroupedStreams":
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness_ms: int) -> "CoGroupedStreams":
        self._lateness_ms = lateness_ms
        return self

    def apply(self, function: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A join's :class:`JoinFunction` or :class:`FlatJoinFunction` (or a callable
        ``(first, second)``), a co-group's :class:`CoGroupFunction` (or a callable
        ``(first_list, second_list)``), on each key's records of each window."""
        if self._assigner is None:
            raise InvalidConfigurationError(
                "apply()", function, "comes after where(...).equal_to(...).window(assigner)"
            )
        co_group = pairing(function) if self._joins else as_callable(function, "co_group", "co_group() apply")
        key_first, key_second = self._keys
        tagged = self._first.map(lambda r: (0, r)).union(self._second.map(lambda r: (1, r)))
        windowed = tagged.key_by(lambda t: key_second(t[1]) if t[0] else key_first(t[1])).window(self._assigner)
        if self._trigger is not None:
            windowed.trigger(self._trigger)
        windowed.allowed_lateness(self._lateness_ms)
        return windowed.process(SidesOfAWindow(function, co_group), output_type).name(
            "Join" if self._joins else "CoGroup"
        )


class IntervalJoin:
    """``left.interval_join(right)`` of two keyed streams: ``between(lower_ms, upper_ms)``
    joins a left record at ``t`` with the right records of its key at ``t + lower``
    to ``t + upper`` (both included unless ``lower_bound_exclusive()`` /
    ``upper_bound_exclusive()``), by event time, as Flink's. Then ``process``."""

    def __init__(self, left: KeyedStream, right: KeyedStream) -> None:
        self._left, self._right = left, right
        self._bounds: tuple[int, int] | None = None
        self._exclusive = [False, False]

    def between(self, lower_bound_ms: int, upper_bound_ms: int) -> "IntervalJoin":
        if not all(isinstance(b, int) for b in (lower_bound_ms, upper_bound_ms)) or lower_bound_ms > upper_bound_ms:
            raise InvalidConfigurationError(
                "interval join bounds",
                (lower_bound_ms, upper_bound_ms),
                "give whole milliseconds, the lower bound not above the upper",
            )
        self._bounds = (lower_bound_ms, upper_bound_ms)
        return self

    def lower_bound_exclusive(self) -> "IntervalJoin":
        self._exclusive[0] = True
        return self

    def upper_bound_exclusive(self) -> "IntervalJoin":
        self._exclusive[1] = True
        return self

    def process(self, process_join_function: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`ProcessJoinFunction` (or a callable ``(left, right, ctx)``) on each joined pair."""
        if self._bounds is None:
            raise InvalidConfigurationError(
                "interval join process()", process_join_function, "comes after between(lower_ms, upper_ms)"
            )
        lower = self._bounds[0] + self._exclusive[0]
        upper = self._bounds[1] - self._exclusive[1]
        joined = IntervalJoinFunction(process_join_function, lower, upper)
        return self._left.connect(self._right).process(joined, output_type).name("IntervalJoin")


class AsyncDataStream:
    """PyFlink's async I/O (see :mod:`weir.runtime.async_io`): an :class:`AsyncFunction`
    on each record, many at once. ``timeout`` is in milliseconds (``Time.seconds(5)``),
    ``capacity`` the most calls in flight; the ``_with_retry`` forms take an
    :class:`AsyncRetryStrategy`."""

    @staticmethod
    def unordered_wait(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> DataStream:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, AsyncRetryStrategy.no_restart(), capacity, output_type, False
        )

    @staticmethod
    def ordered_wait(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> DataStream:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, AsyncRetryStrategy.no_restart(), capacity, output_type, True
        )

    @staticmethod
    def unordered_wait_with_retry(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        async_retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> DataStream:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, False
        )

    @staticmethod
    def ordered_wait_with_retry(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        async_retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        output_type: TypeInformation | None = None,
    ) -> DataStream:
        return AsyncDataStream._wait(
            data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, True
        )

    @staticmethod
    def _wait(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: int,
        retry: AsyncRetryStrategy,
        capacity: int,
        output_type: TypeInformation | None,
        ordered: bool,
    ) -> DataStream:
        checked(async_function, timeout, capacity, retry)
        return data_stream._then(
            "AsyncWait",
            lambda n, u: AsyncWaitOperator(n, u, async_function, timeout, capacity, retry, ordered),
            output_type,
        )


class ConnectedStreams:
    """``stream1.connect(stream2)``: two streams, of any two types, into one
    operator that has a method per input (``map1``/``map2``,
    ``process_element1``/``process_element2``, ...). Checkpoint barriers align
    across both inputs and the operator's watermark is the smaller of theirs.
    Keyed (``key_by(selector1, selector2)``, or two keyed streams), records of
    both inputs with equal keys meet in one subtask and share its keyed state."""

    def __init__(self, stream1: DataStream, stream2: DataStream) -> None:
        self.stream1 = stream1
        self.stream2 = stream2

    def key_by(
        self,
        key_selector1: Callable[[Any], Any] | Any,
        key_selector2: Callable[[Any], Any] | Any,
        key_type: TypeInformation | None = None,
    ) -> "ConnectedStreams":
        """Key each input with its own selector (``key_type``: as :meth:`DataStream.key_by`'s)."""
        return ConnectedStreams(
            self.stream1.key_by(key_selector1, key_type), self.stream2.key_by(key_selector2, key_type)
        )

    def map(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`CoMapFunction`: ``map1(value)`` / ``map2(value)`` each give one record."""
        m1, m2 = _methods(func, ("map1", "map2"), "ConnectedStreams.map()")
        calls: Calls = (("map1", lambda v, ctx: (m1(v),)), ("map2", lambda v, ctx: (m2(v),)))
        return self._apply("CoMap", func, calls, output_type)

    def flat_map(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`CoFlatMapFunction`: ``flat_map1`` / ``flat_map2`` each give an iterable (or None)."""
        f1, f2 = _methods(func, ("flat_map1", "flat_map2"), "ConnectedStreams.flat_map()")
        calls: Calls = (("flat_map1", lambda v, ctx: f1(v)), ("flat_map2", lambda v, ctx: f2(v)))
        return self._apply("CoFlatMap", func, calls, output_type)

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`CoProcessFunction`, or on keyed inputs a
        :class:`KeyedCoProcessFunction` (keyed state, timers, ``on_timer``)."""
        if isinstance(func, KeyedCoProcessFunction) and self._key_selectors() is None:
            raise InvalidJobGraphError(
                f"{type(func).__name__} is a KeyedCoProcessFunction: key both inputs first, connected.key_by(selector1, selector2)"
            )
        p1, p2 = _methods(func, ("process_element1", "process_element2"), "ConnectedStreams.process()")
        name = "CoProcess" if self._key_selectors() is None else "KeyedCoProcess"
        return self._apply(name, func, (("process_element1", p1), ("process_element2", p2)), output_type)

    def _key_selectors(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
        s1, s2 = self.stream1, self.stream2
        if isinstance(s1, KeyedStream) != isinstance(s2, KeyedStream):
            raise InvalidJobGraphError(
                "connect(): one input is keyed and the other is not; key both (connected.key_by(selector1, selector2)) or neither"
            )
        return (
            (s1._key_selector, s2._key_selector)
            if isinstance(s1, KeyedStream) and isinstance(s2, KeyedStream)
            else None
        )

    def _apply(self, name: str, func: Any, calls: Calls, output_type: Any) -> DataStream:
        keys = self._key_selectors()
        if keys is None:
            return self.stream1._two_inputs(
                self.stream2, name, lambda n, u: CoProcessOperator(n, u, func, calls), output_type
            )
        return self.stream1._two_inputs(
            self.stream2, name, lambda n, u: KeyedCoProcessOperator(n, u, func, calls, keys), output_type
        )


class BroadcastStream:
    """``stream.broadcast(descriptor, ...)``: a stream every subtask of the
    operator it is connected to sees whole, and the broadcast states that
    operator keeps. Only ``connect`` takes it."""

    def __init__(self, stream: DataStream, descriptors: tuple[MapStateDescriptor[Any, Any], ...]) -> None:
        self._stream = stream
        self.broadcast_state_descriptors = descriptors


class BroadcastConnectedStream:
    """``stream.connect(broadcast_stream)``: ``process`` a
    :class:`BroadcastProcessFunction`, or on a keyed stream a
    :class:`KeyedBroadcastProcessFunction`. The broadcast state is checkpointed;
    on restore and rescale each subtask takes one subtask's copy."""

    def __init__(self, stream: DataStream, broadcast_stream: BroadcastStream) -> None:
        self.non_broadcast_stream = stream
        self.broadcast_stream = broadcast_stream

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        stream, descriptors = self.non_broadcast_stream, self.broadcast_stream.broadcast_state_descriptors
        keyed = isinstance(stream, KeyedStream)
        wanted = KeyedBroadcastProcessFunction if keyed else BroadcastProcessFunction
        other = BroadcastProcessFunction if keyed else KeyedBroadcastProcessFunction
        if isinstance(func, other):
            raise InvalidJobGraphError(
                f"{type(func).__name__} is a {other.__name__}, but the stream connected to the broadcast stream is "
                f"{'keyed' if keyed else 'not keyed'}: use a {wanted.__name__}"
            )
        p, b = _methods(func, ("process_element", "process_broadcast_element"), "BroadcastConnectedStream.process()")
        calls: Calls = (("process_element", p), ("process_broadcast_element", b))
        if isinstance(stream, KeyedStream):
            ks = stream._key_selector
            return stream._two_inputs(
                self.broadcast_stream._stream,
                "KeyedBroadcastProcess",
                lambda n, u: KeyedCoProcessOperator(n, u, func, calls, (ks, None), descriptors),
                output_type,
            )
        return stream._two_inputs(
            self.broadcast_stream._stream,
            "BroadcastProcess",
            lambda n, u: CoProcessOperator(n, u, func, calls, descriptors),
            output_type,
        )


class WindowedStream:
    """``keyed.window(assigner)``, then optionally ``trigger``, ``allowed_lateness``
    and ``side_output_late_data``, then one of ``reduce``, ``aggregate``, ``process``."""

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner) -> None:
        self._keyed = keyed
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = 0
        self._late: OutputTag | None = None
        self._keep_last: int | None = None  # sliding count windows: evict all but the last n when firing

    def _count(self, size: int, slide: int | None) -> None:
        size = _whole("count window size", size)
        if slide is None:
            self._trigger = PurgingTrigger.of(CountTrigger.of(size))
        else:
            self._trigger = CountTrigger.of(_whole("count window slide", slide))
            self._keep_last = size

    def trigger(self, trigger: Trigger) -> "WindowedStream":
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness_ms: int) -> "WindowedStream":
        """Keep windows this long after their end: late records update and re-fire them."""
        self._lateness = _whole("allowed lateness", lateness_ms, allow_zero=True)
        return self

    def side_output_late_data(self, tag: OutputTag) -> "WindowedStream":
        """Records too late for every window go to ``result.get_side_output(tag)``."""
        if not isinstance(tag, OutputTag):
            raise InvalidConfigurationError("late data tag", tag, "use OutputTag('name')")
        self._late = tag
        return self

    _takes_key = True  # its window functions take the key

    def _apply(
        self,
        name: str,
        contents: _Contents,
        output_type: Any,
        window_function: Any = None,
        where: str = "process()",
    ) -> DataStream:
        ks, assigner, trigger, lateness, late = (
            self._keyed._key_selector,
            self._assigner,
            self._trigger,
            self._lateness,
            self._late,
        )
        if (
            assigner.merging
            and isinstance(contents, AggregateContents)
            and type(contents.fn).merge is AggregateFunction.merge
        ):
            raise InvalidConfigurationError(
                "aggregate function", contents.fn, "session windows merge: implement merge()"
            )
        call = WindowCall(window_function, self._takes_key, where)
        if self._keep_last is None and aligned(assigner, trigger, lateness, contents):
            return self._keyed._then(
                name, lambda n, u: AlignedWindowOperator(n, u, contents, call, ks, assigner, late), output_type
            )
        if self._keep_last is not None:
            contents = LastElements(contents, self._keep_last)
        return self._keyed._then(
            name, lambda n, u: WindowOperator(n, u, contents, call, ks, assigner, trigger, lateness, late), output_type
        )

    def reduce(
        self,
        reduce_function: Callable[[Any, Any], Any] | Any,
        window_function: Any = None,
        output_type: TypeInformation | None = None,
    ) -> DataStream:
        """Emits the reduced value of each window when it fires; with a
        ``window_function`` (a :class:`WindowFunction` or :class:`ProcessWindowFunction`)
        that value goes through it, with the key and the window. Each window keeps
        one value, reduced as records come. ``output_type``: as :meth:`DataStream.map`'s;
        without it and without a window function, the reduced stream's type, as in PyFlink."""
        contents = ReduceContents(as_callable(reduce_function, "reduce", "reduce()"))
        if output_type is None and window_function is None:
            output_type = self._keyed._declared_type()
        return self._apply("Window(Reduce)", contents, output_type, window_function, "reduce() window_function")

    def aggregate(
        self,
        aggregate_function: AggregateFunction[Any, Any, Any],
        window_function: Any = None,
        accumulator_type: TypeInformation | None = None,
        output_type: TypeInformation | None = None,
    ) -> DataStream:
        """Emits ``get_result`` of each window's accumulator when it fires; with a
        ``window_function`` that result goes through it, as for :meth:`reduce`. Each
        window keeps one accumulator (``accumulator_type`` is checked to be a type
        and not used: the accumulator stays the Python object ``add`` returns)."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise TypeError(f"aggregate() takes an AggregateFunction, got {type(aggregate_function).__name__}")
        type_arg(accumulator_type, "aggregate() accumulator_type")
        contents = AggregateContents(aggregate_function)
        return self._apply("Window(Aggregate)", contents, output_type, window_function, "aggregate() window_function")

    def process(self, process_window_function: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`ProcessWindowFunction` (or a callable taking what its ``process``
        takes) on all records of a window when it fires."""
        return self._apply("Window(Process)", AllRecords(), output_type, process_window_function)

    def apply(self, window_function: Any, output_type: TypeInformation | None = None) -> DataStream:
        """A :class:`WindowFunction`'s ``apply(key, window, inputs)`` on all records of a window when it fires."""
        if not callable(getattr(window_function, "apply", None)):
            raise TypeError(f"apply() takes a WindowFunction, got {type(window_function).__name__}")
        return self._apply("Window(Apply)", AllRecords(), output_type, window_function)


class AllWindowedStream(WindowedStream):
    """``stream.window_all(assigner)`` or ``count_window_all(n)``: as a
    :class:`WindowedStream` over the whole stream, run by one subtask; its
    window functions take no key: :class:`ProcessAllWindowFunction`
    (``process(context, elements)``) and :class:`AllWindowFunction` (``apply(window, inputs)``)."""

    _takes_key = False

    def _apply(
        self,
        name: str,
        contents: _Contents,
        output_type: Any,
        window_function: Any = None,
        where: str = "process()",
    ) -> DataStream:
        result = super()._apply(name.replace("Window", "AllWindow", 1), contents, output_type, window_function, where)
        return result.set_parallelism(1).set_max_parallelism(1)

"""The user API: PyFlink's DataStream names in idiomatic Python.

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(0, 99).map(lambda i: (i % 10, i)).key_by(lambda kv: kv[0]) \\
       .reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink)
    env.execute("job")
"""

from __future__ import annotations

import copy
import itertools
import os
from typing import Any, Callable, Iterable, Sequence

from runtime.config import CheckpointConfig, CheckpointingMode, ExecutionConfig, RestartStrategy, _positive, _whole
from runtime.errors import InvalidConfigurationError, InvalidJobGraphError
from runtime.eventtime import WatermarkStrategy
from runtime.executor import JobClient, JobExecutionResult, find_executor
from runtime.functions import as_callable
from runtime.graph import JobGraph, PartitionSpec, Transformation, build_job_graph
from runtime.operators import (
    FilterOperator,
    FlatMapOperator,
    KeyedProcessOperator,
    KeyedReduceOperator,
    MapOperator,
    ProcessOperator,
    StreamOperator,
)
from runtime.sinks import PrintSink, Sink, SinkOperator
from runtime.sources import CollectionSource, GeneratorSource, SequenceSource, Source, SourceCoordinator, SourceOperator
from runtime.windows import (
    AggregateContents,
    AggregateFunction,
    OutputTag,
    ProcessContents,
    ProcessWindowFunction,
    ReduceContents,
    Trigger,
    WindowAssigner,
    WindowOperator,
    _Contents,
)


class StreamExecutionEnvironment:
    """Builds a job and runs it. Not thread-safe; one per job script or notebook cell."""

    def __init__(self) -> None:
        self.config = ExecutionConfig()
        self.checkpoint_config = CheckpointConfig()
        # Defaults `weir run` sets for the script it runs (--parallelism, --from-savepoint).
        if os.environ.get("WEIR_DEFAULT_PARALLELISM"):
            self.set_parallelism(int(os.environ["WEIR_DEFAULT_PARALLELISM"]))
        if os.environ.get("WEIR_RESTORE_FROM"):
            self.restore_from_savepoint(os.environ["WEIR_RESTORE_FROM"], bool(os.environ.get("WEIR_ALLOW_NON_RESTORED_STATE")))
        self._ids = itertools.count(1)
        self._sinks: list[Transformation] = []
        self._sink_locations: dict[str, str] = {}  # a sink's exclusive location -> its operator's name

    @staticmethod
    def get_execution_environment() -> "StreamExecutionEnvironment":
        return StreamExecutionEnvironment()

    # ---------------------------------------------------------------- settings
    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        self.config.parallelism = _whole("parallelism", parallelism)
        return self

    def get_parallelism(self) -> int:
        return self.config.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        self.config.max_parallelism = _whole("max_parallelism", max_parallelism)
        return self

    def enable_checkpointing(self, interval_ms: int, mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE) -> "StreamExecutionEnvironment":
        self.checkpoint_config.set_checkpoint_interval(interval_ms)
        self.checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self.checkpoint_config

    def set_restart_strategy(self, strategy: RestartStrategy) -> "StreamExecutionEnvironment":
        if not isinstance(strategy, RestartStrategy):
            raise InvalidConfigurationError("restart strategy", strategy, "use RestartStrategy.fixed_delay(...), exponential_delay(...) or no_restart()")
        self.config.restart_strategy = strategy
        return self

    def restore_from_savepoint(self, path: str, allow_non_restored_state: bool = False) -> "StreamExecutionEnvironment":
        """Start the job from a savepoint (or a retained checkpoint's ``chk-N``
        folder). Operators are matched by uid; parallelism may differ. State of a
        uid this job lacks is an error unless ``allow_non_restored_state``."""
        from runtime.config import validate_storage_uri

        self.config.restore_from = validate_storage_uri(path, "savepoint path")
        self.config.allow_non_restored_state = bool(allow_non_restored_state)
        return self

    def set_auto_watermark_interval(self, interval_ms: int) -> "StreamExecutionEnvironment":
        """How often sources emit watermarks (default 200 ms)."""
        self.config.watermark_interval_ms = _whole("auto watermark interval_ms", interval_ms)
        return self

    def set_buffer_timeout(self, timeout_ms: int) -> "StreamExecutionEnvironment":
        self.config.transport.buffer_timeout_ms = _whole("buffer_timeout_ms", timeout_ms, allow_zero=True)
        return self

    def set_batch_size(self, records: int) -> "StreamExecutionEnvironment":
        self.config.transport.batch_size = _whole("batch_size", records)
        return self

    def set_task_cpus(self, cpus: float) -> "StreamExecutionEnvironment":
        """Ray CPUs each task actor asks for; fractions let more tasks than cores run."""
        _positive("task_cpus", cpus)
        self.config.task_cpus = float(cpus)
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
    def from_source(self, source: Source[Any], watermark_strategy: WatermarkStrategy | None = None, source_name: str = "source") -> "DataStream":
        """Records of ``source``; with a :class:`WatermarkStrategy` they carry event
        time and the source emits watermarks (per split, idle splits excluded)."""
        if not isinstance(source, Source):
            raise TypeError(f"from_source() takes a runtime.sources.Source, got {type(source).__name__}")
        if watermark_strategy is not None:
            if not isinstance(watermark_strategy, WatermarkStrategy):
                raise InvalidConfigurationError("watermark strategy", watermark_strategy, "use WatermarkStrategy.for_...()")
            if watermark_strategy.generator_factory is not None and watermark_strategy.timestamp_assigner is None:
                raise InvalidConfigurationError(
                    "watermark strategy", watermark_strategy, f"source '{source_name}' needs .with_timestamp_assigner(...)")
        config = self.config
        t = self._add(
            f"Source: {source_name}",
            lambda n, u: SourceOperator(n, u, source, watermark_strategy, config.watermark_interval_ms),
            [],
        )
        t.is_source = True
        t.make_coordinator = lambda: SourceCoordinator(source)
        return DataStream(self, [(t, None)], t)

    def from_collection(self, collection: Sequence[Any] | Iterable[Any], watermark_strategy: WatermarkStrategy | None = None) -> "DataStream":
        return self.from_source(CollectionSource(list(collection)), watermark_strategy, "collection")

    def from_sequence(self, start: int, end: int) -> "DataStream":
        """The integers from ``start`` to ``end``, both included."""
        return self.from_source(SequenceSource(start, end), source_name="sequence")

    def from_generator(
        self, generator: Callable[[int], Any], count: int | None = None, records_per_second: float | None = None,
        watermark_strategy: WatermarkStrategy | None = None,
    ) -> "DataStream":
        """``generator(i)`` for ``i = 0, 1, ...``; ``count=None`` runs forever (stop or
        cancel the job); ``records_per_second`` limits the rate over all subtasks."""
        return self.from_source(GeneratorSource(generator, count, records_per_second), watermark_strategy, "generator")

    def from_spark(self, df: Any, watermark_strategy: WatermarkStrategy | None = None, arrow_batches: bool = False) -> "DataStream":
        """The rows of a Spark DataFrame, as dicts keyed by column name (or, with
        ``arrow_batches``, as ``pyarrow.RecordBatch`` es). The DataFrame goes to Ray
        through raydp, so its session must be raydp's: ``connectors.spark.spark_session()``."""
        from connectors.spark import ArrowBlockSource  # Ray and Spark only when asked for

        return self.from_source(ArrowBlockSource.from_spark(df, arrow_batches), watermark_strategy, "spark")

    def from_ray_dataset(self, dataset: Any, watermark_strategy: WatermarkStrategy | None = None, arrow_batches: bool = False) -> "DataStream":
        """The rows of a Ray Dataset, as :meth:`from_spark` gives them."""
        from connectors.spark import ArrowBlockSource

        return self.from_source(ArrowBlockSource.from_ray_dataset(dataset, arrow_batches), watermark_strategy, "ray dataset")

    # ---------------------------------------------------------------- running
    def get_job_graph(self, job_name: str = "weir-job") -> JobGraph:
        if not isinstance(job_name, str) or not job_name or "/" in job_name:
            raise InvalidConfigurationError("job name", job_name, "must be a non-empty string without '/'")
        return build_job_graph(job_name, list(self._sinks), copy.deepcopy(self.config), copy.deepcopy(self.checkpoint_config))

    def execute_async(self, job_name: str = "weir-job", executor: str | None = None) -> JobClient:
        """Submit the job and return at once with a :class:`JobClient`."""
        return find_executor(executor).submit(self.get_job_graph(job_name))

    def execute(self, job_name: str = "weir-job", executor: str | None = None) -> JobExecutionResult:
        """Run the job to its end; raise :class:`JobExecutionError` if it fails for good."""
        return self.execute_async(job_name, executor).wait()

    # ---------------------------------------------------------------- internals
    def _add(self, name: str, make: Callable[[str, str], StreamOperator], inputs: list[tuple[Transformation, PartitionSpec | None]]) -> Transformation:
        return Transformation(next(self._ids), name, make, inputs)


class DataStream:
    def __init__(self, env: StreamExecutionEnvironment, inputs: list[tuple[Transformation, PartitionSpec | None]], transformation: Transformation | None) -> None:
        self._env = env
        self._inputs = inputs
        self._t = transformation

    # ------------------------------------------------------------ operator settings
    def _own(self, what: str) -> Transformation:
        if self._t is None:
            raise InvalidJobGraphError(f"{what} applies to an operator; call it right after map/filter/reduce/..., not after key_by/union/rebalance")
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
        self, num_cpus: float | None = None, num_gpus: float | None = None, memory: int | None = None,
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

    # ------------------------------------------------------------ transformations
    def _then(self, name: str, make: Callable[[str, str], StreamOperator]) -> "DataStream":
        t = self._env._add(name, make, list(self._inputs))
        return DataStream(self._env, [(t, None)], t)

    def map(self, func: Callable[[Any], Any] | Any) -> "DataStream":
        call = as_callable(func, "map", "map()")
        return self._then("Map", lambda n, u: MapOperator(n, u, func, call))

    def flat_map(self, func: Callable[[Any], Iterable[Any]] | Any) -> "DataStream":
        call = as_callable(func, "flat_map", "flat_map()")
        return self._then("FlatMap", lambda n, u: FlatMapOperator(n, u, func, call))

    def filter(self, func: Callable[[Any], bool] | Any) -> "DataStream":
        call = as_callable(func, "filter", "filter()")
        return self._then("Filter", lambda n, u: FilterOperator(n, u, func, call))

    def process(self, func: Any) -> "DataStream":
        call = as_callable(func, "process_element", "process()")
        return self._then("Process", lambda n, u: ProcessOperator(n, u, func, call))

    def transform(self, name: str, make_operator: Callable[[str, str], StreamOperator]) -> "DataStream":
        """A custom :class:`StreamOperator`: ``make_operator(name, uid)`` builds one per
        subtask, on the task. The operator sees the whole lifecycle, watermarks included."""
        return self._then(name, make_operator)

    def key_by(self, key_selector: Callable[[Any], Any] | Any) -> "KeyedStream":
        ks = as_callable(key_selector, "get_key", "key_by()")
        return KeyedStream(self._env, [(t, PartitionSpec("hash", ks, _tag(s))) for t, s in self._inputs], ks)

    def union(self, *streams: "DataStream") -> "DataStream":
        inputs = list(self._inputs)
        for s in streams:
            inputs += s._inputs
        return DataStream(self._env, inputs, None)

    def _partition(self, kind: str) -> "DataStream":
        return DataStream(self._env, [(t, PartitionSpec(kind, None, _tag(s))) for t, s in self._inputs], None)

    def rebalance(self) -> "DataStream":
        return self._partition("rebalance")

    def broadcast(self) -> "DataStream":
        return self._partition("broadcast")

    def forward(self) -> "DataStream":
        return self._partition("forward")

    def get_side_output(self, tag: OutputTag) -> "DataStream":
        """The records this operator sent to side output ``tag`` (e.g. late data)."""
        t = self._own("get_side_output()")
        return DataStream(self._env, [(t, PartitionSpec("", None, tag.name))], None)

    # ------------------------------------------------------------ sinks
    def sink_to(self, sink: Sink) -> "DataStream":
        if not isinstance(sink, Sink):
            raise TypeError(f"sink_to() takes a runtime.sinks.Sink, got {type(sink).__name__}")
        where = sink.exclusive_location()
        other = self._env._sink_locations.get(where) if where is not None else None
        if where is not None and other is not None:
            raise InvalidJobGraphError(
                f"two sinks of this job write to {where.split(':', 1)[1]} ({other} and another {type(sink).__name__}): "
                "their files would collide; give each sink a folder of its own"
            )
        s = self._then(f"Sink: {type(sink).__name__}", lambda n, u: SinkOperator(n, u, sink))
        assert s._t is not None
        self._env._sinks.append(s._t)
        if where is not None:
            self._env._sink_locations[where] = s._t.name
        return s

    def print(self) -> "DataStream":
        return self.sink_to(PrintSink())

    def execute_and_collect_to_spark(self, job_name: str = "collect", spark: Any = None, path: str | None = None) -> Any:
        """Run this bounded job to its end and return its records as a Spark
        DataFrame (raydp's session unless ``spark`` is given). They are written
        exactly once into a Parquet table at ``path`` (default: under the
        checkpoint storage), which the DataFrame reads."""
        from connectors.spark import collect_to_spark

        return collect_to_spark(self, job_name, spark, path)

    def execute_and_collect_to_ray_dataset(self, job_name: str = "collect", path: str | None = None) -> Any:
        """As :meth:`execute_and_collect_to_spark`, returning a Ray Dataset."""
        from connectors.spark import collect_to_ray_dataset

        return collect_to_ray_dataset(self, job_name, path)


class KeyedStream(DataStream):
    def __init__(self, env: StreamExecutionEnvironment, inputs: list[tuple[Transformation, PartitionSpec | None]], key_selector: Callable[[Any], Any]) -> None:
        super().__init__(env, inputs, None)
        self._key_selector = key_selector

    def reduce(self, func: Callable[[Any, Any], Any] | Any) -> DataStream:
        """A running reduce per key: emits the new aggregate for every record."""
        call = as_callable(func, "reduce", "reduce()")
        ks = self._key_selector
        return self._then("Reduce", lambda n, u: KeyedReduceOperator(n, u, func, call, ks))

    def sum(self, position: int | str = 0) -> DataStream:
        """Running sum of field ``position`` (tuple index or dict key) per key; the
        other fields come from the key's first record."""
        def add(a: Any, b: Any) -> Any:
            if isinstance(a, tuple):
                if not isinstance(position, int):
                    raise TypeError(f"sum({position!r}) on tuple records needs a field index")
                return a[:position] + (a[position] + b[position],) + a[position + 1 :]
            if isinstance(a, dict):
                return {**a, position: a[position] + b[position]}
            return a + b
        return self.reduce(add).name("Sum")

    def window(self, assigner: WindowAssigner) -> "WindowedStream":
        """Group each key's records into windows (tumbling, sliding, session; event
        or processing time)."""
        if not isinstance(assigner, WindowAssigner):
            raise InvalidConfigurationError("window assigner", assigner, "use e.g. TumblingEventTimeWindows.of(Time.minutes(1))")
        return WindowedStream(self, assigner)

    def process(self, func: Any) -> DataStream:
        """A :class:`KeyedProcessFunction` (or a callable ``(value, ctx) -> iterable``)."""
        call = as_callable(func, "process_element", "process()")
        ks = self._key_selector
        return self._then("KeyedProcess", lambda n, u: KeyedProcessOperator(n, u, func, call, ks))


def _tag(spec: PartitionSpec | None) -> str | None:
    return None if spec is None else spec.side_output


class WindowedStream:
    """``keyed.window(assigner)``, then optionally ``trigger``, ``allowed_lateness``
    and ``side_output_late_data``, then one of ``reduce``, ``aggregate``, ``process``."""

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner) -> None:
        self._keyed = keyed
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = 0
        self._late: OutputTag | None = None

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

    def _apply(self, name: str, contents: _Contents) -> DataStream:
        ks, assigner, trigger, lateness, late = self._keyed._key_selector, self._assigner, self._trigger, self._lateness, self._late
        if assigner.merging and isinstance(contents, AggregateContents) and type(contents.agg).merge is AggregateFunction.merge:
            raise InvalidConfigurationError("aggregate function", contents.agg, "session windows merge: implement merge()")
        return self._keyed._then(name, lambda n, u: WindowOperator(n, u, contents, ks, assigner, trigger, lateness, late))

    def reduce(self, func: Callable[[Any, Any], Any] | Any) -> DataStream:
        """Emits the reduced value of each window when it fires."""
        return self._apply("Window(Reduce)", ReduceContents(as_callable(func, "reduce", "reduce()")))

    def aggregate(self, func: AggregateFunction[Any, Any, Any]) -> DataStream:
        """Emits ``get_result`` of each window's accumulator when it fires."""
        if not isinstance(func, AggregateFunction):
            raise TypeError(f"aggregate() takes an AggregateFunction, got {type(func).__name__}")
        return self._apply("Window(Aggregate)", AggregateContents(func))

    def process(self, func: ProcessWindowFunction[Any, Any] | Callable[..., Any]) -> DataStream:
        """``process(key, context, elements)`` on all records of a window when it fires."""
        return self._apply("Window(Process)", ProcessContents(func))

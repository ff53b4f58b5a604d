"""Spark DataFrames and Ray Datasets in and out, through raydp on the same Ray cluster.

In: :class:`ArrowBlockSource` reads Arrow blocks. ``from_ray_dataset(env, ds)``
takes a Ray Dataset's blocks from Ray's object store; ``from_spark(env, df)`` has
raydp cache the DataFrame in Spark as Arrow (one block per Spark partition, kept
in the executors' memory and disk) and each reading task fetches its partitions
straight from the raydp executor actor that holds them: no Ray Data pipeline and
no task worker processes between Spark and the stream. A block is a split,
handed out by the enumerator one at a time (a fast reader takes more); its reader
learns its size when it fetches it. A reader remembers (split, row), so a restore
resumes each split at the row after the last one checkpointed, fetching its
block again. Records are dicts keyed by column name, or with
``arrow_batches=True`` whole ``pyarrow.RecordBatch`` es for operators that work
on columns.

Out: :class:`ParquetTableSink` writes a Parquet table with two-phase commit that
``spark.read.parquet`` and ``ray.data.read_parquet`` read (never a partial file),
and ``collect_to_spark(stream, name)`` runs a bounded job into one and returns it
as a Spark DataFrame.

These entry points are functions of this module, not methods of the environment
or the stream: weir.runtime never names a connector (nor Ray, nor Spark).

A Ray Dataset's blocks belong to the driver that made them, and a DataFrame's
Arrow cache lives in the driver's Spark session until the source is garbage
collected: keep the driver running while the job reads them.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray

from weir.actors.cluster import ensure_ray, java_env
from weir.connectors.files import FileSink, committed_files, resolve
from weir.runtime.errors import SparkBridgeError
from weir.runtime.sources import Poll, RateLimit, Source, SourceReader, check_rate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from weir.runtime.datastream import DataStream, StreamExecutionEnvironment
    from weir.runtime.eventtime import WatermarkStrategy


# ---------------------------------------------------------------------- Spark on Ray
def _spark_extra() -> None:
    """pyspark and raydp come with the ``spark`` extra; without them, say so."""
    try:
        import pyspark  # noqa: F401
        import raydp  # noqa: F401
    except ImportError as exc:
        raise SparkBridgeError(
            f"the Spark bridge needs pyspark and raydp, which weir installs only with its spark extra "
            f"({exc.name} is missing): pip install 'weir[spark]'"
        ) from None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise SparkBridgeError(
            "Spark needs a Java runtime (OpenJDK 17 works), and none was found: "
            + (f"JAVA_HOME={home} has no bin/java" if home else "`java` is not on PATH and JAVA_HOME is not set")
            + ". Install one (e.g. apt-get install openjdk-17-jre-headless) and try again."
        )
    return java


def spark_session(
    executors: int = 1,
    cores: int = 1,
    memory: str | int = "1g",
    app_name: str = "weir",
    executor_cpus: float | None = None,
    configs: dict[str, str] | None = None,
) -> "SparkSession":
    """A Spark session whose executors are Ray actors (raydp) on weir's Ray cluster.
    Java 17's module flags are set for every JVM involved. ``executor_cpus`` is the
    Ray CPUs each executor actor takes (default: ``cores``; a fraction leaves room
    for stream tasks on a small machine). Calling it again returns the running
    session."""
    _spark_extra()
    import raydp
    import raydp.context
    from pyspark.sql import SparkSession

    _java()
    ensure_ray()
    if raydp.context._global_spark_context is not None:  # raydp allows one per process
        session = SparkSession.getActiveSession()
        if session is not None:
            return session
    opts = java_env()["JDK_JAVA_OPTIONS"]
    conf = {
        "spark.driver.extraJavaOptions": opts,
        "spark.executor.extraJavaOptions": opts,
        "spark.ray.raydp_app_master.extraJavaOptions": opts,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if executor_cpus is not None:
        conf["spark.ray.raydp_spark_executor.actor.resource.cpu"] = str(executor_cpus)
    conf.update(configs or {})
    return raydp.init_spark(app_name, executors, cores, memory, configs=conf)


def stop_spark() -> None:
    _spark_extra()
    import raydp

    raydp.stop_spark()


def _require_raydp_session(df: Any) -> None:
    _spark_extra()
    from pyspark.sql import DataFrame

    if not isinstance(df, DataFrame):
        raise TypeError(f"from_spark() takes a pyspark.sql.DataFrame, got {type(df).__name__}")
    import raydp.context

    if raydp.context._global_spark_context is None:
        raise SparkBridgeError(
            "from_spark() needs a Spark session that raydp started on this Ray cluster, and this process has none "
            "(a plain SparkSession cannot hand its data to Ray): start it with weir.connectors.spark.spark_session(...)"
        )


# ---------------------------------------------------------------------- in
@dataclass(frozen=True)
class BlockSplit:
    """Block ``split_id`` from row ``row`` (the next one to read) to its end, which
    its reader learns when it fetches the block."""

    split_id: int
    row: int


@dataclass(frozen=True)
class SparkPartition:
    """One partition of a DataFrame that raydp cached in Spark as Arrow
    (``ObjectStoreWriter.prepareRecoverableRDD``), fetched from the raydp executor
    actor holding it by the task that reads it."""

    executor: str  # the raydp executor actor's name
    namespace: str  # the Ray namespace of the driver's Spark session
    rdd_id: int
    index: int
    schema_json: str
    driver_url: str

    def load(self) -> pa.Table:
        try:
            executor = ray.get_actor(self.executor, namespace=self.namespace)
            ipc = ray.get(
                _java_call(
                    lambda: executor.getRDDPartition.remote(self.rdd_id, self.index, self.schema_json, self.driver_url)
                )
            )
        except (ValueError, ray.exceptions.RayError) as exc:
            raise SparkBridgeError(
                f"partition {self.index} of the DataFrame could not be fetched from Spark executor {self.executor} "
                f"({type(exc).__name__}: {exc}); the driver's Spark session must run while the job reads the DataFrame"
            ) from exc
        return pa.ipc.open_stream(pa.BufferReader(ipc)).read_all().replace_schema_metadata()


def _java_call(call: Any) -> Any:
    """Make a call to a Java actor (raydp's executors are). Ray formats one only in
    a worker set to load code from local; the setting also changes how the worker
    exports the functions it defines, so it holds for this call alone."""
    worker = ray._private.worker.global_worker
    before = worker.load_code_from_local
    worker.set_load_code_from_local(True)
    try:
        return call()
    finally:
        worker.set_load_code_from_local(before)


def _cache_in_spark(df: "DataFrame") -> tuple[list[SparkPartition], Any]:
    """Has raydp cache ``df`` in Spark as Arrow, one block per partition; returns
    the partitions and the call that releases the cache."""
    from pyspark.storagelevel import StorageLevel

    sc = df.sparkSession.sparkContext
    writer = sc._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter  # type: ignore[union-attr]
    info = writer.prepareRecoverableRDD(df._jdf, sc._getJavaStorageLevel(StorageLevel.MEMORY_AND_DISK))
    namespace = ray.get_runtime_context().namespace
    locations = list(info.locations())
    partitions = [
        SparkPartition(
            f"raydp-executor-{locations[i]}", namespace, info.rddId(), i, info.schemaJson(), info.driverAgentUrl()
        )
        for i in range(info.numPartitions())
    ]
    return partitions, lambda: writer.releaseRecoverableRDD(info.rddId())


def _release_quietly(release: Any) -> None:
    try:
        release()
    except Exception:  # noqa: BLE001 - the Spark session may have stopped first, taking the cache with it
        pass


class ArrowBlockSource(Source[Any]):
    """The rows of Arrow tables: a Ray Dataset's blocks in Ray's object store, or
    the partitions of a DataFrame cached in Spark (:class:`SparkPartition`);
    ``records_per_second`` replays them at that rate over all subtasks (a table
    played back as a live stream)."""

    dynamic_splits = True

    def __init__(self, blocks: list[Any], arrow_batches: bool = False, records_per_second: float | None = None) -> None:
        check_rate("from_spark", records_per_second)
        self.blocks = list(blocks)
        self.arrow_batches = arrow_batches
        self.records_per_second = records_per_second

    @classmethod
    def from_ray_dataset(
        cls, dataset: Any, arrow_batches: bool = False, records_per_second: float | None = None
    ) -> "ArrowBlockSource":
        return cls(dataset.to_arrow_refs(), arrow_batches, records_per_second)

    @classmethod
    def from_spark(
        cls, df: "DataFrame", arrow_batches: bool = False, records_per_second: float | None = None
    ) -> "ArrowBlockSource":
        _require_raydp_session(df)
        partitions, release = _cache_in_spark(df)
        source = cls(partitions, arrow_batches, records_per_second)
        weakref.finalize(source, _release_quietly, release).atexit = False  # Spark drops it when it stops
        return source

    def create_splits(self, parallelism: int) -> list[Any]:
        # Sizes are learned by the readers: counting rows here would take a Ray task
        # per block, and a task waits for a worker process on a busy cluster.
        return [BlockSplit(i, 0) for i in range(len(self.blocks))]

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        # Each reader's share of the rate: fewer blocks than readers leave some readers idle.
        readers = min(parallelism, len(self.blocks)) or 1
        rate = None if self.records_per_second is None else RateLimit(self.records_per_second / readers)
        return _BlockReader(self.blocks, self.arrow_batches, rate)


class _BlockReader(SourceReader):
    def __init__(self, blocks: list[Any], arrow_batches: bool, limit: RateLimit | None) -> None:
        self._blocks = blocks
        self._arrow = arrow_batches
        self._limit = limit
        self._splits: list[BlockSplit] = []
        self._table: pa.Table | None = None
        self._table_block = -1

    def add_splits(self, splits: list[Any]) -> None:
        self._splits.extend(splits)

    def snapshot_splits(self) -> list[Any]:
        return list(self._splits)

    def _load(self, block: int) -> pa.Table:
        if self._table is None or self._table_block != block:
            b = self._blocks[block]
            self._table, self._table_block = (b.load() if isinstance(b, SparkPartition) else ray.get(b)), block
        return self._table

    def poll(self, max_records: int) -> Poll:
        while self._splits and self._splits[0].row >= self._load(self._splits[0].split_id).num_rows:
            self._splits.pop(0)
        if not self._splits:
            self._table, self._table_block = None, -1  # let the block go
            return Poll([], end=True)
        if self._limit is not None:
            max_records, wait_s = self._limit.allowance(max_records)
            if not max_records:
                return Poll([], wait_s=wait_s)
        s = self._splits[0]
        chunk = self._load(s.split_id).slice(s.row, max_records)
        if self._limit is not None:
            self._limit.spend(chunk.num_rows)
        records: list[Any] = chunk.combine_chunks().to_batches() if self._arrow else chunk.to_pylist()
        self._splits[0] = BlockSplit(s.split_id, s.row + chunk.num_rows)
        return Poll(records, split_id=s.split_id)


def from_spark(
    env: "StreamExecutionEnvironment",
    df: "DataFrame",
    watermark_strategy: "WatermarkStrategy | None" = None,
    arrow_batches: bool = False,
    records_per_second: float | None = None,
) -> "DataStream":
    """The rows of a Spark DataFrame as a stream of ``env``: dicts keyed by column
    name (or, with ``arrow_batches``, ``pyarrow.RecordBatch`` es). The DataFrame
    goes to Ray through raydp, so its session must be raydp's (:func:`spark_session`).
    ``records_per_second`` replays the rows at that rate (over all source tasks),
    as a live stream would bring them: for demos, rehearsals and tests."""
    return env.from_source(
        ArrowBlockSource.from_spark(df, arrow_batches, records_per_second), watermark_strategy, "spark"
    )


def from_ray_dataset(
    env: "StreamExecutionEnvironment",
    dataset: Any,
    watermark_strategy: "WatermarkStrategy | None" = None,
    arrow_batches: bool = False,
    records_per_second: float | None = None,
) -> "DataStream":
    """The rows of a Ray Dataset as a stream of ``env``, as :func:`from_spark` gives them."""
    return env.from_source(
        ArrowBlockSource.from_ray_dataset(dataset, arrow_batches, records_per_second), watermark_strategy, "ray dataset"
    )


# ---------------------------------------------------------------------- out
class ParquetTableSink(FileSink):
    """A Parquet table at ``path`` (local or any pyarrow.fs URI), written with
    two-phase commit: readers see whole files of completed checkpoints only. Dict
    records become named columns, tuples ``f0, f1, ...``, other values ``value``;
    or give a ``pyarrow.Schema``."""

    def __init__(self, path: str, schema: pa.Schema | None = None) -> None:
        super().__init__(path, "parquet", schema)

    def to_spark(self, spark: "SparkSession | None" = None) -> "DataFrame":
        """The committed table as a Spark DataFrame (raydp's session by default)."""
        return (spark or spark_session()).read.parquet(_spark_path(self.path))

    def to_ray_dataset(self) -> Any:
        """The committed table as a Ray Dataset (read here: Ray Data's own Parquet
        reader runs actors, which raydp-polluted workers cannot host)."""
        import ray.data

        ensure_ray()
        fs, _ = resolve(self.path)
        tables = [pq.read_table(p, filesystem=fs) for p in committed_files(self.path)]
        return ray.data.from_arrow(tables) if tables else ray.data.from_items([])


def _uri(path: str) -> str:
    return path if "://" in path else "file://" + os.path.abspath(path)


def _spark_path(path: str) -> str:
    uri = _uri(path)
    return uri.replace("s3://", "s3a://", 1) if uri.startswith("s3://") else uri


def _collect(stream: "DataStream", job_name: str, path: str | None) -> ParquetTableSink:
    """Run the bounded job ending in ``stream`` with its records into a Parquet
    table (exactly once: the sink commits through the job's final checkpoint)."""
    if path is None:
        storage = stream._env.checkpoint_config.storage
        path = posixpath.join(storage, "results", f"{job_name}-{uuid.uuid4().hex[:8]}")
    sink = ParquetTableSink(path)
    stream.sink_to(sink)
    stream._env.execute(job_name)
    return sink


def collect_to_spark(
    stream: "DataStream", job_name: str, spark: "SparkSession | None" = None, path: str | None = None
) -> "DataFrame":
    """Run this bounded job to its end and return its records as a Spark DataFrame
    (raydp's session unless ``spark`` is given). They are written exactly once
    into a Parquet table at ``path`` (default: under the checkpoint storage),
    which the DataFrame reads."""
    return _collect(stream, job_name, path).to_spark(spark)


def collect_to_ray_dataset(stream: "DataStream", job_name: str, path: str | None = None) -> Any:
    """As :func:`collect_to_spark`, returning a Ray Dataset."""
    return _collect(stream, job_name, path).to_ray_dataset()

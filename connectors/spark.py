"""Spark DataFrames and Ray Datasets in and out, through raydp on the same Ray cluster.

In: :class:`ArrowBlockSource` reads the Arrow blocks of a Ray Dataset from Ray's
object store; ``env.from_spark(df)`` gets them from a Spark DataFrame through
raydp (``ray.data.from_spark``), ``env.from_ray_dataset(ds)`` from a Dataset.
Blocks are cut into splits of at most ``rows_per_split`` rows, handed out by the
enumerator one at a time (a fast reader takes more). A reader remembers (split,
row), so a restore resumes each split at the row after the last one
checkpointed. Records are dicts keyed by column name, or with
``arrow_batches=True`` whole ``pyarrow.RecordBatch`` es for operators that work
on columns.

Out: :class:`ParquetTableSink` writes a Parquet table with two-phase commit that
``spark.read.parquet`` and ``ray.data.read_parquet`` read (never a partial file),
and ``DataStream.execute_and_collect_to_spark()`` runs a bounded job into one and
returns it as a Spark DataFrame.

The blocks belong to the driver that made them (as with any Ray Dataset): keep it
running while the job reads them.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray

from actors.cluster import ensure_ray, java_env
from connectors.files import FileSink, committed_files, resolve
from runtime.errors import InvalidConfigurationError, WeirError
from runtime.sources import Poll, RateLimit, Source, SourceReader, check_rate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from runtime.datastream import DataStream

ROWS_PER_SPLIT = 65_536


# ---------------------------------------------------------------------- Spark on Ray
def _spark_extra() -> None:
    """pyspark and raydp come with the ``spark`` extra; without them, say so."""
    try:
        import pyspark  # noqa: F401
        import raydp  # noqa: F401
    except ImportError as exc:
        raise WeirError(
            f"the Spark bridge needs pyspark and raydp, which weir installs only with its spark extra "
            f"({exc.name} is missing): pip install 'weir[spark]'"
        ) from None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise WeirError(
            "Spark needs a Java runtime (OpenJDK 17 works), and none was found: "
            + (f"JAVA_HOME={home} has no bin/java" if home else "`java` is not on PATH and JAVA_HOME is not set")
            + ". Install one (e.g. apt-get install openjdk-17-jre-headless) and try again."
        )
    return java


def spark_session(
    executors: int = 1, cores: int = 1, memory: str | int = "1g", app_name: str = "weir",
    executor_cpus: float | None = None, configs: dict[str, str] | None = None,
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
        raise WeirError(
            "from_spark() needs a Spark session that raydp started on this Ray cluster, and this process has none "
            "(a plain SparkSession cannot hand its data to Ray): start it with connectors.spark.spark_session(...)"
        )


# ---------------------------------------------------------------------- in
@dataclass(frozen=True)
class BlockSplit:
    """Rows ``row..end-1`` of block ``block``; ``row`` is the next one to read."""

    split_id: int
    block: int
    row: int
    end: int


@ray.remote(num_cpus=0)
def _num_rows(table: pa.Table) -> int:
    return int(table.num_rows)


class ArrowBlockSource(Source[Any]):
    """The rows of Arrow tables in Ray's object store (a Ray Dataset's blocks);
    ``records_per_second`` replays them at that rate over all subtasks (a table
    played back as a live stream)."""

    dynamic_splits = True

    def __init__(self, blocks: list[Any], arrow_batches: bool = False, rows_per_split: int = ROWS_PER_SPLIT,
                 records_per_second: float | None = None) -> None:
        if rows_per_split <= 0:
            raise InvalidConfigurationError("rows_per_split", rows_per_split, "must be positive")
        check_rate("from_spark", records_per_second)
        self.blocks = list(blocks)
        self.arrow_batches = arrow_batches
        self.rows = ray.get([_num_rows.remote(b) for b in self.blocks])
        self.rows_per_split = rows_per_split
        self.records_per_second = records_per_second

    @classmethod
    def from_ray_dataset(cls, dataset: Any, arrow_batches: bool = False, records_per_second: float | None = None) -> "ArrowBlockSource":
        return cls(dataset.to_arrow_refs(), arrow_batches, records_per_second=records_per_second)

    @classmethod
    def from_spark(cls, df: "DataFrame", arrow_batches: bool = False, records_per_second: float | None = None) -> "ArrowBlockSource":
        _require_raydp_session(df)
        import ray.data

        return cls.from_ray_dataset(ray.data.from_spark(df), arrow_batches, records_per_second)

    def create_splits(self, parallelism: int) -> list[Any]:
        splits: list[Any] = []
        for block, rows in enumerate(self.rows):
            for start in range(0, rows, self.rows_per_split):
                splits.append(BlockSplit(len(splits), block, start, min(start + self.rows_per_split, rows)))
        return splits

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        rate = None if self.records_per_second is None else RateLimit(self.records_per_second / parallelism)
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

    def poll(self, max_records: int) -> Poll:
        while self._splits and self._splits[0].row >= self._splits[0].end:
            self._splits.pop(0)
        if not self._splits:
            self._table, self._table_block = None, -1  # let the block go
            return Poll([], end=True)
        if self._limit is not None:
            max_records, wait_s = self._limit.allowance(max_records)
            if not max_records:
                return Poll([], wait_s=wait_s)
        s = self._splits[0]
        if self._table is None or self._table_block != s.block:
            self._table, self._table_block = ray.get(self._blocks[s.block]), s.block
        chunk = self._table.slice(s.row, min(max_records, s.end - s.row))
        if self._limit is not None:
            self._limit.spend(chunk.num_rows)
        records: list[Any] = chunk.combine_chunks().to_batches() if self._arrow else chunk.to_pylist()
        self._splits[0] = BlockSplit(s.split_id, s.block, s.row + chunk.num_rows, s.end)
        return Poll(records, split_id=s.split_id)


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


def collect_to_spark(stream: "DataStream", job_name: str, spark: "SparkSession | None" = None, path: str | None = None) -> "DataFrame":
    return _collect(stream, job_name, path).to_spark(spark)


def collect_to_ray_dataset(stream: "DataStream", job_name: str, path: str | None = None) -> Any:
    return _collect(stream, job_name, path).to_ray_dataset()

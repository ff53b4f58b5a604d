"""Spark DataFrames in and out through raydp, exactly once, also when a reader dies."""

from __future__ import annotations

import gc
import sys
import time

import pyarrow as pa
import pytest

from weir import RestartStrategy, StreamExecutionEnvironment
from weir.connectors.spark import (
    ArrowBlockSource,
    ParquetTableSink,
    SparkPartition,
    collect_to_ray_dataset,
    collect_to_spark,
    from_ray_dataset,
    from_spark,
)
from weir.runtime.errors import WeirError

pytestmark = pytest.mark.ray

ROWS = 1_000_000
CUSTOMERS = 1_000


def orders(spark, rows: int = ROWS):
    """Spark ETL: customer c{id % 1000}, amount id % 97 (zero amounts dropped)."""
    return (
        spark.range(rows)
        .selectExpr("concat('c', cast(id % 1000 as string)) AS customer", "cast(id % 97 AS bigint) AS amount")
        .where("amount > 0")
    )


def totals_job(env, df, out: str, records_per_second: float | None = None):
    from_spark(env, df, records_per_second=records_per_second).map(
        lambda r: {"customer": r["customer"], "orders": 1, "total": r["amount"]}
    ).key_by(lambda r: r["customer"]).reduce(
        lambda a, b: {"customer": a["customer"], "orders": a["orders"] + b["orders"], "total": a["total"] + b["total"]}
    ).sink_to(ParquetTableSink(out))


def final_totals(spark, path: str) -> dict[str, tuple[int, int]]:
    """The last update per customer of the streamed running totals, read by Spark."""
    spark.read.parquet(path).createOrReplaceTempView("updates")
    rows = spark.sql(
        "SELECT customer, max(orders) AS orders, max_by(total, orders) AS total FROM updates GROUP BY customer"
    ).collect()
    return {r["customer"]: (r["orders"], r["total"]) for r in rows}


def spark_totals(df) -> dict[str, tuple[int, int]]:
    rows = df.groupBy("customer").agg({"amount": "sum", "*": "count"}).collect()
    return {r["customer"]: (r["count(1)"], r["sum(amount)"]) for r in rows}


def _env(checkpoint_dir, parallelism: int = 2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    return env


def test_a_million_row_dataframe_aggregated_in_a_stream_equals_spark(spark, checkpoint_dir, tmp_path):
    df = orders(spark)
    out = str(tmp_path / "totals")
    env = _env(checkpoint_dir)
    totals_job(env, df, out)
    env.execute("spark-totals")
    expected = spark_totals(df)
    assert len(expected) == CUSTOMERS
    assert final_totals(spark, out) == expected


def test_killing_a_reader_midway_loses_and_duplicates_nothing(spark, checkpoint_dir, tmp_path):
    df = orders(spark)
    out = str(tmp_path / "totals")
    env = _env(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.5))
    totals_job(env, df, out, records_per_second=200_000)  # about 5 s of reading
    client = env.execute_async("spark-kill")
    read = 0
    # A third of the rows read and a checkpoint taken: kill a reader in the middle.
    while read < ROWS // 3 or not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        readers = [m for m in client.metrics() if m["task"].startswith("source-spark")]
        read = sum(m["records_in"] for m in readers)
        assert read < ROWS * 0.9, "the readers were nearly done before a kill could land midway"
        time.sleep(0.05)
    vertex, subtask = readers[0]["task"].rsplit("/", 1)
    client.kill_task(vertex, int(subtask))
    result = client.wait(300)
    assert result.restarts == 1
    assert final_totals(spark, out) == spark_totals(df)


def test_arrow_batches_and_collect_to_spark(spark, checkpoint_dir):
    df = spark.range(10_000).selectExpr("id", "id * 2 AS double")
    env = _env(checkpoint_dir)
    sizes = from_spark(env, df, arrow_batches=True).map(
        lambda batch: {"rows": batch.num_rows, "sum": pa.compute.sum(batch.column("double")).as_py()}
    )
    result = collect_to_spark(sizes, "arrow-batches", spark)
    agg = result.selectExpr("sum(rows) AS rows", "sum(sum) AS total").collect()[0]
    assert (agg["rows"], agg["total"]) == (10_000, 2 * sum(range(10_000)))


def test_the_dataframes_arrow_cache_in_spark_is_released_with_its_source(spark):
    def cached() -> int:
        return spark.sparkContext._jsc.getPersistentRDDs().size()

    gc.collect()  # earlier tests' sources go first, releasing their caches
    before = cached()
    source = ArrowBlockSource.from_spark(spark.range(1000))
    assert [p.index for p in source.blocks] == list(range(len(source.blocks))) and cached() == before + 1
    del source
    gc.collect()
    assert cached() == before


def test_a_partition_whose_spark_executor_is_gone_is_named(ray_cluster):
    gone = SparkPartition("raydp-executor-gone", "weir", 7, 3, "{}", "spark://nowhere:1")
    with pytest.raises(
        WeirError,
        match=r"partition 3 of the DataFrame could not be fetched from Spark executor "
        r"raydp-executor-gone .*the driver's Spark session must run while the job reads",
    ):
        gone.load()


def test_ray_dataset_in_and_out(ray_cluster, checkpoint_dir):
    import ray.data

    ds = ray.data.from_items([{"word": w} for w in "a b a c b a".split()])
    env = _env(checkpoint_dir, parallelism=1)
    counts = from_ray_dataset(env, ds).map(lambda r: (r["word"], 1)).key_by(lambda t: t[0]).sum(1)
    rows = collect_to_ray_dataset(counts, "ray-words").take_all()
    final = {}
    for r in rows:
        final[r["f0"]] = max(final.get(r["f0"], 0), r["f1"])
    assert final == {"a": 3, "b": 2, "c": 1}


def test_a_dataframe_of_a_plain_spark_session_is_refused_with_how_to_fix(ray_cluster, monkeypatch):
    import raydp.context
    from pyspark.sql import DataFrame

    monkeypatch.setattr(raydp.context, "_global_spark_context", None)
    env = StreamExecutionEnvironment.get_execution_environment()
    fake = DataFrame.__new__(DataFrame)
    with pytest.raises(WeirError, match=r"needs a Spark session that raydp started.*spark_session\(\.\.\.\)"):
        from_spark(env, fake)
    with pytest.raises(TypeError, match="from_spark\\(\\) takes a pyspark.sql.DataFrame, got list"):
        from_spark(env, [1, 2])


def test_missing_java_is_named(monkeypatch):
    from weir.connectors.spark import spark_session

    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    with pytest.raises(WeirError, match=r"Spark needs a Java runtime.*JAVA_HOME=/nonexistent-jdk has no bin/java"):
        spark_session()


def test_the_bridge_without_the_spark_extra_names_it(monkeypatch):
    """pyspark and raydp come with weir[spark] only; a user without them is told so."""
    from weir.connectors.spark import spark_session

    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if not installed
    with pytest.raises(
        WeirError,
        match=r"the Spark bridge needs pyspark and raydp, which weir installs only with its "
        r"spark extra \(pyspark is missing\): pip install 'weir\[spark\]'",
    ):
        spark_session()

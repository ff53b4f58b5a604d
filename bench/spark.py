"""DataFrame -> keyed aggregation -> Parquet table: weir next to plain Spark.

A DataFrame of N order rows (1,000 customers) is cached in Spark; then

* Spark: ``groupBy(customer).agg(count, sum)`` written as Parquet (one row per key);
* weir, rows: ``from_spark`` (dict per row) -> map -> key_by -> reduce -> ``ParquetTableSink``,
  checkpoints every 1 s; the running total of every row is written (N updates);
* weir, Arrow batches: ``from_spark(arrow_batches=True)`` -> per-batch partial sums with
  pyarrow -> key_by -> reduce -> ``ParquetTableSink``;
* both again in BATCH execution mode (``env.set_runtime_mode(RuntimeExecutionMode.BATCH)``):
  no periodic checkpoints, and the reduce writes one total per customer at the end, as Spark does.

    python3 -m bench.spark [--rows 1000000] [--parallelism 2] [--repeat 3]

Prints rows/s of the whole run (DataFrame to committed table, Ray actor start-up
and the DataFrame's hand-over to Ray included) and, for weir, rows/s from the
first row any task saw to the last (the streaming rate). Median of the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from weir import RuntimeExecutionMode, StreamExecutionEnvironment
from weir.connectors.spark import ParquetTableSink, from_spark, spark_session


def orders(spark: Any, rows: int) -> Any:
    df = spark.range(rows).selectExpr(
        "concat('c', cast(id % 1000 as string)) AS customer", "cast(id % 97 AS bigint) AS amount"
    )
    df = df.cache()
    df.count()
    return df


def spark_run(df: Any, out: str) -> float:
    started = time.perf_counter()
    df.groupBy("customer").agg({"amount": "sum", "*": "count"}).write.mode("overwrite").parquet(out)
    return time.perf_counter() - started


def _add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"customer": a["customer"], "orders": a["orders"] + b["orders"], "total": a["total"] + b["total"]}


def _partial_sums(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    sums = pa.Table.from_batches([batch]).group_by("customer").aggregate([("amount", "sum"), ("amount", "count")])
    return [
        {"customer": c, "orders": n, "total": t} for c, t, n in zip(*(sums.column(i).to_pylist() for i in range(3)))
    ]


def weir_run(
    df: Any,
    out: str,
    parallelism: int,
    arrow: bool,
    mode: RuntimeExecutionMode,
    name: str,
) -> tuple[float, float]:
    started = time.perf_counter()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(mode)
    env.enable_checkpointing(1000)  # BATCH mode takes none but the final one
    if arrow:
        updates = from_spark(env, df, arrow_batches=True).flat_map(_partial_sums)
    else:
        updates = from_spark(env, df).map(lambda r: {"customer": r["customer"], "orders": 1, "total": r["amount"]})
    updates.key_by(lambda r: r["customer"]).reduce(_add).sink_to(ParquetTableSink(out))
    result = env.execute(name)
    wall = time.perf_counter() - started
    firsts = [m["first_record_at"] for m in result.metrics if m.get("first_record_at")]
    lasts = [m["last_record_at"] for m in result.metrics if m.get("last_record_at")]
    return wall, max(lasts) - min(firsts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = spark_session(executors=1, cores=1, memory="2g", app_name="weir-bench", executor_cpus=0.5)
    df = orders(spark, args.rows)
    weir = {
        f"weir, {what}{', BATCH mode' if mode is RuntimeExecutionMode.BATCH else ''}": (arrow, mode)
        for mode in (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH)
        for what, arrow in (("dict rows", False), ("Arrow batches", True))
    }
    runs: dict[str, list[tuple[float, float | None]]] = {"plain Spark": [], **{name: [] for name in weir}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            runs["plain Spark"].append((spark_run(df, f"{tmp}/spark-{r}"), None))
            for i, (name, (arrow, mode)) in enumerate(weir.items()):
                runs[name].append(
                    weir_run(df, f"{tmp}/weir-{i}-{r}", args.parallelism, arrow, mode, f"bench-spark-{i}-{r}")
                )
    table = Table(title=f"{args.rows:,} rows -> keyed sum over 1,000 customers -> Parquet (median of {args.repeat})")
    for col in ("pipeline", "wall s", "vs plain Spark", "rows/s (whole run)", "rows/s (streaming)"):
        table.add_column(col, justify="right")
    spark_wall = statistics.median(w for w, _ in runs["plain Spark"])
    for name, samples in runs.items():
        wall = statistics.median(w for w, _ in samples)
        streaming = [s for _, s in samples if s]
        table.add_row(
            name,
            f"{wall:.2f}",
            f"{wall / spark_wall:.1f}x",
            f"{args.rows / wall:,.0f}",
            f"{args.rows / statistics.median(streaming):,.0f}" if streaming else "-",
        )
    Console().print(table)


if __name__ == "__main__":
    main()

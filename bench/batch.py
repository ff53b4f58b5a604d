"""A keyed sum in STREAMING and in BATCH execution mode, in-process (no Ray).

The pipeline of ``bench.spark`` without Spark and Ray: N order rows (dicts, 1,000
customers) from ``from_collection`` -> map -> key_by -> reduce -> a sink
(``DiscardingSink``, or a Parquet ``FileSink``), run with ``executor="local"``.
STREAMING writes every running total (N updates), BATCH one total per customer.

    python3 -m bench.batch [--rows 1000000] [--parallelism 1] [--repeat 5] [--sink parquet|discard]

Prints per mode, best of the repeats (the least disturbed run where other work
shares the machine), the wall time from building the job to ``execute()``
returning, the part of it before the first record reached a task (pickling the
collection, shipping the job, starting the tasks), the CPU time of the process,
and the ratios of the modes. The modes alternate, after an untimed warm-up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from weir import DiscardingSink, RuntimeExecutionMode, StreamExecutionEnvironment
from weir.connectors.files import FileSink


def _add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"customer": a["customer"], "orders": a["orders"] + b["orders"], "total": a["total"] + b["total"]}


def run(
    rows: list[dict[str, Any]],
    mode: RuntimeExecutionMode,
    parallelism: int,
    sink: str,
    folder: str,
) -> tuple[float, float, float]:
    """Seconds from building the job (``from_collection`` pickles the rows) to
    ``execute()`` returning, of them those before the first record, and the CPU
    seconds this process spent meanwhile (steadier than wall time on a shared machine)."""
    started, cpu = time.time(), time.process_time()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(mode)
    env.get_checkpoint_config().set_checkpoint_storage(folder + "/checkpoints")
    (
        env.from_collection(rows)
        .map(lambda r: {"customer": r["customer"], "orders": 1, "total": r["amount"]})
        .key_by(lambda r: r["customer"])
        .reduce(_add)
        .sink_to(FileSink(folder + "/out", format="parquet") if sink == "parquet" else DiscardingSink())
    )
    result = env.execute(f"bench-batch-{mode.name.lower()}", executor="local")
    wall, cpu = time.time() - started, time.process_time() - cpu
    first = min(m["first_record_at"] for m in result.metrics if m.get("first_record_at"))
    return wall, first - started, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sink", choices=["parquet", "discard"], default="parquet")
    args = ap.parse_args()
    rows = [{"customer": f"c{i % 1000}", "amount": i % 97} for i in range(args.rows)]
    modes = (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH)
    samples: dict[RuntimeExecutionMode, list[tuple[float, float, float]]] = {m: [] for m in modes}
    for mode in modes:  # warm-up, untimed: the first Parquet write imports pyarrow's writer and pandas
        with tempfile.TemporaryDirectory(prefix="weir-bench-batch-") as folder:
            run(rows[:10_000], mode, args.parallelism, args.sink, folder)
    for r in range(args.repeat):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            with tempfile.TemporaryDirectory(prefix="weir-bench-batch-") as folder:
                samples[mode].append(run(rows, mode, args.parallelism, args.sink, folder))
    table = Table(
        title=f"{args.rows:,} rows -> keyed sum over 1,000 customers -> {args.sink}, "
        f"parallelism {args.parallelism}, local executor (best of {args.repeat})"
    )
    for col in ("mode", "job s", "of which before the first record", "CPU s", "rows/s", "vs BATCH (wall, CPU)"):
        table.add_column(col, justify="right")

    def best(mode: RuntimeExecutionMode, i: int) -> float:
        return min(sample[i] for sample in samples[mode])

    batch = RuntimeExecutionMode.BATCH
    for mode in modes:
        wall, setup, cpu = best(mode, 0), best(mode, 1), best(mode, 2)
        table.add_row(
            mode.name,
            f"{wall:.2f}",
            f"{setup:.2f}",
            f"{cpu:.2f}",
            f"{args.rows / wall:,.0f}",
            f"{wall / best(batch, 0):.2f}x, {cpu / best(batch, 2):.2f}x",
        )
    Console().print(table)


if __name__ == "__main__":
    main()

"""The FileSink beside a discarding sink: README's example job (a keyed running sum
with checkpoints every 500 ms, ``examples/keyed_sum.py``) into each sink.

For each sink it prints rows/s two ways, the median of ``--repeat`` runs with
their range: "whole execute()" divides the records by the wall time of the
whole ``execute()`` call on a warm cluster (one warm-up run per sink fills the
slot pool first); "steady" counts from the first record any task saw to the
last one. The sinks take turns run by run, so that a noisy neighbour slows all
of them alike. Every FileSink run's committed rows are counted: each record
once.

    python3 -m bench.sinks [--records 2000000] [--parallelism 2] [--repeat 5] [--sinks discard jsonl parquet]
    python3 -m bench.sinks --executor local --records 20000 --repeat 1   # in one process, no Ray
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import pyarrow.parquet as pq

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.connectors.files import FileSink, committed_files
from weir.runtime.sinks import Sink

SINKS = ("discard", "jsonl", "parquet")


def keyed_sum(n: int, parallelism: int, checkpoint_ms: int, sink: Sink) -> StreamExecutionEnvironment:
    """The job of examples/keyed_sum.py, into ``sink``."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(checkpoint_ms)
    (
        env.from_sequence(0, n - 1)
        .map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(sink)
    )
    return env


def committed_rows(folder: str, fmt: str) -> int:
    sink = FileSink(folder, format=fmt)
    if fmt == "parquet":
        return sum(pq.read_metadata(p).num_rows for p in committed_files(sink))
    total = 0
    for p in committed_files(sink):
        with open(p, "rb") as f:
            total += f.read().count(b"\n")
    return total


def run(kind: str, n: int, parallelism: int, checkpoint_ms: int, executor: str | None) -> tuple[float, float]:
    """(rows/s whole execute(), rows/s steady) of one run into ``kind``."""
    folder = tempfile.mkdtemp(prefix=f"weir-bench-sinks-{kind}-")
    try:
        sink = DiscardingSink() if kind == "discard" else FileSink(folder, format=kind)
        env = keyed_sum(n, parallelism, checkpoint_ms, sink)
        started = time.perf_counter()
        result = env.execute(f"bench-sinks-{kind}", executor=executor)
        wall = time.perf_counter() - started
        if kind != "discard":
            rows = committed_rows(folder, kind)
            assert rows == n, f"{kind}: {rows:,} rows committed where the job had {n:,} records"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    firsts = [m["first_record_at"] for m in result.metrics if m.get("first_record_at")]
    lasts = [m["last_record_at"] for m in result.metrics if m.get("last_record_at")]
    return n / wall, n / (max(lasts) - min(firsts))


def spread(rates: list[float]) -> str:
    """``1.23 M (1.10-1.31)``: the median and the range, in M rows/s."""
    return f"{statistics.median(rates) / 1e6:.2f} M ({min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--checkpoint-ms", type=int, default=500, help="the example's interval")
    ap.add_argument("--repeat", type=int, default=5, help="runs per sink; the median and range are printed")
    ap.add_argument("--sinks", nargs="+", choices=SINKS, default=list(SINKS))
    ap.add_argument("--executor", choices=["ray", "local"], default=None, help="default: weir's (Ray)")
    ap.add_argument(
        "--settle-s",
        type=float,
        default=6.0,
        help="after the warm-up, wait until the slot pool started no task actor for this long (Ray only)",
    )
    args = ap.parse_args()
    executor = "local" if args.executor == "local" else None
    for kind in args.sinks:  # warm-up: fills the slot pool, loads each sink's modules in the task processes
        run(kind, min(args.records, 100_000), args.parallelism, args.checkpoint_ms, executor)
    if executor is None:
        from bench.w1 import settle_pool

        settle_pool(args.settle_s)
    whole: dict[str, list[float]] = {k: [] for k in args.sinks}
    steady: dict[str, list[float]] = {k: [] for k in args.sinks}
    for _ in range(args.repeat):
        for kind in args.sinks:
            w, s = run(kind, args.records, args.parallelism, args.checkpoint_ms, executor)
            whole[kind].append(w)
            steady[kind].append(s)
    print(
        f"keyed running sum, {args.records:,} records, parallelism {args.parallelism}, checkpoints every "
        f"{args.checkpoint_ms} ms, {args.executor or 'ray'} executor, {os.cpu_count()} cores; "
        f"rows/s, median of {args.repeat} (range)"
    )
    base = statistics.median(whole["discard"]) if "discard" in whole else None
    for kind in args.sinks:
        versus = "" if base is None else f", {statistics.median(whole[kind]) / base:.2f}x the discarding sink's"
        print(f"  {kind:>8}: whole execute() {spread(whole[kind])} | steady {spread(steady[kind])}{versus}")


if __name__ == "__main__":
    main()

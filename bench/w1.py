"""Workload W1: N records; key = i % 1000; map value*2; keyed running sum; discarding sink.

Prints records/s at each parallelism (1 and 2 by default), with checkpoints off
and every 1 s, the ratio to the same computation as a plain Python loop in one
process (inlined; and calling each of the job's functions once a record, the
floor a whole execute() is held to: ``--min-ratio`` fails the run under a ratio
to it), the scaling curve (records/s against the lowest parallelism), and
p50/p99 source-to-sink latency with the source limited to 100,000 records/s.

    python3 -m bench.w1 [--records 4000000] [--latency-records 1000000] [--parallelism 1 2] [--repeat 3]
    python3 -m bench.w1 --parallelism 1 2 4 8     # the scaling curve, on a machine with cores to spare

Every row shows both rates: "steady" counts from the first record any task saw
to the last one (start-up and the end left out); "whole execute()" divides by
the wall time of the whole ``execute()`` call, on a warm cluster (one warm-up
run per parallelism fills the slot pool first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import Sink, SinkWriter


def plain_python(n: int) -> float:
    started = time.perf_counter()
    sums: dict[int, tuple[int, int]] = {}
    for i in range(n):
        kv = (i % 1000, 2 * i)
        prev = sums.get(kv[0])
        sums[kv[0]] = kv if prev is None else (prev[0], prev[1] + kv[1])
    return n / (time.perf_counter() - started)


def one_call_per_operator(n: int) -> float:
    """The job as a plain Python loop that calls each of its functions once per
    record, as weir's operators do: the floor a whole ``execute()`` is held to."""
    to_pair, key_of, add = (lambda i: (i % 1000, 2 * i)), (lambda kv: kv[0]), (lambda a, b: (a[0], a[1] + b[1]))
    started = time.perf_counter()
    sums: dict[int, tuple[int, int]] = {}
    for i in range(n):
        kv = to_pair(i)
        k = key_of(kv)
        prev = sums.get(k)
        sums[k] = kv if prev is None else add(prev, kv)
    return n / (time.perf_counter() - started)


def settle_pool(quiet_s: float = 6.0, timeout_s: float = 60.0) -> None:
    """Wait until the slot pool has started no process (task actor or job
    coordinator) for ``quiet_s``, longer than its refill delay and a process's
    start: after a warm-up it tops its shapes up, and a process starting during
    a timed run would be counted against that run."""
    import ray

    from weir.actors.pool import get_pool

    pool, until = get_pool(), time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < until:
        stats = ray.get(pool.stats.remote())
        now = (stats["created"]["slots"], stats["created"]["coordinators"], sum(s["starting"] for s in stats["shapes"]))
        if now != last:
            last, since = now, time.monotonic()
        elif now[2] == 0 and time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)


def w1_job(n: int, parallelism: int, checkpoint_ms: int | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    (
        env.from_sequence(0, n - 1)
        .map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(DiscardingSink())
    )
    return env


def w1(n: int, parallelism: int, checkpoint_ms: int | None) -> tuple[float, float]:
    env = w1_job(n, parallelism, checkpoint_ms)
    started = time.perf_counter()
    result = env.execute(f"bench-w1-p{parallelism}-{'cp' if checkpoint_ms else 'nocp'}")
    wall = time.perf_counter() - started
    firsts = [m["first_record_at"] for m in result.metrics if m.get("first_record_at")]
    lasts = [m["last_record_at"] for m in result.metrics if m.get("last_record_at")]
    return n / (max(lasts) - min(firsts)), wall


class _LatencySink(Sink):
    """Writes now - record timestamp (ms) of every record to a file per subtask."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _LatencyWriter(os.path.join(self.folder, f"lat-{ctx.subtask}.txt"))


class _LatencyWriter(SinkWriter):
    def __init__(self, path: str) -> None:
        self._path = path
        self._lat: list[float] = []

    def write(self, records: list[Any]) -> None:
        now = time.time()
        self._lat.extend((now - r[1]) * 1000 for r in records)

    def close(self) -> None:
        with open(self._path, "w") as f:
            f.write("\n".join(f"{x:.3f}" for x in self._lat))


def latency(n: int, rate: float, parallelism: int) -> tuple[float, float]:
    folder = tempfile.mkdtemp(prefix="weir-lat-")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1000)
    (
        env.from_generator(lambda i: (i % 1000, time.time()), count=n, records_per_second=rate)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: b)
        .sink_to(_LatencySink(folder))
    )
    env.execute("bench-w1-latency")
    lat: list[float] = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            lat.extend(float(x) for x in f.read().split())
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=4_000_000)
    ap.add_argument("--latency-records", type=int, default=1_000_000, help="0: no latency run")
    ap.add_argument("--rate", type=float, default=100_000)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--settle-s",
        type=float,
        default=6.0,
        help="after each warm-up, wait until the slot pool started no task actor for this long",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration; the median is printed")
    ap.add_argument(
        "--checkpoints", choices=["both", "on"], default="both", help="also without checkpoints, or only every 1 s"
    )
    ap.add_argument(
        "--min-ratio",
        type=float,
        default=None,
        help="exit 1 when a whole execute() at the highest parallelism (median) runs under this ratio to the "
        "one-call-per-operator loop: a regression check",
    )
    args = ap.parse_args()
    console = Console()
    # Each loop's median of three: one run of either varied 2.6-4.5 M records/s here.
    baseline = statistics.median(plain_python(args.records) for _ in range(3))
    floor = statistics.median(one_call_per_operator(args.records) for _ in range(3))
    table = Table(title=f"W1 keyed running sum, {args.records:,} records ({os.cpu_count()} cores)")
    for col in (
        "parallelism",
        "checkpoints",
        "records/s steady (median)",
        "vs plain Python loop",
        "execute() wall (s)",
        "records/s whole execute()",
        "whole vs one-call loop",
    ):
        table.add_column(col, justify="right")
    table.add_row("-", "-", f"{baseline:,.0f}", "1.00", "-", "-", "-")
    table.add_row("one call per operator", "-", f"{floor:,.0f}", f"{floor / baseline:.2f}", "-", "-", "1.00")
    whole_ratio: dict[int, float] = {}
    checkpointed: dict[int, tuple[float, float]] = {}
    for p in args.parallelism:
        w1(min(args.records, 100_000), p, 1000)  # warm-up: fills the slot pool for this parallelism
        settle_pool(args.settle_s)
        for cp in (None, 1000) if args.checkpoints == "both" else (1000,):
            runs = sorted(w1(args.records, p, cp) for _ in range(args.repeat))
            rate, wall = runs[len(runs) // 2]
            row = (
                str(p),
                "every 1 s" if cp else "off",
                f"{rate:,.0f}",
                f"{rate / baseline:.2f}",
                f"{wall:.2f}",
                f"{args.records / wall:,.0f}",
                f"{args.records / wall / floor:.2f}",
            )
            whole_ratio[p] = args.records / wall / floor
            table.add_row(*row)
            print("  row:", " | ".join(row), flush=True)  # as it comes: a long run that is cut off keeps its rows
            if cp:
                checkpointed[p] = (rate, args.records / wall)
    console.print(table)
    top = max(args.parallelism)
    if args.min_ratio is not None and whole_ratio[top] < args.min_ratio:
        console.print(
            f"REGRESSION: a whole execute() at parallelism {top} ran at {whole_ratio[top]:.2f}x the one-call-per-"
            f"operator loop, under the {args.min_ratio:.2f}x this check holds it to"
        )
        raise SystemExit(1)
    low = min(checkpointed)
    console.print(
        f"scaling, checkpoints every 1 s, against parallelism {low} ({os.cpu_count()} cores): steady | whole execute()"
    )
    for p, (rate, whole) in checkpointed.items():
        speedup, whole_up = rate / checkpointed[low][0], whole / checkpointed[low][1]
        console.print(f"  parallelism {p:>3}  {speedup:5.2f}x | {whole_up:5.2f}x  {'#' * max(1, round(whole_up * 10))}")
    if not args.latency_records:
        return
    p50, p99 = latency(args.latency_records, args.rate, max(args.parallelism))
    console.print(
        f"latency at {args.rate:,.0f} records/s, parallelism {max(args.parallelism)}, checkpoints every 1 s: "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )


if __name__ == "__main__":
    main()

"""Start-up: a tiny job as a user waits for it, on a warm cluster.

A 1,000-record keyed running sum into a FileSink with 1 s checkpoints, at each
parallelism; prints the whole ``execute()`` wall time (median of ``--repeat``
runs after one warm-up run per parallelism, which fills the slot pool) next to
the job's own duration (deploy to end, as the job master counts it).

    python3 -m bench.startup [--parallelism 1 2 4 8 16] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from rich.console import Console
from rich.table import Table

from bench.w1 import settle_pool
from connectors.files import FileSink, read_committed
from runtime import StreamExecutionEnvironment


def tiny_job(parallelism: int, name: str, task_cpus: float, records: int = 1000) -> tuple[float, float]:
    """(whole execute() seconds, the job's own duration)."""
    out = tempfile.mkdtemp(prefix="weir-startup-")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_task_cpus(task_cpus)
    env.enable_checkpointing(1000)
    (env.from_sequence(0, records - 1)
        .map(lambda i: (i % 10, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out, format="jsonl")))
    started = time.perf_counter()
    result = env.execute(name)
    wall = time.perf_counter() - started
    assert sum(1 for _ in read_committed(out)) == records, "every update committed once"
    return wall, result.duration_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--task-cpus", type=float, default=0.03,
                    help="Ray CPUs per task: 32 tasks (p=16) take 0.96 of 2 cores, leaving the 1 CPU the pool keeps free")
    ap.add_argument("--settle-s", type=float, default=6.0,
                    help="after each warm-up, wait until the slot pool started no task actor for this long")
    args = ap.parse_args()
    table = Table(title=f"start-up: 1,000-record keyed sum, FileSink, 1 s checkpoints ({os.cpu_count()} cores, warm cluster)")
    for col in ("parallelism", "tasks", "execute() median (s)", "min", "max", "job duration median (s)"):
        table.add_column(col, justify="right")
    for p in args.parallelism:
        tiny_job(p, f"bench-startup-p{p}-warmup", args.task_cpus)
        settle_pool(args.settle_s)
        runs = [tiny_job(p, f"bench-startup-p{p}-{i}", args.task_cpus) for i in range(args.repeat)]
        walls = [w for w, _ in runs]
        print(f"  parallelism {p}: execute() median {statistics.median(walls):.3f} s", flush=True)
        table.add_row(str(p), str(2 * p), f"{statistics.median(walls):.3f}", f"{min(walls):.3f}", f"{max(walls):.3f}",
                      f"{statistics.median(d for _, d in runs):.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()

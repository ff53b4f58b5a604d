"""Cost: machine-wide busy CPU-seconds per million W1 records, whole job.

Reads ``/proc/stat`` around each ``execute()`` (every process on the machine
counts: task actors, the job coordinator, Ray's own daemons, the driver), on a
warm cluster, at each parallelism, and prints the ratio to the first run. On a
2-core machine this shows what scaling out will cost on a bigger one.

    python3 -m bench.cost [--records 2000000] [--parallelism 1 2 4] [--repeat 3]
    python3 -m bench.cost --side-by-side 2 4   # also: that many W1 jobs at parallelism 1 at once

The side-by-side rows split the records over independent jobs at parallelism 1
running at the same time: as many busy processes as parallelism 2 and 4 have,
with no records sent between them. They separate what crowding a machine with
processes costs from what the keyed exchange's fan-out costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rich.console import Console
from rich.table import Table

from bench.w1 import settle_pool, w1, w1_job


def busy_cpu_s() -> float:
    """Busy CPU-seconds of the whole machine since boot (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument(
        "--settle-s",
        type=float,
        default=6.0,
        help="after each warm-up, wait until the slot pool started no task actor for this long",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--side-by-side",
        type=int,
        nargs="*",
        default=[],
        metavar="JOBS",
        help="also run this many W1 jobs at parallelism 1 at once, the records split between them",
    )
    args = ap.parse_args()
    table = Table(title=f"W1 cost, {args.records:,} records, 1 s checkpoints ({os.cpu_count()} cores, warm cluster)")
    for col in (
        "run",
        "busy CPU-s per million records",
        "vs the first run",
        "execute() wall (s)",
        "records/s whole execute()",
    ):
        table.add_column(col, justify="right")
    base = None
    runs = [(f"parallelism {p}", p, 1) for p in args.parallelism]
    runs += [(f"{jobs} jobs at parallelism 1 side by side", 1, jobs) for jobs in args.side_by_side]
    for label, parallelism, jobs in runs:
        w1(
            args.records // 10, parallelism * jobs, 1000
        )  # warm-up: fills the slot pool with as many slots as the run takes
        settle_pool(args.settle_s)
        costs, walls = [], []
        for _ in range(args.repeat):
            before = busy_cpu_s()
            wall = _run_jobs(args.records, parallelism, jobs)
            costs.append((busy_cpu_s() - before) / (args.records / 1e6))
            walls.append(wall)
        cost, wall = statistics.median(costs), statistics.median(walls)
        base = base or cost
        table.add_row(label, f"{cost:.2f}", f"{cost / base:.2f}x", f"{wall:.2f}", f"{args.records / wall:,.0f}")
        print(
            f"  {label}: {cost:.2f} busy CPU-s per million records ({cost / base:.2f}x), "
            f"{args.records / wall:,.0f} records/s whole execute()",
            flush=True,
        )
    Console().print(table)


def _run_jobs(records: int, parallelism: int, jobs: int) -> float:
    """Wall time of ``jobs`` W1 jobs started at once, ``records`` split between them."""
    started = time.perf_counter()
    clients = [w1_job(records // jobs, parallelism, 1000).execute_async(f"bench-cost-{i}") for i in range(jobs)]
    for client in clients:
        client.wait(600)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()

"""Cost: machine-wide busy CPU-seconds per million W1 records, whole job.

Reads ``/proc/stat`` around each ``execute()`` (every process on the machine
counts: task actors, the job coordinator, Ray's own daemons, the driver), on a
warm cluster, at each parallelism, and prints the ratio to the lowest one. On a
2-core machine this shows what scaling out will cost on a bigger one.

    python3 -m bench.cost [--records 2000000] [--parallelism 1 2 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics

from rich.console import Console
from rich.table import Table

from bench.w1 import settle_pool, w1


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
    ap.add_argument("--settle-s", type=float, default=6.0,
                    help="after each warm-up, wait until the slot pool started no task actor for this long")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    table = Table(title=f"W1 cost, {args.records:,} records, 1 s checkpoints ({os.cpu_count()} cores, warm cluster)")
    for col in ("parallelism", "busy CPU-s per million records", "vs lowest parallelism", "execute() wall (s)", "records/s whole execute()"):
        table.add_column(col, justify="right")
    base = None
    for p in args.parallelism:
        w1(args.records // 10, p, 1000)  # warm-up: fills the slot pool for this parallelism
        settle_pool(args.settle_s)
        costs, walls = [], []
        for _ in range(args.repeat):
            before = busy_cpu_s()
            _, wall = w1(args.records, p, 1000)
            costs.append((busy_cpu_s() - before) / (args.records / 1e6))
            walls.append(wall)
        cost, wall = statistics.median(costs), statistics.median(walls)
        base = base or cost
        table.add_row(str(p), f"{cost:.2f}", f"{cost / base:.2f}x", f"{wall:.2f}", f"{args.records / wall:,.0f}")
        print(f"  parallelism {p}: {cost:.2f} busy CPU-s per million records ({cost / base:.2f}x), "
              f"{args.records / wall:,.0f} records/s whole execute()", flush=True)
    Console().print(table)


if __name__ == "__main__":
    main()

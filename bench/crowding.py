"""What crowding a machine with busy Python processes costs, without weir or Ray.

W1's work (records (i % 1000, 2 * i) in batches of 1,024, pickled, sent over a
socket to a keyed running sum) in plain Python: N pipelines of a source process
and a sum process, the records split between them. Prints the machine's busy
CPU-seconds per million records (``/proc/stat``) against one pipeline. Beside
``python3 -m bench.cost --side-by-side 2 4`` it tells what of weir's cost at
high parallelism on few cores is Python processes sharing cores, and what is
weir's own.

    python3 -m bench.crowding [--records 8000000] [--pipelines 1 2 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import socket
import statistics
import time
from multiprocessing.connection import Connection

from bench.cost import busy_cpu_s

BATCH = 1024


def _source(conn: Connection, lo: int, hi: int) -> None:
    for start in range(lo, hi, BATCH):
        conn.send_bytes(pickle.dumps([(i % 1000, 2 * i) for i in range(start, min(start + BATCH, hi))]))
    conn.send_bytes(b"")


def _sum(conn: Connection) -> None:
    sums: dict[int, int] = {}
    while payload := conn.recv_bytes():
        for key, value in pickle.loads(payload):
            sums[key] = sums.get(key, 0) + value


def run(records: int, pipelines: int) -> tuple[float, float]:
    """Busy CPU-seconds per million records and the wall time of one run."""
    ctx = multiprocessing.get_context("fork")
    per = records // pipelines
    procs = []
    for n in range(pipelines):
        a, b = socket.socketpair()
        procs += [ctx.Process(target=_source, args=(Connection(a.detach()), n * per, (n + 1) * per)),
                  ctx.Process(target=_sum, args=(Connection(b.detach()),))]
    before, started = busy_cpu_s(), time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return (busy_cpu_s() - before) / (records / 1e6), time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=8_000_000)
    ap.add_argument("--pipelines", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = None
    for pipelines in args.pipelines:
        runs = [run(args.records, pipelines) for _ in range(args.repeat)]
        cost, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        base = base or cost
        print(f"  {pipelines} pipelines ({2 * pipelines} busy processes, {os.cpu_count()} cores): {cost:.2f} busy CPU-s "
              f"per million records ({cost / base:.2f}x), {args.records / wall:,.0f} records/s", flush=True)


if __name__ == "__main__":
    main()

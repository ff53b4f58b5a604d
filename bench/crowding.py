"""What crowding a machine with busy Python processes costs, without weir or Ray.

W1's work (records (i % 1000, 2 * i) in batches of 1,024, pickled, sent over
sockets to a keyed running sum) in plain Python, with the records split over N
sources and N sums. Prints the machine's busy CPU-seconds per million records
(``/proc/stat``) against the first N. Beside ``python3 -m bench.cost
--side-by-side 2 4`` it tells what of weir's cost at high parallelism on few
cores is Python processes sharing cores, and what is weir's own. Layouts:

- ``pipelines``: source k sends only to sum k (independent jobs side by side);
- ``keyed``: every source sends to every sum by key (W1's keyed exchange, N²
  sockets), a process per source and per sum, as weir runs tasks;
- ``shared``: ``keyed`` with source k and sum k as two threads of one process
  (Flink's slot sharing: N processes instead of 2N).

    python3 -m bench.crowding [--records 8000000] [--parallelism 1 2 4] [--layout keyed] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import socket
import statistics
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from bench.cost import busy_cpu_s

BATCH = 1024
LAYOUTS = ("pipelines", "keyed", "shared")


def _source(conns: list[Connection], lo: int, hi: int) -> None:
    buffers: list[list[tuple[int, int]]] = [[] for _ in conns]
    for i in range(lo, hi):
        key = i % 1000
        channel = key % len(conns)
        buffer = buffers[channel]
        buffer.append((key, 2 * i))
        if len(buffer) == BATCH:
            conns[channel].send_bytes(pickle.dumps(buffer))
            buffer.clear()
    for conn, buffer in zip(conns, buffers):
        if buffer:
            conn.send_bytes(pickle.dumps(buffer))
        conn.send_bytes(b"")


def _sum(conns: list[Connection]) -> None:
    sums: dict[int, int] = {}
    live: list[Any] = list(conns)
    while live:
        for conn in wait(live):
            payload = conn.recv_bytes()  # type: ignore[union-attr]
            if not payload:
                live.remove(conn)
                continue
            for key, value in pickle.loads(payload):
                sums[key] = sums.get(key, 0) + value


def _slot(outputs: list[Connection], lo: int, hi: int, inputs: list[Connection]) -> None:
    summing = threading.Thread(target=_sum, args=(inputs,))
    summing.start()
    _source(outputs, lo, hi)
    summing.join()


def run(records: int, n: int, layout: str) -> tuple[float, float]:
    """Busy CPU-seconds per million records and the wall time of one run."""
    ctx = multiprocessing.get_context("fork")
    per = records // n
    # wires[s][d]: source s's connection to sum d, and sum d's from source s
    wires = [
        [
            tuple(Connection(end.detach()) for end in socket.socketpair()) if layout != "pipelines" or s == d else None
            for d in range(n)
        ]
        for s in range(n)
    ]
    outputs = [[w[0] for w in row if w] for row in wires]
    inputs = [[row[d][1] for row in wires if row[d]] for d in range(n)]  # type: ignore[index]
    if layout == "shared":
        procs = [ctx.Process(target=_slot, args=(outputs[k], k * per, (k + 1) * per, inputs[k])) for k in range(n)]
    else:
        procs = [ctx.Process(target=_source, args=(outputs[k], k * per, (k + 1) * per)) for k in range(n)]
        procs += [ctx.Process(target=_sum, args=(inputs[k],)) for k in range(n)]
    before, started = busy_cpu_s(), time.perf_counter()
    for p in procs:
        p.start()
    for conn in [c for row in outputs for c in row] + [c for row in inputs for c in row]:
        conn.close()  # the children hold their own copies
    for p in procs:
        p.join()
    return (busy_cpu_s() - before) / (records / 1e6), time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=8_000_000)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layout", choices=LAYOUTS, nargs="+", default=["keyed"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for layout in args.layout:
        base = None
        for n in args.parallelism:
            runs = [run(args.records, n, layout) for _ in range(args.repeat)]
            cost, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            base = base or cost
            processes = n if layout == "shared" else 2 * n
            print(
                f"  {layout} at {n} ({processes} busy processes, {os.cpu_count()} cores): {cost:.2f} busy CPU-s "
                f"per million records ({cost / base:.2f}x), {args.records / wall:,.0f} records/s",
                flush=True,
            )


if __name__ == "__main__":
    main()

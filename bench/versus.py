"""weir next to Bytewax on workload W1 (N records; key = i % 1000; value*2; keyed
running sum; discarding sink), on the same machine, side by side in one run.

Bytewax runs from another Python that has it installed (weir does not depend on
it), each run a fresh ``python -m bytewax.run`` of :mod:`bench.bytewax_w1`: its
wall time counts the process start, as a Bytewax user waits for it. weir's is the
whole ``execute()`` on a warm Ray cluster. Both with state snapshots every second
(weir's checkpoints; Bytewax's recovery store with ``-s 1``) and without.

    python3 -m venv /tmp/bw && /tmp/bw/bin/pip install bytewax==0.21.1
    python3 -m bench.versus --bytewax-python /tmp/bw/bin/python [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time

from rich.console import Console
from rich.table import Table

from bench.w1 import w1

ADDRESSES = "127.0.0.1:{};127.0.0.1:{}"


def bytewax(
    python: str, n: int, processes: int, snapshots: bool, keys: int = 1000, timeout_s: float | None = None
) -> float:
    """Wall seconds of the whole run; raises subprocess.TimeoutExpired past ``timeout_s``."""
    env = {**os.environ, "W1_RECORDS": str(n), "W1_KEYS": str(keys), "PYTHONPATH": os.getcwd()}
    args = [python, "-m", "bytewax.run", "bench.bytewax_w1:flow"]
    with tempfile.TemporaryDirectory() as store:
        if snapshots:
            subprocess.run([python, "-m", "bytewax.recovery", store, str(processes)], check=True, env=env)
            args += ["-r", store, "-s", "1", "-b", "0"]
        started = time.perf_counter()
        if processes == 1:
            subprocess.run(args, check=True, env=env, timeout=timeout_s)
        else:
            ports = ADDRESSES.format(*(20_000 + os.getpid() % 10_000 + i for i in range(2)))
            procs = [
                subprocess.Popen([*args, "-i", str(i), "-a", ports], env=env, stderr=subprocess.DEVNULL)
                for i in range(processes)
            ]
            try:
                assert all(p.wait(timeout_s) == 0 for p in procs), "a Bytewax process failed"
            finally:
                for p in procs:
                    p.kill()
        return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytewax-python", required=True, help="a Python with bytewax installed")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.records
    runs: dict[str, list[float]] = {}
    for p in (1, 2):
        w1(10_000, p, 1000)  # warm-up: fills the slot pool
    for _ in range(args.repeat):
        for snapshots in (True, False):
            every = "every 1 s" if snapshots else "off"
            for p in (1, 2):
                runs.setdefault(f"weir, parallelism {p}, checkpoints {every}", []).append(
                    w1(n, p, 1000 if snapshots else None)[1]
                )
                runs.setdefault(f"Bytewax 0.21, {p} process(es), snapshots {every}", []).append(
                    bytewax(args.bytewax_python, n, p, snapshots)
                )
    table = Table(title=f"W1, {n:,} records, whole run (median of {args.repeat})")
    for col in ("run", "wall s", "records/s"):
        table.add_column(col, justify="right")
    for name, walls in runs.items():
        wall = statistics.median(walls)
        table.add_row(name, f"{wall:.2f}", f"{n / wall:,.0f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()

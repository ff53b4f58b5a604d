"""Start-up: a tiny job as a user waits for it.

A 1,000-record keyed running sum into a FileSink with 1 s checkpoints.

- notebook: jobs one after another from one driver on a warm cluster, at each
  parallelism; the whole ``execute()`` wall time (median of ``--repeat`` runs
  after one warm-up run per parallelism, which fills the slot pool) next to the
  job's own duration (deploy to end, as the job master counts it);
- new drivers (``--new-drivers N``): N driver processes, one after another, each
  joining the warm cluster and running one job at p=2 (a second notebook
  opening): its first ``execute()``, on fresh processes from the pool since no
  process that ran another driver's code serves it (``warm_pool`` returns at
  once: the pool has them up), and its connection to Ray;
- cold (``--cold N``): N times, a driver on a machine with no cluster, which
  starts Ray itself: Ray's start (``ray.init``), weir's processes
  (``warm_pool``, as README's example does) and the first job's ``execute()``
  after them.

    python3 -m bench.startup [--parallelism 1 2 4 8 16] [--repeat 5] [--new-drivers 5] [--cold 3]
    python3 -m bench.startup --cold 1 --parallelism --new-drivers 0   # the cold start alone
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.w1 import settle_pool
from weir import StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed


def tiny_job(parallelism: int, name: str, task_cpus: float, records: int = 1000) -> tuple[float, float]:
    """(whole execute() seconds, the job's own duration)."""
    out = tempfile.mkdtemp(prefix="weir-startup-")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_task_cpus(task_cpus)
    env.enable_checkpointing(1000)
    (
        env.from_sequence(0, records - 1)
        .map(lambda i: (i % 10, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out, format="jsonl"))
    )
    started = time.perf_counter()
    result = env.execute(name)
    wall = time.perf_counter() - started
    assert sum(1 for _ in read_committed(out)) == records, "every update committed once"
    return wall, result.duration_s


_DRIVER = """
import json, sys, time
started = time.perf_counter()
import ray
from weir.actors.cluster import ensure_ray
from weir.actors.pool import get_pool, warm_pool
ensure_ray()
joined = time.perf_counter()
created = warm_pool(task_cpus=float(sys.argv[2]))["created"]["slots"]
warmed = time.perf_counter()
from bench.startup import tiny_job
wall, _ = tiny_job(2, sys.argv[1], float(sys.argv[2]))
waited = ray.get(get_pool().stats.remote())["created"]["slots"] - created
print("BENCH-RESULT", json.dumps({"ray": joined - started, "pool": warmed - joined, "execute": wall, "waited": waited}))
"""


def driver_process(name: str, env: dict[str, str], task_cpus: float) -> dict[str, float]:
    """A driver of its own: seconds to join (or start) Ray, and its first execute()."""
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "-c", _DRIVER, name, str(task_cpus)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-3000:])
    return json.loads(
        next(line for line in run.stdout.splitlines() if line.startswith("BENCH-RESULT")).split(" ", 1)[1]
    )


def _spread(label: str, samples: list[float]) -> str:
    return (
        f"{label} median {statistics.median(samples):.2f} s ({min(samples):.2f}-{max(samples):.2f}, n={len(samples)})"
    )


def new_drivers(count: int, address: str, task_cpus: float, settle_s: float) -> None:
    """Its jobs ask for what the notebook's did: the pool is warm for that shape."""
    env = {**os.environ, "RAY_ADDRESS": address}
    runs = []
    for i in range(count):
        settle_pool(settle_s)  # warm: the pool has started its fresh processes
        runs.append(driver_process(f"bench-new-driver-{i}", env, task_cpus))
    print(
        "new driver on a warm cluster, p=2: "
        + _spread("first execute()", [r["execute"] for r in runs])
        + "; "
        + _spread("joining Ray", [r["ray"] for r in runs]),
        flush=True,
    )


def cold(count: int, task_cpus: float) -> None:
    from tests.own_ray import own_ray_tmpdir

    runs = []
    for i in range(count):
        with own_ray_tmpdir() as own:  # a Ray of its own, stopped afterwards; the benchmark's own cluster stays
            env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {
                "RAY_TMPDIR": own,
                "RAY_ADDRESS": "local",
            }
            runs.append(driver_process(f"bench-cold-{i}", env, task_cpus))
    print(
        "cold start, p=2: "
        + _spread("Ray's start (ray.init)", [r["ray"] for r in runs])
        + "; "
        + _spread("then weir's processes (warm_pool)", [r["pool"] for r in runs])
        + "; "
        + _spread("then the first execute()", [r["execute"] for r in runs])
        + f", which started {max(r['waited'] for r in runs)} process(es)",
        flush=True,
    )


def warm(parallelisms: list[int], repeat: int, task_cpus: float, settle_s: float) -> None:
    """The table of first and later runs at each parallelism, on a warm cluster."""
    table = Table(
        title=f"start-up: 1,000-record keyed sum, FileSink, 1 s checkpoints ({os.cpu_count()} cores, warm cluster)"
    )
    for col in ("parallelism", "tasks", "execute() median (s)", "min", "max", "job duration median (s)"):
        table.add_column(col, justify="right")
    for p in parallelisms:
        tiny_job(p, f"bench-startup-p{p}-warmup", task_cpus)
        settle_pool(settle_s)
        runs = [tiny_job(p, f"bench-startup-p{p}-{i}", task_cpus) for i in range(repeat)]
        walls = [w for w, _ in runs]
        print(f"  parallelism {p}: execute() median {statistics.median(walls):.3f} s", flush=True)
        table.add_row(
            str(p),
            str(2 * p),
            f"{statistics.median(walls):.3f}",
            f"{min(walls):.3f}",
            f"{max(walls):.3f}",
            f"{statistics.median(d for _, d in runs):.3f}",
        )
    Console().print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--parallelism", type=int, nargs="*", default=[1, 2, 4, 8, 16], help="none: no rows on a warm cluster"
    )
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--task-cpus",
        type=float,
        default=0.03,
        help="Ray CPUs per task: 32 tasks (p=16) take 0.96 of 2 cores, leaving the 1 CPU the pool keeps free",
    )
    ap.add_argument(
        "--settle-s",
        type=float,
        default=6.0,
        help="after each warm-up (and before each new driver), wait until the slot pool started no task actor for this long",
    )
    ap.add_argument(
        "--new-drivers", type=int, default=5, help="driver processes joining the warm cluster, one after another"
    )
    ap.add_argument("--cold", type=int, default=3, help="drivers that each start a Ray cluster of their own")
    args = ap.parse_args()
    if args.cold:
        cold(args.cold, args.task_cpus)
    if args.parallelism:
        warm(args.parallelism, args.repeat, args.task_cpus, args.settle_s)
    if args.new_drivers:
        import ray

        new_drivers(args.new_drivers, ray.get_runtime_context().gcs_address, args.task_cpus, args.settle_s)


if __name__ == "__main__":
    main()

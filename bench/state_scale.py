"""State at scale: a keyed running count over K keys, with checkpoints every 1 s
and off, printed side by side in one run.

    python3 -m bench.state_scale [--records 4000000] [--keys 1000 1000000 4000000] [--repeat 3]
    python3 -m bench.state_scale --bytewax-python /tmp/bw/bin/python   # Bytewax's rows beside weir's
    python3 -m bench.state_scale --backend rocksdb   # keyed state in RocksDB instead of on the heap
    python3 -m bench.state_scale --restore   # then a job that restores the largest row's latest checkpoint
    python3 -m bench.state_scale --ttl 5000   # the count in a ValueState with a TTL, against one without

Record ``i`` goes to key ``i % K``, a keyed reduce counts, a discarding sink
takes the counts; parallelism 2 on a warm Ray cluster (a warm-up run fills the
slot pool). Each row: the whole ``execute()`` (records / its wall time) beside
the steady rate (first to last record any task saw); the checkpoints' duration
(mean, p99, max, and the final one's) and bytes written per checkpoint (mean,
and the mean of the full state they name). Then the issue's figures: 4M keys
with checkpoints against the same job without, and against 1,000 keys. With ``--bytewax-python``, Bytewax 0.21 runs the same
count (2 processes, its recovery store snapshotting every 1 s) beside each row with
checkpoints, as ``bench.versus`` runs it, once, stopped after ``--bytewax-timeout-s``.
With ``--ttl MS`` a ``KeyedProcessFunction`` counts in a ``ValueState`` instead of the
reduce, and each row runs twice with 1 s checkpoints: the state with a time to live
of MS (its background cleanup sweeping expired entries at each checkpoint), and
without one; then the TTL's cost at the largest key count.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from bench.versus import bytewax
from bench.w1 import settle_pool
from weir import (
    DiscardingSink,
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    KeyedProcessFunction,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    Types,
    ValueStateDescriptor,
)

BACKENDS = {"heap": HashMapStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}


class CountInValueState(KeyedProcessFunction):
    """The running count per key in a ``ValueState``, with a time to live of
    ``ttl_ms`` when given."""

    def __init__(self, ttl_ms: int | None) -> None:
        self.ttl_ms = ttl_ms

    def open(self, runtime_context: Any) -> None:
        descriptor = ValueStateDescriptor("count", Types.LONG())
        if self.ttl_ms:
            descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(self.ttl_ms)).build())
        self.count = runtime_context.get_state(descriptor)

    def process_element(self, value: Any, ctx: Any) -> Any:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value[0], count


def _worker_processes() -> list[psutil.Process]:
    """This machine's Ray worker processes (task actors, job coordinators)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        title = " ".join(proc.info["cmdline"] or [proc.info["name"] or ""])
        if title.startswith("ray::"):
            found.append(proc)
    return found


def _largest_rss(procs: list[psutil.Process]) -> int:
    """The largest resident set of ``procs`` (an upper bound on a task's), reading
    only their memory: listing every process costs 20 ms of CPU, which a sample a
    second took from the job it measured."""
    largest = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            largest = max(largest, proc.memory_info().rss)
    return largest


def run(
    n: int,
    keys: int,
    checkpoint_ms: int | None,
    backend: Any = None,
    storage: str | None = None,
    restore: str = "",
    value_state: tuple[int | None] | None = None,
) -> dict[str, Any]:
    """The keyed count; ``value_state=(ttl_ms,)`` counts in a ValueState (a TTL of
    ``ttl_ms``, or none) instead of the reduce."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
        if storage:
            env.get_checkpoint_config().set_checkpoint_storage(storage)
    if restore:
        env.restore_from_savepoint(restore)
    if backend is not None:
        env.set_state_backend(backend)
    keyed = env.from_sequence(0, n - 1).map(lambda i: (i % keys, 1)).key_by(lambda kv: kv[0])
    if value_state is None:
        keyed.reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(DiscardingSink())
    else:
        keyed.process(CountInValueState(*value_state)).sink_to(DiscardingSink())
    return measure(env, n, f"bench-state-{keys}-{'cp' if checkpoint_ms else 'nocp'}{'-restored' if restore else ''}")


def measure(env: StreamExecutionEnvironment, n: int, name: str) -> dict[str, Any]:
    """Run ``env``'s job of ``n`` records on Ray: its rates (whole execute() and
    steady), its completed checkpoints' durations and sizes, and the largest
    resident set of a Ray worker process, sampled once a second."""
    started = time.perf_counter()
    client = env.execute_async(name)
    seen: list[dict[str, Any]] = []
    rss = 0
    workers: list[psutil.Process] = []  # listed at the first sample, once the job's tasks run
    while True:  # once a second: polling 5 times a second took 4-8% of a core from the job it measured
        try:
            result = client.wait(1.0)  # returns as the job ends
            break
        except TimeoutError:
            seen = client.checkpoints() or seen
            workers = workers or _worker_processes()
            rss = max(rss, _largest_rss(workers))
    wall = time.perf_counter() - started
    try:
        seen = client.checkpoints() or seen
    except Exception:  # the job's record may be gone once it ended: keep what was seen
        pass
    done = [s for s in seen if s["status"] == "COMPLETED"]
    firsts = [m["first_record_at"] for m in result.metrics if m.get("first_record_at")]
    lasts = [m["last_record_at"] for m in result.metrics if m.get("last_record_at")]
    durations = sorted(s["duration_ms"] for s in done) or [0]
    return {
        "whole": n / wall,
        "wall": wall,
        "steady": n / (max(lasts) - min(firsts)) if firsts and lasts else 0.0,
        "checkpoints": len(done),
        "mean_ms": statistics.mean(durations),
        "p99_ms": durations[min(len(durations) - 1, int(len(durations) * 0.99))],
        "max_ms": durations[-1],
        "final_ms": done[-1]["duration_ms"] if done else 0,
        "written_mb": statistics.mean(s["size_bytes"] for s in done) / 1e6 if done else 0.0,
        "named_mb": statistics.mean(s.get("full_size_bytes", s["size_bytes"]) for s in done) / 1e6 if done else 0.0,
        "rss_gb": rss / 1e9,
        "restore_s": max((m.get("restore_s", 0.0) for m in result.metrics), default=0.0),
        "latest": done[-1]["location"] if done else "",
    }


def _restore_row(backend: Any, keys: int, latest: str, storage: str) -> None:
    """A 1,000-record job restores ``latest`` (the checkpoint of a ``keys`` row; its
    source is restored at its end, so it only loads state and finishes), beside the
    same job without the restore: the whole execute() of each, and the longest a
    task took to read its state."""
    if not latest:
        raise SystemExit(f"the {keys:,}-key row completed no checkpoint: there is nothing to restore")
    fresh = run(1_000, keys, 1000, backend, storage)
    restored = run(1_000, keys, 1000, backend, storage, restore=latest)
    print(
        f"restore of the latest checkpoint at {keys:,} keys: whole execute() {restored['wall']:.1f} s "
        f"(the same job without the restore: {fresh['wall']:.1f} s); a task read its state in "
        f"{restored['restore_s']:.1f} s at most; the first checkpoint after it took {restored['final_ms']:,} ms",
        flush=True,
    )


def _bytewax_row(args: argparse.Namespace, keys: int) -> tuple[str, ...]:
    try:
        wall = bytewax(args.bytewax_python, args.records, 2, True, keys, args.bytewax_timeout_s)
        rate = f"{args.records / wall:,.0f}"
    except subprocess.TimeoutExpired:
        rate = f"not done in {args.bytewax_timeout_s:,.0f} s"
    row = (f"{keys:,}", "Bytewax 0.21, 2 processes, snapshots every 1 s", rate, "-", "-", "-", "-", "-")
    print("  row:", " | ".join(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=4_000_000)
    ap.add_argument("--keys", type=int, nargs="+", default=[1_000, 1_000_000, 4_000_000])
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per row; the median (by whole execute()) and the range are printed"
    )
    ap.add_argument(
        "--checkpoints", choices=["both", "on"], default="both", help="also without checkpoints, or only every 1 s"
    )
    ap.add_argument("--bytewax-python", help="a Python with bytewax installed: its rows beside weir's")
    ap.add_argument("--bytewax-timeout-s", type=float, default=600)
    ap.add_argument("--backend", choices=sorted(BACKENDS), default="heap", help="where keyed state lives")
    ap.add_argument("--restore", action="store_true", help="then time a restore of the largest row's checkpoint")
    ap.add_argument("--ttl", type=int, metavar="MS", help="count in a ValueState with this TTL, against one without")
    ap.add_argument("--settle-s", type=float, default=6.0, help="after the warm-up, wait for the slot pool this long")
    args = ap.parse_args()
    storage = tempfile.mkdtemp(prefix="weir-bench-state-")
    try:
        _rows(args, storage)
    finally:
        shutil.rmtree(storage)


def _rows(args: argparse.Namespace, storage: str) -> None:
    backend = BACKENDS[args.backend]()
    console = Console(width=150)
    run(min(args.records, 100_000), 1_000, 1000)  # warm-up: fills the slot pool
    settle_pool(args.settle_s)
    table = Table(
        title=f"keyed running count, {args.records:,} records, parallelism 2 ({os.cpu_count()} cores), "
        f"{args.backend} state backend"
    )
    for col in (
        "keys",
        "checkpoints",
        "rec/s whole execute()",
        "rec/s steady",
        "ckpt ms mean / p99 / max",
        "final ckpt ms",
        "MB written / named per ckpt",
        "largest worker RSS GB",
    ):
        table.add_column(col, justify="right")
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for keys in args.keys:
        if args.ttl:  # (label, checkpoint interval, ValueState's TTL)
            variants = [(f"TTL {args.ttl:,} ms", 1000, (args.ttl,)), ("no TTL", 1000, (None,))]
        elif keys > 1_000 and args.checkpoints == "both":
            variants = [("on", 1000, None), ("off", None, None)]
        else:
            variants = [("on", 1000, None)]
        for label, cp, value_state in variants:
            runs = sorted(
                (run(args.records, keys, cp, backend, storage, value_state=value_state) for _ in range(args.repeat)),
                key=lambda r: r["whole"],
            )
            r = rows[keys, label] = runs[len(runs) // 2]
            spread = f" ({runs[0]['whole']:,.0f}–{runs[-1]['whole']:,.0f})" if len(runs) > 1 else ""
            when = f"every 1 s ({r['checkpoints']})" if cp else f"off ({r['checkpoints']} final)"
            row = (
                f"{keys:,}",
                when if value_state is None else f"{when}, {label}",
                f"{r['whole']:,.0f}{spread}",
                f"{r['steady']:,.0f}",
                f"{r['mean_ms']:,.0f} / {r['p99_ms']:,.0f} / {r['max_ms']:,.0f}",
                f"{r['final_ms']:,.0f}",
                f"{r['written_mb']:.1f} / {r['named_mb']:.1f}",
                f"{r['rss_gb']:.2f}",
            )
            table.add_row(*row)
            print("  row:", " | ".join(row), flush=True)
            if cp and args.bytewax_python and value_state is None:
                table.add_row(*_bytewax_row(args, keys))
    console.print(table)
    big, small = max(args.keys), min(args.keys)
    if (big, "on") in rows and (big, "off") in rows:
        console.print(
            f"{big:,} keys, 1 s checkpoints against checkpoints off (whole execute()): "
            f"{rows[big, 'on']['whole'] / rows[big, 'off']['whole']:.0%}"
        )
    if (big, "on") in rows and (small, "on") in rows and big != small:
        console.print(
            f"{big:,} keys against {small:,} keys, both with 1 s checkpoints (whole execute()): "
            f"{rows[big, 'on']['whole'] / rows[small, 'on']['whole']:.0%}"
        )
    if args.ttl:
        ttl, plain = rows[big, f"TTL {args.ttl:,} ms"], rows[big, "no TTL"]
        console.print(
            f"{big:,} keys, a ValueState with a TTL against one without (whole execute()): "
            f"{ttl['whole'] / plain['whole']:.0%}; checkpoint p99 {ttl['p99_ms']:,} ms against {plain['p99_ms']:,} ms"
        )
    if args.restore and (big, "on") in rows:
        _restore_row(backend, big, rows[big, "on"]["latest"], storage)


if __name__ == "__main__":
    main()

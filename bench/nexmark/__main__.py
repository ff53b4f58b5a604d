"""Nexmark on weir, beside the one-core Python floor and Flink: events/s over the
whole job, query by query.

    python3 -m bench.nexmark [--events 2000000] [--queries q0 q5 ...] [--parallelism 1 2] [--repeat 3]
                             [--data DIR] [--seed 0] [--flink-python PATH]

For each query:

- **floor**: the query as a plain Python loop over the same Parquet files
  (:mod:`bench.nexmark.reference`), reading them too, in this process: one core.
- **weir p=N**: the whole ``execute()`` on a warm Ray cluster (each query runs once
  at each parallelism on a small dataset first, then the slot pool is left to
  settle), checkpoints every 1 s, into an exactly-once sink whose output is then
  checked against the floor's result: exact, or the command fails. Beside it the
  steady rate: from the first record any task saw to the last one.
- **Flink p=N**: ``<flink python> -m bench.nexmark.flink_sql --data DIR --query qN
  --parallelism N`` in a subprocess, which prints one JSON line ``{"query",
  "parallelism", "events", "seconds"}`` (its seconds: from submitting the
  ``INSERT`` to the job's end; the JVM's start is not in them). ``--flink-python`` defaults to
  ``bench/.flink-venv/bin/python`` when it exists; otherwise the columns say "not run".

A rate is all the dataset's events (persons, auctions and bids) over the job's
seconds, whatever kinds the query reads (each engine reads only the kinds and
columns its query needs). Cells are the median of ``--repeat`` runs with their range.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from bench.nexmark import generator, queries, reference

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_FLINK_PYTHON = os.path.join(REPO, "bench", ".flink-venv", "bin", "python")
WARMUP_EVENTS = 20_000


@dataclass
class Cell:
    """The runs of one query on one engine: events/s over the whole job."""

    rates: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)
    note: str | None = None  # why there is no rate ("not run", "failed: ...")

    def text(self) -> str:
        if not self.rates:
            return self.note or "-"
        median = statistics.median(self.rates)
        out = f"{median:,.0f}"
        if len(self.rates) > 1:
            out += f" ({min(self.rates):,.0f}–{max(self.rates):,.0f})"
        if self.steady:
            out += f", steady {statistics.median(self.steady):,.0f}"
        return out


def flink_run(python: str, data: str, query: str, parallelism: int, timeout_s: float) -> tuple[float | None, str]:
    """One Flink run: (its seconds, "") or (None, why not). Its JSON's ``events``
    counts the rows of the tables the query reads; the table's rate divides all
    the dataset's events by the seconds, as for the floor and weir."""
    cmd = [python, "-m", "bench.nexmark.flink_sql", "--data", data, "--query", query, "--parallelism", str(parallelism)]
    try:
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"failed: no answer in {timeout_s:.0f} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"failed (exit {done.returncode}): {last[:80]}"
    return float(json.loads(lines[-1])["seconds"]), ""


def profile(query: str, data: str, events: int, top: int = 30) -> None:
    """The query in-process at parallelism 1 under cProfile: one profiler per
    thread (each task's loop runs in a thread of this process), summed."""
    import cProfile
    import pstats
    import threading

    profilers: list[cProfile.Profile] = []

    def start(*_: object) -> None:  # the first event of a new thread: profile it from here on
        sys.setprofile(None)
        profiler = cProfile.Profile()
        profilers.append(profiler)
        profiler.enable()

    out = tempfile.mkdtemp(prefix="weir-nexmark-profile-")
    main_thread = cProfile.Profile()
    profilers.append(main_thread)
    threading.setprofile(start)
    started = time.perf_counter()
    main_thread.enable()
    try:
        queries.run(query, queries.ParquetInput(data), 1, out, executor="local")
    finally:
        main_thread.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
        shutil.rmtree(out, ignore_errors=True)
    seconds = time.perf_counter() - started
    print(f"\n{query} in-process at parallelism 1: {seconds:.1f} s, {events / seconds:,.0f} events/s, all threads:")
    stats = pstats.Stats(profilers[0])
    for p in profilers[1:]:
        p.create_stats()
        if p.stats:  # type: ignore[attr-defined]
            stats.add(p)
    stats.sort_stats("tottime").print_stats(top)


def settle(quiet_s: float) -> None:
    from bench.w1 import settle_pool

    settle_pool(quiet_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", help="the generator's folder (made or reused); default /tmp/weir-nexmark-<events>-<seed>")
    ap.add_argument("--queries", nargs="+", default=list(queries.QUERIES), choices=list(queries.QUERIES))
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--flink-python",
        default=DEFAULT_FLINK_PYTHON if os.path.exists(DEFAULT_FLINK_PYTHON) else "",
        help="the Python that runs bench.nexmark.flink_sql; empty: the Flink columns say 'not run'",
    )
    ap.add_argument("--flink-timeout-s", type=float, default=1800)
    ap.add_argument("--settle-s", type=float, default=6.0, help="after the warm-ups, wait for the slot pool this long")
    ap.add_argument("--executor", choices=["ray", "local"], default="ray", help="local: in-process, no Ray (a check)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="instead: run each query once in-process (parallelism 1) under cProfile and print where the time goes",
    )
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    data = args.data or os.path.join(tempfile.gettempdir(), f"weir-nexmark-{args.events}-{args.seed}")
    started = time.perf_counter()
    meta = generator.write(data, args.events, generator.GeneratorConfig(seed=args.seed))
    console.print(f"data: {data}, {args.events:,} events {meta['counts']} ({time.perf_counter() - started:.1f} s)")
    if args.profile:
        for q in args.queries:
            profile(q, data, args.events)
        return
    executor = None if args.executor == "ray" else "local"
    scratch = tempfile.mkdtemp(prefix="weir-nexmark-out-")

    def weir(query: str, source: queries.Input, p: int) -> queries.Run:
        out = tempfile.mkdtemp(dir=scratch)
        try:
            return queries.run(query, source, p, out, executor=executor)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    if executor is None:
        warm = os.path.join(tempfile.gettempdir(), f"weir-nexmark-{WARMUP_EVENTS}-{args.seed}")
        generator.write(warm, WARMUP_EVENTS, generator.GeneratorConfig(seed=args.seed))
        for p in args.parallelism:  # fill the slot pool with each job's shape
            for q in args.queries:
                weir(q, queries.ParquetInput(warm), p)
        settle(args.settle_s)

    engines = ["floor"] + [f"weir p={p}" for p in args.parallelism] + [f"Flink p={p}" for p in args.parallelism]
    table: dict[str, dict[str, Cell]] = {q: {e: Cell() for e in engines} for q in args.queries}
    verdicts: dict[str, str] = {}
    failed = False
    for q in args.queries:
        expected = None
        for _ in range(args.repeat):
            expected, seconds = reference.floor(q, data)
            table[q]["floor"].rates.append(args.events / seconds)
        for p in args.parallelism:
            cell = table[q][f"weir p={p}"]
            for _ in range(args.repeat):
                result = weir(q, queries.ParquetInput(data), p)
                try:
                    verdicts[q] = reference.check(q, result.output, expected)
                except reference.OutputMismatch as exc:
                    console.print(f"[red]{q} at parallelism {p}: weir's output is wrong[/red]: {exc}")
                    failed = True
                cell.rates.append(args.events / result.seconds)
                if result.steady_s:
                    cell.steady.append(args.events / result.steady_s)
            fl = table[q][f"Flink p={p}"]
            if not args.flink_python:
                fl.note = "not run"
                continue
            for _ in range(args.repeat):
                seconds, why = flink_run(args.flink_python, data, q, p, args.flink_timeout_s)
                if seconds is None:
                    fl.note = why
                    break
                fl.rates.append(args.events / seconds)
        row = " | ".join(f"{e} {table[q][e].text()}" for e in engines)
        print(f"  {q}: {row} | {verdicts.get(q, '')}", flush=True)  # as it comes: a cut-off run keeps its rows

    title = (
        f"Nexmark, {args.events:,} events (seed {args.seed}), events/s over the whole job, "
        f"median of {args.repeat} (range); {os.cpu_count()} cores"
    )
    out = Table(title=title)
    out.add_column("query")
    for e in engines:
        out.add_column(e, justify="right")
    out.add_column("weir's output")
    for q in args.queries:
        out.add_row(q, *(table[q][e].text() for e in engines), verdicts.get(q, "-"))
    console.print(out)
    print("\nas markdown:\n")
    print("| query | " + " | ".join(engines) + " | weir's output |")
    print("|---|" + "---:|" * len(engines) + "---|")
    for q in args.queries:
        print(f"| {q} | " + " | ".join(table[q][e].text() for e in engines) + f" | {verdicts.get(q, '-')} |")
    shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

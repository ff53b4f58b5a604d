"""Nexmark's queries on Ray through killed task actors: each query's result exact.

    python3 -m bench.nexmark.kills [--queries q0 q5 ...] [--kills 3] [--parallelism 2] [--seed 1]

Each query runs on its own, on a Ray cluster (``RAY_ADDRESS``, or one started
here), over the generator's first 72,000 events (seed 13, 144 s of event time)
made in-process and paced to 9,000 events per second of wall time, so that the
job lasts about 8 s with its windows firing all along. Each time a checkpoint has
completed since the last restart began, a random task of the job dies (``ray.kill`` or
SIGKILL of its process), ``--kills`` times; then the job runs to its end and what
its exactly-once sink committed is checked against the plain-Python reference on
the same events (q12's processing-time windows of 1 s: no bid counted more often
than the data holds it). One line per query; the command fails on any mismatch.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import dataclass

from bench.nexmark import generator, queries, reference
from tests.chaos import kill_random_task
from weir import JobStatus, RestartStrategy

CONFIG = generator.GeneratorConfig(seed=13, events_per_second=500)  # 72,000 events: 144 s of event time
EVENTS = 72_000
WALL_RATE = 9_000  # events per second of wall time
Q12_WINDOW_MS = 1_000  # q12's processing-time windows: short enough to fire during the job
KILL_WITHIN_S = 60  # from the job's start, or the last kill, to the next kill


@dataclass
class Killed:
    query: str
    killed: list[str]
    restarts: int
    seconds: float
    verdict: str


def _completed(client) -> int:
    return max((c["checkpoint_id"] for c in client.checkpoints() if c["status"] == "COMPLETED"), default=0)


def through_kills(
    query: str, data: str, parallelism: int, kills: int, seed: int, out: str, checkpoint_storage: str
) -> Killed:
    """Run ``query`` on Ray, kill ``kills`` random tasks of it (each once a checkpoint
    completed since the last restart began), and check its committed output against the
    reference on ``data`` (the same events as Parquet, :func:`generator.write`);
    :class:`reference.OutputMismatch` if it differs."""
    rng = random.Random(seed)
    source = queries.GeneratedInput(EVENTS, CONFIG, events_per_second=WALL_RATE)
    options = {"window_ms": Q12_WINDOW_MS} if query == "q12" else {}
    env = queries.build(query, source, parallelism, out, checkpoint_storage, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(2 * kills, 0.2))
    started = time.perf_counter()
    client = env.execute_async(f"nexmark-{query}-kills-{time.time_ns()}", executor="ray")
    killed: list[str] = []
    seen = 0  # the last checkpoint completed before the job (re)started
    restarting = False  # a kill's failover not yet begun: a second kill would land in the same restart
    # Each kill must come within a minute of the one before (its restart and a
    # checkpoint after it): a job that stops making progress fails, while one that
    # restarts slowly on a loaded machine (fresh processes for the killed tasks) does not.
    deadline = time.monotonic() + KILL_WITHIN_S
    while len(killed) < kills:
        assert time.monotonic() < deadline, f"{query}: killed only {killed}, no next kill within {KILL_WITHIN_S} s"
        assert not client.status().is_terminal, f"{query}: the job ended after only {killed}"
        if restarting:
            if client.restarts() >= len(killed):
                restarting, seen = False, _completed(client)
        elif _completed(client) > seen and client.status() is JobStatus.RUNNING:
            victim = kill_random_task(client, rng)
            if victim is not None:
                killed.append(victim)
                restarting = True
                deadline = time.monotonic() + KILL_WITHIN_S
        time.sleep(rng.uniform(0.1, 0.4))
    result = client.wait(120)
    seconds = time.perf_counter() - started
    assert result.restarts >= kills, (query, killed, result.restarts)
    output = queries.read_output(out)
    if query == "q12" and not output:
        raise reference.OutputMismatch("q12: no processing-time window fired")
    verdict = reference.check(query, output, reference.QUERIES[query](data), window_ms=Q12_WINDOW_MS)
    return Killed(query, killed, result.restarts, seconds, verdict)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", nargs="+", default=list(queries.QUERIES), choices=list(queries.QUERIES))
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-nexmark-kills-") as tmp:
        data = f"{tmp}/data"
        generator.write(data, EVENTS, CONFIG)
        print(f"{EVENTS:,} events at {WALL_RATE:,}/s, parallelism {args.parallelism}, {args.kills} kills each")
        failed = []
        for query in args.queries:
            try:
                run = through_kills(
                    query, data, args.parallelism, args.kills, args.seed, f"{tmp}/{query}", f"file://{tmp}/ck-{query}"
                )
            except reference.OutputMismatch as exc:
                failed.append(query)
                print(f"{query}: MISMATCH {exc}", flush=True)
                continue
            print(
                f"{query}: {run.verdict}; {run.restarts} restarts in {run.seconds:.1f} s; killed {run.killed}",
                flush=True,
            )
    if failed:
        raise SystemExit(f"not exact through kills: {' '.join(failed)}")


if __name__ == "__main__":
    main()

"""The main example: a keyed running sum, checkpointed, written exactly once.

    python examples/keyed_sum.py [--records 2000000] [--output /tmp/weir-keyed-sum]

Starts a local Ray cluster (or joins the one in RAY_ADDRESS) with weir's
processes up (``weir pool start`` does the same for a ``ray start`` cluster),
runs the job, and checks the committed output against the sums computed in
plain Python. It prints the job's records/s over its whole ``execute()``; the
cluster's start is timed apart.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import time

from weir import StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--output", default="/tmp/weir-keyed-sum")
    ap.add_argument("--parallelism", type=int, default=2)
    args = ap.parse_args()
    shutil.rmtree(args.output, ignore_errors=True)
    if os.environ.get("WEIR_EXECUTOR", "ray") == "ray":  # the cluster's start, before the job's clock starts
        from weir.actors.pool import warm_pool

        started = time.perf_counter()
        warm_pool()  # joins Ray (or starts it), with weir's task actors and a job coordinator up
        print(f"cluster ready in {time.perf_counter() - started:.1f} s")

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(500)  # ms; storage: a local folder by default, any pyarrow.fs URI
    (
        env.from_sequence(0, args.records - 1)
        .map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(args.output, format="jsonl"))
    )
    started = time.perf_counter()
    result = env.execute("keyed-sum")  # blocks; execute_async() returns a JobClient
    wall_s = time.perf_counter() - started

    final: dict[int, int] = {}
    for key, total in read_committed(args.output):
        final[key] = max(final.get(key, 0), total)
    expected: dict[int, int] = collections.defaultdict(int)
    for i in range(args.records):
        expected[i % 1000] += 2 * i
    print(
        f"job {result.job_name}: {result.status.value} in {wall_s:.1f} s, {args.records / wall_s / 1e6:.2f} M records/s, "
        f"{result.completed_checkpoints} checkpoints, {result.restarts} restarts"
    )
    print(f"final sums of {len(final)} keys match plain Python: {final == dict(expected)}")
    if final != dict(expected):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""How late a bounded job ends: time from its last record to ``execute()`` returning,
for checkpoint intervals of 1 s, 5 s and 30 s. weir triggers the final checkpoint
as soon as every source has finished, so this should not grow with the interval
(Flink waits for the next periodic checkpoint).

    python3 -m bench.finish [--records 1000000] [--intervals 1000 5000 30000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from rich.console import Console
from rich.table import Table

from weir import StreamExecutionEnvironment
from weir.connectors.files import FileSink


def run(records: int, interval_ms: int) -> tuple[float, float, int]:
    out = tempfile.mkdtemp(prefix="weir-finish-")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    (
        env.from_sequence(0, records - 1)
        .map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out))
    )
    started = time.time()
    result = env.execute(f"bench-finish-{interval_ms}")
    returned = time.time()
    shutil.rmtree(out, ignore_errors=True)
    last = max(
        m["last_record_at"] for m in result.metrics if m["task"].startswith("source") and m.get("last_record_at")
    )
    return returned - started, returned - last, result.completed_checkpoints


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--intervals", type=int, nargs="+", default=[1000, 5000, 30000])
    args = ap.parse_args()
    table = Table(title=f"Bounded keyed-sum job, {args.records:,} records, FileSink, parallelism 2")
    for col in ("checkpoint interval", "job wall time (s)", "last record -> execute() returned (s)", "checkpoints"):
        table.add_column(col, justify="right")
    for interval in args.intervals:
        wall, tail, checkpoints = run(args.records, interval)
        table.add_row(f"{interval / 1000:g} s", f"{wall:.2f}", f"{tail:.3f}", str(checkpoints))
    Console().print(table)


if __name__ == "__main__":
    main()

"""Events/s for a tumbling-window count over 1,000 keys (event time, 1 s windows,
bounded out-of-orderness watermarks) at parallelism 2 with checkpoints every 1 s.

    python3 -m bench.windows [--events 2000000] [--parallelism 2]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console

from weir import (
    AggregateFunction,
    DiscardingSink,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)


class Count(AggregateFunction):
    def create_accumulator(self):  # type: ignore[no-untyped-def]
        return 0

    def add(self, value, acc):  # type: ignore[no-untyped-def]
        return acc + 1

    def get_result(self, acc):  # type: ignore[no-untyped-def]
        return acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--parallelism", type=int, default=2)
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(args.parallelism)
    env.enable_checkpointing(1000)
    ws = WatermarkStrategy.for_bounded_out_of_orderness(Time.seconds(1)).with_timestamp_assigner(lambda e: e[1])
    # 1,000 events per millisecond of event time: each 1 s window of a key holds 1,000 events.
    (
        env.from_generator(lambda i: (i % 1000, i // 1000), count=args.events, watermark_strategy=ws)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .aggregate(Count())
        .sink_to(DiscardingSink())
    )
    started = time.perf_counter()
    result = env.execute("bench-windows")
    wall = time.perf_counter() - started
    firsts = [m["first_record_at"] for m in result.metrics if m.get("first_record_at")]
    lasts = [m["last_record_at"] for m in result.metrics if m.get("last_record_at")]
    rate = args.events / (max(lasts) - min(firsts))
    Console().print(
        f"tumbling 1 s event-time window count, 1,000 keys, parallelism {args.parallelism}, checkpoints every 1 s: "
        f"{rate:,.0f} events/s ({args.events:,} events, {result.completed_checkpoints} checkpoints, job wall time {wall:.1f} s)"
    )


if __name__ == "__main__":
    main()

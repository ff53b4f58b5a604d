"""q11's session window operator alone: records/s of the window operator on
Nexmark's bids, batch by batch, with no job around it (no source, exchange, sink
or checkpoint), beside the same operator forced onto its per-record path.

    python3 -m bench.nexmark.sessions [--events 500000] [--batch 1000] [--repeat 3]

The operator is the one q11 builds (session windows of 10 s per bidder, counting
bids, ``WindowBounds`` as the window function), fed through an
``OperatorHarness`` in batches of ``--batch`` bids in event order with a
watermark 4 s behind the newest bid after each batch, as q11's source sends
them. "per record" is the same operator with a trigger that behaves as the
default one but is a custom trigger, which keeps a session window on the
per-record path. Both must give the same windows; each run checks that.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.nexmark import generator
from bench.nexmark.queries import CountBids, WindowBounds
from bench.nexmark.reference import SIZE_MS
from weir import DiscardingSink, EventTimeSessionWindows, EventTimeTrigger, StreamExecutionEnvironment
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.testing import OperatorHarness

DELAY_MS = 4_000  # q11's watermarks: 4 s behind the newest bid


class SameAsDefault(EventTimeTrigger):
    """The default trigger's behaviour as a custom trigger: the per-record path."""


def operator(per_record: bool) -> Any:
    """The window operator q11's job builds."""
    env = StreamExecutionEnvironment.get_execution_environment()
    windowed = (
        env.from_collection([{"bidder": 0}])
        .key_by(lambda b: b["bidder"])
        .window(EventTimeSessionWindows.with_gap(SIZE_MS))
    )
    if per_record:
        windowed = windowed.trigger(SameAsDefault())
    windowed.aggregate(CountBids(), window_function=WindowBounds()).sink_to(DiscardingSink())
    (spec,) = [op for v in env.get_job_graph("q11").vertices.values() for op in v.operators if "indow" in op.name]
    return spec.create()


def bids(events: int) -> list[dict[str, int]]:
    table = generator.tables(generator.GeneratorConfig(), 0, events)["bid"].select(["bidder", "dateTime"])
    return table.to_pylist()


def run(data: list[dict[str, int]], batch: int, per_record: bool) -> tuple[float, list[Any]]:
    """Seconds to window ``data``, and the windows."""
    h = OperatorHarness(operator(per_record))
    out: list[Any] = []
    started = time.perf_counter()
    for i in range(0, len(data), batch):
        part = data[i : i + batch]
        stamps = [b["dateTime"] for b in part]
        out += h.process(*part, timestamps=stamps)
        out += h.watermark(max(stamps) - DELAY_MS)
    out += h.watermark(MAX_WATERMARK)
    return time.perf_counter() - started, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    data = bids(args.events)
    results = {}
    for per_record in (True, False) * args.repeat:  # alternating, so that a busy spell hits both
        seconds, out = run(data, args.batch, per_record)
        results.setdefault(per_record, []).append((len(data) / seconds, sorted(out)))
    (_, slow), (_, fast) = results[True][0], results[False][0]
    assert fast == slow, "the batched path's windows differ from the per-record path's"
    print(f"q11's window operator alone, {len(data):,} bids in batches of {args.batch:,}, {len(fast):,} sessions:")
    for per_record, name in ((True, "per record"), (False, "by batch")):
        rates = [r for r, _ in results[per_record]]
        print(f"  {name}: {statistics.median(rates):,.0f} records/s ({min(rates):,.0f}-{max(rates):,.0f})")


if __name__ == "__main__":
    main()

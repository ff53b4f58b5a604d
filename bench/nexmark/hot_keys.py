"""q5 and q7 with many more keys, on the heap and on RocksDB: the largest worker's
memory and the checkpoints' durations, beside the rate.

    python3 -m bench.nexmark.hot_keys [--events 2000000] [--scale 100] [--queries q5 q7]
                                      [--backends heap rocksdb] [--parallelism 2] [--repeat 1]

The generator runs with ``--scale`` times Nexmark's in-flight auctions (100) and
active people (1,000): bids spread over that many more auctions and bidders, so
q5's sliding windows keep a count per auction for that many more auctions. Each
query reads the Parquet files on a warm Ray cluster with checkpoints every second
into an exactly-once sink, and its output is checked against the plain-Python
reference (exact, or the command fails). Each row: events/s over the whole
``execute()`` and steady, the completed checkpoints' duration (mean / p99 / max)
and size, and the largest resident set of any Ray worker process (sampled once a
second), median of ``--repeat`` runs by rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time

from bench.nexmark import generator, queries, reference
from bench.state_scale import BACKENDS, measure
from bench.w1 import settle_pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--scale", type=int, default=100, help="times Nexmark's in-flight auctions and active people")
    ap.add_argument("--queries", nargs="+", default=["q5", "q7"], choices=list(queries.QUERIES))
    ap.add_argument("--backends", nargs="+", default=["heap", "rocksdb"], choices=sorted(BACKENDS))
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--data", help="the generator's folder (made or reused)")
    args = ap.parse_args()
    base = generator.GeneratorConfig()
    cfg = dataclasses.replace(
        base,
        num_in_flight_auctions=base.num_in_flight_auctions * args.scale,
        num_active_people=base.num_active_people * args.scale,
    )
    data = args.data or os.path.join(tempfile.gettempdir(), f"weir-nexmark-{args.events}-x{args.scale}")
    generator.write(data, args.events, cfg)
    print(
        f"{args.events:,} events, {cfg.num_in_flight_auctions:,} auctions in flight and "
        f"{cfg.num_active_people:,} active people ({args.scale}x Nexmark's), parallelism {args.parallelism}",
        flush=True,
    )
    scratch = tempfile.mkdtemp(prefix="weir-nexmark-hot-")
    try:
        warm = queries.GeneratedInput(20_000, cfg)
        for query in args.queries:  # warm-ups: the slot pool holds the tasks' processes
            measure(queries.build(query, warm, args.parallelism, f"{scratch}/warm-{query}"), 20_000, "warm-up")
        settle_pool()
        for query in args.queries:
            expected = reference.QUERIES[query](data)
            for backend in args.backends:
                runs = []
                for i in range(args.repeat):
                    out, storage = f"{scratch}/{query}-{backend}-{i}", f"file://{scratch}/ck-{query}-{backend}-{i}"
                    env = queries.build(query, queries.ParquetInput(data), args.parallelism, out, storage)
                    env.set_state_backend(BACKENDS[backend]())
                    r = measure(env, args.events, f"nexmark-{query}-{backend}-x{args.scale}-{time.time_ns()}")
                    r["verdict"] = reference.check(query, queries.read_output(out), expected)
                    runs.append(r)
                runs.sort(key=lambda r: r["whole"])
                r = runs[len(runs) // 2]
                spread = f" ({runs[0]['whole']:,.0f}–{runs[-1]['whole']:,.0f})" if len(runs) > 1 else ""
                print(
                    f"{query} {backend}: {r['whole']:,.0f}{spread} events/s whole execute(), steady {r['steady']:,.0f}; "
                    f"{r['checkpoints']} checkpoints, ms mean / p99 / max {r['mean_ms']:,.0f} / {r['p99_ms']:,.0f} / "
                    f"{r['max_ms']:,.0f}, {r['written_mb']:.1f} MB written each; largest worker RSS "
                    f"{r['rss_gb']:.2f} GB; {r['verdict']}",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

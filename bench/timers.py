"""Timers under an inactivity timeout: per record, a key's timer is deleted and
registered again (``python3 -m bench.timers``). Prints records/s and RSS growth
on both backends over ``--records`` (10 M by default; many keys), then the RSS
of ``--live`` (1 M) live timers on each backend. The loop is what a keyed
process function's timer calls come to: touch the key, delete, register; a
watermark every batch of 1,000 fires what is due (nothing: the timeouts move)."""

from __future__ import annotations

import argparse
import gc
import os
import time

from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBSettings
from weir.runtime.state import KeyedStateBackend
from weir.runtime.timers import InternalTimerService, TimeDomain

MAX_P, BATCH = 128, 1_000
EVENT = TimeDomain.EVENT_TIME


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def backend(kind: str) -> KeyedStateBackend:
    groups = KeyGroupRange(0, MAX_P)
    if kind == "heap":
        return KeyedStateBackend(MAX_P, groups)
    return RocksDBKeyedStateBackend(MAX_P, groups, RocksDBSettings(), f"bench-{kind}", "timers", "timers")


def inactivity(kind: str, records: int, keys: int) -> None:
    b = backend(kind)
    timers = InternalTimerService(b)
    gap = 2 * keys  # a key's next record comes ``keys`` ms later: its timeout never fires
    warm = 2 * keys  # records until every key has its live timer: RSS growth counts from there
    before = 0.0
    start = time.perf_counter()
    for first in range(0, records, BATCH):
        if first == warm:
            gc.collect()
            before = rss_mb()
        for t in range(first, first + BATCH):
            b.touch(t % keys)
            timers.delete(EVENT, t - keys + gap)
            timers.register(EVENT, t + gap)
        fired = sum(1 for _ in timers.due(EVENT, first + BATCH))
        assert fired == 0
    seconds = time.perf_counter() - start
    gc.collect()
    print(
        f"{kind:8} inactivity: {records:,} records, {keys:,} keys: {records / seconds / 1e3:,.0f} k records/s, "
        f"RSS after {warm:,} records {before:,.0f} MB, at the end {rss_mb():,.0f} MB ({rss_mb() - before:+,.0f} MB)"
    )
    b.close()


def live(kind: str, n: int) -> None:
    gc.collect()
    before = rss_mb()
    b = backend(kind)
    timers = InternalTimerService(b)
    for t in range(n):
        b.touch(t)
        timers.register(EVENT, n + t)
    assert timers.next_time(EVENT) == n  # RocksDB: written back, one head per key group read
    gc.collect()
    print(f"{kind:8} {n:,} live timers: RSS +{rss_mb() - before:,.0f} MB")
    b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=1_000_000)
    args = parser.parse_args()
    for kind in ("heap", "rocksdb"):
        inactivity(kind, args.records, args.keys)
    for kind in ("rocksdb", "heap"):  # RocksDB first: the heap's memory is not all given back
        live(kind, args.live)


if __name__ == "__main__":
    main()

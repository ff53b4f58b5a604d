"""The timer service of keyed operators (weir.runtime.timers) on both backends: a
deleted timer is gone at once (the usual inactivity timeout, which deletes and
registers a timer for every record, stores only its live timers), registering
is idempotent, timers fire in time order (negative times too) with ties in a
fixed order, a timer registered while firing fires if due, clear drops them
all, timers survive checkpoints and rescaling 2 -> 3 -> 1 (also between
backends), and a RocksDB restore of 100,000 timers holds one per key group in
memory, not all of them."""

from __future__ import annotations

import pytest

from tests.unit.pure.test_incremental import MAX_P, _owner
from tests.unit.pure.test_rocksdb_backend import BACKENDS, MATERIALIZING, _close, _rocks, _Storage, stored_timers
from weir.runtime.events import MAX_WATERMARK, MIN_WATERMARK
from weir.runtime.incremental import merged
from weir.runtime.timers import InternalTimerService, TimeDomain

EVENT = TimeDomain.EVENT_TIME
KEYS, GAP = 100, 10_000


def _count(backend) -> int:
    return sum(map(len, stored_timers(backend, "_timers/event").values()))


def _fire(timers: InternalTimerService, time: int) -> list[tuple[int, object, object]]:
    return list(timers.due(EVENT, time))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timer_moved_by_every_record_is_deleted_at_once_and_only_the_last_fires(backend):
    b = BACKENDS[backend](1, 0)
    timers = InternalTimerService(b)
    n = 20_000
    for start in range(0, n, 1_000):
        for t in range(start, start + 1_000):
            b.touch(t % KEYS)
            timers.delete(EVENT, t - KEYS + GAP)  # the key's previous record's timeout
            timers.register(EVENT, t + GAP)
        assert timers.next_time(EVENT) == start + 1_000 - KEYS + GAP
        assert _count(b) == KEYS, "a deleted timer stays stored"
        if backend == "heap":
            queue = b.timers("_timers/event")
            assert len(queue._timers) == len(queue._places) == KEYS, "a deleted timer stays in memory"
    assert _fire(timers, n + GAP) == [(t + GAP, t % KEYS, None) for t in range(n - KEYS, n)]
    assert _count(b) == 0 and timers.next_time(EVENT) is None
    _close([b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_timers_fire_in_time_order_once_each_with_ties_in_a_fixed_order(backend):
    b = BACKENDS[backend](1, 0)
    timers = InternalTimerService(b)
    stamps = [5, MIN_WATERMARK, -3, 0, MAX_WATERMARK, 1 << 40, -(1 << 40)]
    ties = [(2, "w"), (0, None), (1, None), (0, "w"), (2, None)]
    for key, ts in enumerate(stamps, start=10):
        b.touch(key)
        timers.register(EVENT, ts)
    for key, ns in ties:
        b.touch(key)
        timers.register(EVENT, 7, ns)
        timers.register(EVENT, 7, ns)  # idempotent
    fired = _fire(timers, MAX_WATERMARK)
    assert [ts for ts, _, _ in fired] == sorted(stamps + [7] * len(ties))
    order = {"heap": ties, "rocksdb": [(0, None), (0, "w"), (1, None), (2, None), (2, "w")]}[backend]
    assert [(k, ns) for ts, k, ns in fired if ts == 7] == order  # heap: as registered; RocksDB: by key bytes
    assert _fire(timers, MAX_WATERMARK) == [] and _count(b) == 0
    _close([b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timer_registered_while_firing_fires_in_the_same_pass_if_due(backend):
    b = BACKENDS[backend](1, 0)
    timers = InternalTimerService(b)
    b.touch("a")
    timers.register(EVENT, 10)
    fired = []
    for ts, key, _ in timers.due(EVENT, 100):
        fired.append((ts, key))
        b.touch(key)
        if ts == 10:
            timers.register(EVENT, 5, key="b")  # already past: fires next
            timers.register(EVENT, 50)  # due: fires after it
            timers.register(EVENT, 500)  # not due
    assert fired == [(10, "a"), (5, "b"), (50, "a")]
    assert timers.next_time(EVENT) == 500 and _count(b) == 1
    _close([b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_earlier_timer_registered_after_a_read_comes_first(backend):
    b = BACKENDS[backend](1, 0)
    timers = InternalTimerService(b)
    b.touch("a")
    timers.register(EVENT, 10)
    assert timers.next_time(EVENT) == 10  # RocksDB: now the head of "a"'s key group
    timers.register(EVENT, 7)
    assert timers.next_time(EVENT) == 7
    timers.delete(EVENT, 7)
    timers.register(EVENT, 8)
    assert _fire(timers, 100) == [(8, "a", None), (10, "a", None)]
    _close([b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_clear_drops_every_timer_even_at_the_end_of_time(backend):
    b = BACKENDS[backend](1, 0)
    timers = InternalTimerService(b)
    for key in range(50):
        b.touch(key)
        timers.register(EVENT, MAX_WATERMARK if key % 2 else key)
    assert _count(b) == 50
    timers.clear(EVENT)
    assert _count(b) == 0 and timers.next_time(EVENT) is None and _fire(timers, MAX_WATERMARK) == []
    _close([b])


def _register_timers(backends, p: int) -> dict:
    """Each key's timers (two namespaces, one deleted again): what should fire."""
    expected = {}
    for key in range(300):
        b = backends[_owner(key, p)]
        b.touch(key)
        timers = InternalTimerService(b)
        timers.register(EVENT, 1_000 - key, "a")
        timers.register(EVENT, 2_000 + key, "b")
        timers.register(EVENT, 3_000 + key)
        timers.delete(EVENT, 3_000 + key)
        expected[key] = [(1_000 - key, key, "a"), (2_000 + key, key, "b")]
    return expected


@pytest.mark.parametrize("before", BACKENDS)
@pytest.mark.parametrize("after", BACKENDS)
def test_timers_restore_and_rescale_2_to_3_to_1_on_either_backend(before, after, tmp_path):
    storage = _Storage(tmp_path)
    two = [BACKENDS[before](2, i) for i in range(2)]
    expected = _register_timers(two, 2)
    chains = [[storage.checkpoint(b, i, 1, None)] for i, b in enumerate(two)]
    three = [BACKENDS[after](3, i) for i in range(3)]
    for i, b in enumerate(three):
        b.restore([(two[j].key_groups, merged(chains[j])) for j in range(2)])
        timers = InternalTimerService(b)
        early = _fire(timers, 1_000 - 150)  # the earlier half of the "a" timers fire now, on 3 subtasks
        assert sorted(early) == sorted(t for k, ts in expected.items() if _owner(k, 3) == i for t in ts[:1] if k >= 150)
    snaps = [storage.checkpoint(b, i, 2, None) for i, b in enumerate(three)]
    one = BACKENDS[before](1, 0)
    one.restore([(three[j].key_groups, snaps[j]) for j in range(3)])
    rest = _fire(InternalTimerService(one), MAX_WATERMARK)
    assert rest == sorted((t for k, ts in expected.items() for t in ts if t[0] > 1_000 - 150), key=lambda t: t[0])
    _close(two + three + [one])


def test_a_rocksdb_restore_of_100k_timers_holds_one_per_key_group_in_memory(tmp_path):
    n = 100_000
    b = _rocks(1, 0, MATERIALIZING)
    timers = InternalTimerService(b)
    for key in range(n):
        b.touch(key)
        timers.register(EVENT, key % 1_000)
    snap = _Storage(tmp_path).checkpoint(b, 0, 1, None)
    restored = _rocks(1, 0)
    restored.restore([(b.key_groups, snap)])
    timers = InternalTimerService(restored)
    assert timers.next_time(EVENT) == 0
    queue = restored.timers("_timers/event")
    assert len(queue._head) == MAX_P and not queue.pending, "timers read into memory at the restore"
    fired = _fire(timers, 0)
    assert sorted(k for _, k, _ in fired) == list(range(0, n, 1_000))
    assert len(queue._head) <= MAX_P and _count(restored) == n - n // 1_000
    _close([b, restored])

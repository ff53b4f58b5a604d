"""The timer service of keyed operators (weir.runtime.timers): a deleted timer
never fires, and deleting and registering a timer for every record (the usual
inactivity timeout) keeps memory in proportion to the live timers."""

from __future__ import annotations

from weir import KeyedProcessFunction
from weir.runtime.testing import OperatorHarness
from weir.runtime.timers import TimeDomain

KEYS, GAP = 100, 10_000


class InactivityTimeout(KeyedProcessFunction):
    """Each record of a key moves its timeout: the timer of the key's previous
    record (``KEYS`` ms before, in this input) is deleted and a new one registered."""

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        timers.delete_event_time_timer(ctx.timestamp() - KEYS + GAP)
        timers.register_event_time_timer(ctx.timestamp() + GAP)
        return ()

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp


def test_a_timer_moved_by_every_record_keeps_the_heap_in_proportion_to_live_timers_and_fires_once():
    h = OperatorHarness.keyed_process(InactivityTimeout(), lambda v: v % KEYS)
    n = 200_000
    for start in range(0, n, 1_000):
        batch = list(range(start, start + 1_000))
        h.process(*batch, timestamps=batch)
        heap = h.operator.timers._heaps[TimeDomain.EVENT_TIME]
        assert len(heap) <= 2 * KEYS + 1_024 + 1, f"{len(heap)} heap entries for {KEYS} live timers"
    fired = h.watermark(n + GAP)
    assert sorted(fired) == sorted((k, n - KEYS + k + GAP) for k in range(KEYS))  # each key's last timeout only

"""Windows on the operator harness: checked against plain-Python references,
including hundreds of random out-of-order interleavings with late data."""

from __future__ import annotations

import collections

from hypothesis import given, settings
from hypothesis import strategies as st

from weir import (
    AggregateFunction,
    CountTrigger,
    EventTimeSessionWindows,
    OutputTag,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.testing import OperatorHarness
from weir.runtime.windows import AggregateContents, AllRecords, ReduceContents, WindowCall, WindowOperator

LATE = OutputTag("late")


class Count(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + 1

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


class Describe(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield (key, w.start, w.end, sorted(v for _, v in elements))


def window_harness(contents, assigner, trigger=None, lateness=0, late=LATE, function=None, **kw) -> OperatorHarness:
    call = WindowCall(function, True, "process()")
    return OperatorHarness(
        WindowOperator("Window", "window", contents, call, lambda r: r[0], assigner, trigger, lateness, late), **kw
    )


def _late(h):
    return h.side_output("late")


def test_tumbling_event_time_windows_fire_when_the_watermark_passes_their_end():
    h = window_harness(AggregateContents(Count()), TumblingEventTimeWindows.of(10))
    h.process(("a", 1), ("a", 2), ("b", 12), ("a", 11), timestamps=[1, 9, 12, 11])
    assert h.watermark(8) == []
    assert h.watermark(9) == [1 * 0 + 2]  # window [0, 10) of "a" holds 2 records
    assert h.timestamps == [9]
    assert sorted(h.watermark(MAX_WATERMARK)) == [1, 1]


def test_sliding_windows_assign_each_record_to_size_over_slide_windows():
    h = window_harness(AllRecords(), SlidingEventTimeWindows.of(10, 5), function=Describe())
    h.process(("k", 7), timestamps=[7])
    out = sorted(h.watermark(MAX_WATERMARK))
    assert out == [("k", 0, 10, [7]), ("k", 5, 15, [7])]


def test_session_windows_merge_and_fire_once_per_session():
    h = window_harness(AllRecords(), EventTimeSessionWindows.with_gap(10), function=Describe())
    h.process(("k", 1), ("k", 30), ("k", 12), ("k", 5), timestamps=[1, 30, 12, 5])  # 1,5,12 merge; 30 alone
    assert h.watermark(21) == [("k", 1, 22, [1, 5, 12])]
    assert h.watermark(MAX_WATERMARK) == [("k", 30, 40, [30])]
    assert h.operator.keyed_backend.table("_windows") == {}, "fired windows are cleaned up"


def test_late_records_within_lateness_refire_and_later_ones_go_to_the_side_output():
    h = window_harness(ReduceContents(lambda a, b: (a[0], a[1] + b[1])), TumblingEventTimeWindows.of(10), lateness=5)
    h.process(("k", 1), timestamps=[3])
    assert h.watermark(12) == [("k", 1)]
    assert h.process(("k", 10), timestamps=[4]) == [("k", 11)]  # late but allowed: fires again
    h.watermark(14)  # the window is dropped at 9 + 5
    assert h.process(("k", 100), timestamps=[5]) == []
    assert _late(h) == [("k", 100)]


def test_count_trigger_on_processing_time_windows():
    h = window_harness(AggregateContents(Count()), TumblingProcessingTimeWindows.of(60_000), trigger=CountTrigger.of(2))
    assert h.process(("a", 0), ("a", 0), ("a", 0)) == [2]
    assert h.process(("a", 0)) == [4]


@settings(max_examples=400, deadline=None)
@given(
    events=st.lists(
        st.one_of(
            st.tuples(st.just("r"), st.sampled_from("ab"), st.integers(0, 60)),
            st.tuples(st.just("w"), st.integers(0, 70)),
        ),
        max_size=40,
    ),
    size=st.sampled_from([5, 10, 20]),
    lateness=st.sampled_from([0, 3, 15]),
)
def test_tumbling_count_with_lateness_matches_a_reference(events, size, lateness):
    """Random interleavings of out-of-order records and watermarks. Reference:
    a window fires when the watermark first reaches its end, with the records
    that came before; a record arriving while watermark < end + lateness is added
    (and fires the window at once if its end has passed); later ones are late."""
    h = window_harness(
        AllRecords(),
        TumblingEventTimeWindows.of(size),
        lateness=lateness,
        function=lambda k, ctx, els: [(k, ctx.window().start, len(els))],
    )
    watermark = -(2**63)
    contents: dict[tuple[str, int], int] = collections.Counter()
    fired: set[tuple[str, int]] = set()
    expected, late = [], []
    got = []
    for ev in events:
        if ev[0] == "r":
            _, key, ts = ev
            start = ts - ts % size
            if start + size - 1 + lateness <= watermark:
                late.append((key, ts))
            else:
                contents[(key, start)] += 1
                if (key, start) in fired or start + size - 1 <= watermark:  # its end has passed: fires at once
                    fired.add((key, start))
                    expected.append(((key, start), contents[(key, start)]))
            got += h.process((key, ts), timestamps=[ts])
        else:
            new = ev[1]
            if new <= watermark:
                continue
            watermark = new
            for key, start in sorted(contents):
                if (key, start) not in fired and start + size - 1 <= watermark:
                    fired.add((key, start))
                    expected.append(((key, start), contents[(key, start)]))
            got += h.watermark(new)
    assert sorted(got) == sorted((k, start, c) for (k, start), c in expected)
    assert sorted(_late(h)) == sorted(late)


def test_processing_time_windows_fire_on_the_processing_time_timer():
    import time

    h = window_harness(AggregateContents(Count()), TumblingProcessingTimeWindows.of(60_000))
    h.process(("a", 0), ("a", 0), ("b", 0))
    now = int(time.time() * 1000)
    assert h.processing_time(now - 60_000) == []
    assert sorted(h.processing_time(now + 60_000)) == [1, 2]
    assert h.operator.keyed_backend.table("_windows") == {}
    assert h.operator.next_processing_timer() is None

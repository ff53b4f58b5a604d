"""Session windows a batch at a time (WindowOperator._merge_batch) against the
per-record path, which a custom trigger keeps: on random keys, out-of-order
timestamps, batches, watermarks, processing-time ticks, gaps (fixed and per
record), allowed lateness, a snapshot and restore in between, STREAMING and
BATCH, for reduce, aggregate and process window functions whose results depend
on the order of their records. Both must emit the same windows with the same
timestamps and send the same records, in the same order, to the late output."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir import (
    AggregateFunction,
    EventTimeSessionWindows,
    EventTimeTrigger,
    OutputTag,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    SessionWindowTimeGapExtractor,
)
from weir.runtime.config import RuntimeExecutionMode
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.testing import OperatorHarness
from weir.runtime.windows import AggregateContents, AllRecords, ReduceContents, WindowCall, WindowOperator

LATE = OutputTag("late")


class SameAsEventTime(EventTimeTrigger):
    """The default trigger as a custom one: the per-record path."""


class SameAsProcessingTime(ProcessingTimeTrigger):
    """The default trigger as a custom one: the per-record path."""


class InOrder(AggregateFunction):
    """The values in the order they were added and merged: any change of order shows."""

    def create_accumulator(self):
        return []

    def add(self, value, acc):
        acc.append(value[2])  # in place, as PyFlink's examples do
        return acc

    def get_result(self, acc):
        return tuple(acc)

    def merge(self, a, b):
        return a + b


class GapOfValue(SessionWindowTimeGapExtractor):
    def extract(self, element):
        return 3 + 4 * int(element[2])


def with_window(key, ctx, inputs):
    for result in inputs:
        yield key, ctx.window().start, ctx.window().end, result


def listed(key, ctx, elements):
    yield key, ctx.window().start, ctx.window().end, tuple(v for _, _, v in elements)


FUNCTIONS = {
    "reduce": lambda: (ReduceContents(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2])), with_window),
    "aggregate": lambda: (AggregateContents(InOrder()), with_window),
    "process": lambda: (AllRecords(), listed),
}


def _operator(function, event_time, gap, lateness, per_record):
    contents, window_function = FUNCTIONS[function]()
    sessions = EventTimeSessionWindows if event_time else ProcessingTimeSessionWindows
    assigner = sessions.with_dynamic_gap(GapOfValue()) if gap == "dynamic" else sessions.with_gap(gap)
    trigger = (SameAsEventTime() if event_time else SameAsProcessingTime()) if per_record else None
    call = WindowCall(window_function, True, "process()")
    return WindowOperator("Window", "window", contents, call, lambda r: r[0], assigner, trigger, lateness, LATE)


records = st.tuples(st.sampled_from("abc"), st.integers(0, 200), st.sampled_from("0123456789"))
steps = st.one_of(
    st.tuples(st.just("batch"), st.lists(records, min_size=1, max_size=8)),
    st.tuples(st.just("watermark"), st.integers(0, 260)),
    st.tuples(st.just("tick"), st.integers(0, 40)),
    st.tuples(st.just("snapshot")),
)


def _drive(steps, function, event_time, gap, lateness, mode, per_record):
    """The steps on one operator; its main output as (record, timestamp) and its late output."""
    clock = [1_000]

    def harness(restore=None):
        op = _operator(function, event_time, gap, lateness, per_record)
        return OperatorHarness(op, restore=restore, runtime_mode=mode)

    out, late = [], []
    with mock.patch("weir.runtime.windows.now_ms", lambda: clock[0]):
        h = harness()
        assert h.operator._by_batch is not per_record
        for step in steps:
            if step[0] == "batch":
                h.process(*step[1], timestamps=[r[1] for r in step[1]])
            elif step[0] == "watermark":
                h.watermark(step[1])
            elif step[0] == "tick":
                clock[0] += step[1]
                h.processing_time(clock[0])
            else:
                snap = h.snapshot(1)
                out += zip(h.output, h.timestamps)
                late += h.side_output("late")
                h = harness(restore=[snap])
        h.watermark(MAX_WATERMARK)
        h.finish()
    out += zip(h.output, h.timestamps)
    return sorted(out, key=repr), late + h.side_output("late")


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(steps, max_size=30),
    function=st.sampled_from(sorted(FUNCTIONS)),
    event_time=st.booleans(),
    gap=st.sampled_from([1, 5, 10, 30, "dynamic"]),
    lateness=st.sampled_from([0, 7, 40]),
    mode=st.sampled_from([RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH]),
)
def test_batched_sessions_match_the_per_record_path(steps, function, event_time, gap, lateness, mode):
    args = (steps, function, event_time, gap, lateness, mode)
    assert _drive(*args, per_record=False) == _drive(*args, per_record=True)


def test_late_records_within_the_lateness_fire_their_session_once_each():
    """Allowed lateness: a record for a session whose end the watermark passed fires
    it at once, a record at a time, also several in one batch."""
    h = OperatorHarness(_operator("aggregate", True, 10, 50, per_record=False))
    h.process(("k", 1, "a"), timestamps=[1])
    assert h.watermark(20) == [("k", 1, 11, ("a",))]
    assert h.process(("k", 3, "b"), ("k", 5, "c"), ("k", 90, "x"), timestamps=[3, 5, 90]) == [
        ("k", 1, 13, ("a", "b")),
        ("k", 1, 15, ("a", "b", "c")),
    ]
    assert h.watermark(70) == []  # dropped at 14 + 50 without firing again
    h.process(("k", 2, "z"), timestamps=[2])
    assert h.side_output("late") == [("k", 2, "z")]
    assert h.watermark(MAX_WATERMARK) == [("k", 90, 100, ("x",))]


def test_a_batch_touches_each_timer_once_per_key_and_session():
    """A key's session grown by 100 records in one batch registers one timer, not 100."""
    h = OperatorHarness(_operator("aggregate", True, 10, 0, per_record=False))
    timers = h.operator.timers
    with mock.patch.object(timers, "register", wraps=timers.register) as register:
        h.process(*[("k", t, "v") for t in range(100)], timestamps=list(range(100)))
    assert register.call_count == 1
    assert h.watermark(MAX_WATERMARK) == [("k", 0, 109, ("v",) * 100)]


def test_a_session_growing_over_many_batches_keeps_one_timer_and_fires_once():
    """Without allowed lateness a key's sessions share one timer: a session that
    grows batch after batch registers it once and never deletes it; when the
    watermark passes the timer before the session's end, the timer moves to it."""
    h = OperatorHarness(_operator("aggregate", True, 10, 0, per_record=False))
    timers = h.operator.timers
    with (
        mock.patch.object(timers, "register", wraps=timers.register) as register,
        mock.patch.object(timers, "delete", wraps=timers.delete) as delete,
    ):
        for t in range(0, 500, 5):  # 100 batches, each extending the session by 5 ms
            h.process(("k", t, "v"), timestamps=[t])
        assert (register.call_count, delete.call_count) == (1, 0)
        assert h.watermark(100) == []  # passes the timer at 9: it moves to the session's end, 504
        assert register.call_args.args[1] == 504
    assert h.watermark(503) == []
    assert h.watermark(504) == [("k", 0, 505, ("v",) * 100)]
    assert h.operator.timers.next_time(h.operator._domain) is None


@pytest.mark.parametrize("lateness", [(0, 7), (7, 0)])
def test_a_snapshot_restores_its_timers_into_the_other_lateness(lateness):
    """A key's one timer (no allowed lateness) restored into an operator with
    allowed lateness, and a window's timers restored into one without: every
    session still fires once, at its end."""
    before, after = lateness
    h = OperatorHarness(_operator("aggregate", True, 10, before, per_record=False))
    h.process(("a", 0, "x"), ("b", 3, "y"), timestamps=[0, 3])
    h.process(("a", 5, "z"), ("a", 40, "w"), timestamps=[5, 40])
    snap = h.snapshot(1)
    h = OperatorHarness(_operator("aggregate", True, 10, after, per_record=False), restore=[snap])
    assert h.watermark(14) == [("b", 3, 13, ("y",)), ("a", 0, 15, ("x", "z"))]  # in time order
    assert h.watermark(MAX_WATERMARK) == [("a", 40, 50, ("w",))]

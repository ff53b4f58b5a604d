"""Incremental window aggregation with a window function (#17 item 5):
``reduce(f, window_function=...)`` and ``aggregate(agg, window_function=...)`` keep
one value per window and hand it, with the key and the window, to a
``WindowFunction`` or ``ProcessWindowFunction`` (and their all-window forms);
``ProcessWindowFunction.clear`` runs when a window is dropped. Against
plain-Python references, on the harness and on the in-process executor, and
exact through killed tasks."""

from __future__ import annotations

import collections

import pytest

from tests.kills import kill_each_after_checkpoints
from tests.pausing import GatedGenerator
from weir import (
    AggregateFunction,
    AllWindowFunction,
    JobExecutionError,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    RestartStrategy,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    WindowFunction,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import MAX_WATERMARK, MIN_WATERMARK
from weir.runtime.testing import OperatorHarness
from weir.runtime.windows import AggregateContents, ReduceContents, WindowCall, WindowOperator


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class WithWindow(ProcessWindowFunction):
    """Tags the window's one result with its key and window; notes each window cleared."""

    def __init__(self):
        self.cleared = []

    def process(self, key, context, elements):
        (result,) = elements
        yield key, context.window().start, context.window().end, result

    def clear(self, context):
        self.cleared.append((context.window().start, context.current_watermark()))


class Keyed(WindowFunction):
    def apply(self, key, window, inputs):
        yield key, window.start, list(inputs)


def _stamped(n):
    """(key, value) records, event time 10 ms per record."""
    return [(f"k{i % 5}", i) for i in range(n)]


def _by_window(records, size_ms):
    out = collections.defaultdict(list)
    for key, v in records:
        out[(key, v * 10 // size_ms * size_ms)].append(v)
    return out


def _env(checkpoint_dir=None, p=2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    if checkpoint_dir is not None:
        env.enable_checkpointing(50)
        env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
        env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


WS = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r[1] * 10)


def test_reduce_and_aggregate_with_window_functions_match_the_reference():
    records = _stamped(2_000)
    windows = _by_window(records, 1_000)
    env = _env()
    tumbling = (
        env.from_collection(records, WS).key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.seconds(1)))
    )
    averages = tumbling.aggregate(Average(), window_function=WithWindow())
    got = averages.execute_and_collect(executor="local", limit=10_000)
    assert sorted(got) == sorted((k, s, s + 1_000, sum(vs) / len(vs)) for (k, s), vs in windows.items())

    env = _env()
    tumbling = (
        env.from_collection(records, WS).key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.seconds(1)))
    )
    maxima = tumbling.reduce(lambda a, b: max(a, b), window_function=Keyed())
    got = maxima.execute_and_collect(executor="local", limit=10_000)
    assert sorted(got) == sorted((k, s, [(k, max(vs))]) for (k, s), vs in windows.items())


class Span(ProcessAllWindowFunction):
    def process(self, context, elements):
        (result,) = elements
        yield context.window().start, result


class Sized(AllWindowFunction):
    def apply(self, window, inputs):
        yield window.start, window.end, list(inputs)


def test_window_all_and_count_windows_take_window_functions_too():
    records = _stamped(1_000)
    totals = collections.Counter()
    for _key, v in records:
        totals[v * 10 // 2_000 * 2_000] += v
    env = _env()
    stream = env.from_collection(records, WS).window_all(TumblingEventTimeWindows.of(Time.seconds(2)))
    got = stream.reduce(lambda a, b: ("all", a[1] + b[1]), window_function=Span()).execute_and_collect(
        executor="local", limit=1_000
    )
    assert sorted(got) == sorted((start, ("all", total)) for start, total in totals.items())

    env = _env()
    stream = env.from_collection(records).set_parallelism(1).count_window_all(100)
    got = stream.aggregate(Average(), window_function=Sized()).execute_and_collect(executor="local", limit=1_000)
    assert got == [(MIN_WATERMARK, MAX_WATERMARK + 1, [sum(range(i, i + 100)) / 100]) for i in range(0, 1_000, 100)]


def _harness(contents, function, lateness=0):
    call = WindowCall(function, True, "reduce() window_function")
    op = WindowOperator(
        "Window", "window", contents, call, lambda r: r[0], TumblingEventTimeWindows.of(10), None, lateness, None
    )
    return OperatorHarness(op)


def test_a_window_keeps_one_accumulator_not_its_records():
    h = _harness(AggregateContents(Average()), WithWindow())
    h.process(*[("a", v) for v in range(50)], timestamps=[1] * 50)
    assert h.operator.keyed_backend.tables["_windows"] == {
        "a": {TumblingEventTimeWindows.of(10).assign(1, 0)[0]: (1225, 50)}
    }
    h = _harness(ReduceContents(lambda x, y: (x[0], x[1] + y[1])), Keyed())
    h.process(*[("a", v) for v in range(50)], timestamps=[1] * 50)
    assert list(h.operator.keyed_backend.tables["_windows"]["a"].values()) == [("a", 1225)]
    assert h.watermark(9) == [("a", 0, [("a", 1225)])]


def test_clear_runs_when_a_window_is_dropped_at_its_end_plus_lateness():
    fn = WithWindow()
    h = _harness(AggregateContents(Average()), fn, lateness=5)
    h.process(("a", 4), ("a", 6), timestamps=[1, 2])
    assert h.watermark(9) == [("a", 0, 10, 5.0)] and fn.cleared == []  # fired, kept for late records
    assert h.process(("a", 8), timestamps=[3]) == [("a", 0, 10, 6.0)]  # a late record fires it again
    assert h.watermark(13) == [] and fn.cleared == []
    h.watermark(14)  # end 9 + lateness 5: dropped
    assert fn.cleared == [(0, 14)] and not h.operator.keyed_backend.tables["_windows"]


class Failing(ProcessWindowFunction):
    def process(self, key, context, elements):
        raise ValueError("no luck")


def test_misused_window_functions_name_the_call_and_the_operator():
    env = _env()
    env.set_restart_strategy(RestartStrategy.no_restart())
    windowed = env.from_collection(_stamped(10), WS).key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(100))
    with pytest.raises(TypeError, match=r"reduce\(\) window_function must be callable or have a process\(\) method"):
        windowed.reduce(lambda a, b: a, window_function=42)
    with pytest.raises(TypeError, match=r"apply\(\) takes a WindowFunction"):
        windowed.apply(WithWindow())
    failing = windowed.aggregate(Average(), window_function=Failing()).name("averages")
    with pytest.raises(
        JobExecutionError, match="process window function of operator 'averages' raised ValueError: no luck"
    ):
        failing.execute_and_collect(executor="local", limit=10)


def test_count_windows_with_a_window_function_are_exact_after_killed_tasks(checkpoint_dir, out_dir, tmp_path):
    n = 60_000
    records = [(f"k{i % 7}", i) for i in range(n)]
    env = _env(checkpoint_dir)
    gate = tmp_path / "killed"  # half the input at 30,000 a second, the rest once both kills landed
    (
        env.from_source(GatedGenerator(lambda i: records[i], n, str(gate), n // 2, 30_000), source_name="generator")
        .set_parallelism(1)
        .key_by(lambda r: r[0])
        .count_window(100)
        .aggregate(Average(), window_function=WithWindow())
        .name("windows")
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("window-function-kill", executor="local")
    kill_each_after_checkpoints(client, "windows")
    gate.touch()
    assert client.wait(120).restarts == 2
    per_key = collections.defaultdict(list)
    for key, v in records:
        per_key[key].append(v)
    want = [
        (k, MIN_WATERMARK, MAX_WATERMARK + 1, sum(vs[i : i + 100]) / 100)
        for k, vs in per_key.items()
        for i in range(0, len(vs) - 99, 100)
    ]
    assert sorted(map(tuple, read_committed(out_dir))) == sorted(want)


class NoClear(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield from elements


class NoClearAll(ProcessAllWindowFunction):
    def process(self, context, elements):
        yield from elements


def test_a_window_function_without_its_own_clear_is_not_called_per_key_and_window():
    """The base classes' ``clear()`` does nothing: calling it for every key of every
    fired window cost Nexmark's q5 a tenth of its time (150,000 calls for 460,000 bids)."""
    assert WindowCall(WithWindow(), True, "w").clears
    assert not WindowCall(NoClear(), True, "w").clears
    assert not WindowCall(NoClearAll(), False, "w").clears

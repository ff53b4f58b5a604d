"""Tumbling and sliding windows built for batches (weir.runtime.slicing): the
same results as the general window operator, record for record, on random
out-of-order streams with late records, whatever the batch size; and exact
across a failover and a rescale, where a sliced window must fire once."""

from __future__ import annotations

import collections
import random

import pytest

from tests.kills import kill_each_after_checkpoints
from weir import (
    AggregateFunction,
    DiscardingSink,
    EventTimeTrigger,
    JobStatus,
    OutputTag,
    RestartStrategy,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.slicing import AlignedWindowOperator
from weir.runtime.testing import OperatorHarness
from weir.runtime.windows import WindowOperator

KEYS = 5


class CountAndSum(AggregateFunction):
    """(count, sum) of the values: merges, so sliding windows are built from slices."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return acc[0] + 1, acc[1] + value[2]

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class CountAndSumNoMerge(CountAndSum):
    """The same without merge(): sliding windows keep one accumulator per window."""

    merge = AggregateFunction.merge


class MutableCountAndSum(CountAndSum):
    """A list accumulator changed in place, as PyFlink's examples write them: a
    window's merge must not change the slices later windows read."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        acc[0] += 1
        acc[1] += value[2]
        return acc

    def get_result(self, acc):
        return tuple(acc)

    def merge(self, a, b):
        a[0] += b[0]
        a[1] += b[1]
        return a


def with_window(key, ctx, inputs):
    (result,) = inputs
    yield key, ctx.window().start, ctx.window().end, result


def events(seed: int, n: int, disorder: int) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(KEYS)}", i * 10 - rng.randrange(disorder + 1), rng.randrange(100)) for i in range(n)]


ASSIGNERS = {
    "tumbling": TumblingEventTimeWindows.of(1_000),
    "sliding": SlidingEventTimeWindows.of(1_000, 250),
    "sliding-offset": SlidingEventTimeWindows.of(600, 200, 50),
}
AGGREGATES = {
    "aggregate": lambda w: w.aggregate(CountAndSum(), window_function=with_window),
    "aggregate-no-merge": lambda w: w.aggregate(CountAndSumNoMerge(), window_function=with_window),
    "aggregate-in-place": lambda w: w.aggregate(MutableCountAndSum(), window_function=with_window),
    "reduce": lambda w: w.reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2]), window_function=with_window),
    "process": lambda w: w.process(lambda key, ctx, els: [(key, ctx.window().start, ctx.window().end, len(els))]),
}


def _operator(assigner, aggregate, general: bool):
    """The window operator a job builds, late records to the side output "late"."""
    env = StreamExecutionEnvironment.get_execution_environment()
    windowed = env.from_collection([("k", 0, 0)]).key_by(lambda e: e[0]).window(assigner)
    if general:
        windowed = windowed.trigger(EventTimeTrigger.create())  # an explicit trigger: the general operator
    AGGREGATES[aggregate](windowed.side_output_late_data(OutputTag("late"))).sink_to(DiscardingSink())
    (spec,) = [op for v in env.get_job_graph("w").vertices.values() for op in v.operators if "Window" in op.name]
    return spec.create()


def _drive(seed: int, assigner, aggregate, general: bool) -> tuple[list, list]:
    """Random batches and watermarks (a watermark 150 ms behind the newest record,
    now and then), a snapshot and a restore half-way; the main and late outputs."""
    rng = random.Random(seed)
    data = events(seed, 3_000, disorder=1_200)  # out of order past the watermark's bound: some records are late
    h = OperatorHarness(_operator(assigner, aggregate, general))
    out: list = []
    i = newest = 0
    while i < len(data):
        batch = data[i : i + rng.randint(1, 60)]
        i += len(batch)
        out += h.process(*batch, timestamps=[e[1] for e in batch])
        newest = max([newest] + [e[1] for e in batch])
        if rng.random() < 0.5:
            out += h.watermark(newest - 150)
        if i >= len(data) // 2 and h.operator.name != "restored":
            snap = h.snapshot(1)
            late = h.side_output("late")
            h = OperatorHarness(_operator(assigner, aggregate, general), restore=[snap])
            h.operator.name = "restored"
            out += h.watermark(newest - 150)
    out += h.watermark(MAX_WATERMARK)
    return sorted(map(tuple, out), key=repr), late + h.side_output("late")


@pytest.mark.parametrize("aggregate", sorted(AGGREGATES))
@pytest.mark.parametrize("seed,kind", list(enumerate(sorted(ASSIGNERS))))
def test_the_same_windows_as_the_general_operator_with_late_records_and_a_restore(seed, kind, aggregate):
    fast, fast_late = _drive(seed, ASSIGNERS[kind], aggregate, general=False)
    slow, slow_late = _drive(seed, ASSIGNERS[kind], aggregate, general=True)
    assert fast == slow and len(fast) > 100
    assert fast_late == slow_late and len(fast_late) > 10


def test_tumbling_and_sliding_windows_with_the_default_trigger_take_the_aligned_operator():
    env = StreamExecutionEnvironment.get_execution_environment()
    keyed = env.from_collection([("a", 1, 1)]).key_by(lambda e: e[0])
    sliding = SlidingEventTimeWindows.of(1_000, 250)
    keyed.window(sliding).aggregate(CountAndSum()).sink_to(DiscardingSink())
    keyed.window(sliding).trigger(EventTimeTrigger.create()).aggregate(CountAndSum()).sink_to(DiscardingSink())
    keyed.window(sliding).allowed_lateness(100).aggregate(CountAndSum()).sink_to(DiscardingSink())
    ops = [op for v in env.get_job_graph("w").vertices.values() for op in v.operators if "Window" in op.name]
    built = [op.create() for op in ops]
    assert [type(op) for op in built] == [AlignedWindowOperator, WindowOperator, WindowOperator]
    assert built[0].slicing


def _expected(data, size, slide):
    out = collections.Counter()
    for k, t, v in data:
        first = t - t % slide + slide
        for end in range(first, first + size, slide):
            out[(k, end - size, end)] += 0
            out[(k, end - size, end, "n")] += 1
            out[(k, end - size, end, "s")] += v
    return sorted(
        (k, start, end, (out[(k, start, end, "n")], out[(k, start, end, "s")]))
        for (k, start, end, *rest) in out
        if not rest
    )


def _sliding_job(checkpoint_dir, out_dir, data, parallelism, savepoint=None, rate=2_000):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    if savepoint:
        env.restore_from_savepoint(savepoint)
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[1])
    (
        env.from_generator(data.__getitem__, count=len(data), records_per_second=rate, watermark_strategy=ws)
        .uid("src")
        .key_by(lambda e: e[0])
        .window(SlidingEventTimeWindows.of(1_000, 250))
        .aggregate(CountAndSum(), window_function=with_window)
        .uid("windows")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def test_sliced_windows_fire_once_each_across_a_failover_and_a_rescale(tmp_path, checkpoint_dir, out_dir):
    """A slice outlives the windows that fired before a checkpoint; after a restore
    (here at another parallelism) those must not fire again."""
    data = [(f"k{i % KEYS}", i * 10, i % 7) for i in range(6_000)]
    client = _sliding_job(checkpoint_dir, out_dir, data, 2).execute_async("sliced", executor="local")
    kill_each_after_checkpoints(client, "window-aggregate", subtasks=(0,), checkpoints=3)
    client.wait_until(lambda c: sum(s["status"] == "COMPLETED" for s in c.checkpoints()) >= 8, 60)
    savepoint = client.stop(str(tmp_path / "sp"))
    assert client.wait(30).status is JobStatus.SUSPENDED
    resumed = _sliding_job(checkpoint_dir, out_dir, data, 3, savepoint=savepoint, rate=None)
    assert resumed.execute("sliced", executor="local").status is JobStatus.FINISHED
    got = sorted(tuple(r[:3]) + (tuple(r[3]),) for r in read_committed(out_dir))
    assert got == _expected(data, 1_000, 250)

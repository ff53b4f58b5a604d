"""Count windows (tumbling and sliding, per key and over the whole stream) and
time windows over the whole stream (``window_all``), against plain-Python
references; a count window's partial contents survive a killed task."""

from __future__ import annotations

import collections

import pytest

from tests.kills import kill_each_after_checkpoints
from tests.pausing import GatedGenerator
from weir import (
    AggregateFunction,
    DiscardingSink,
    InvalidConfigurationError,
    ProcessAllWindowFunction,
    RestartStrategy,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed


def _env(checkpoint_dir, p=2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


def _records(n):
    return [(f"k{i % 7}", i) for i in range(n)]


def _per_key(records):
    out = collections.defaultdict(list)
    for k, v in records:
        out[k].append(v)
    return out


def _tumbling(values, size):
    return [values[i : i + size] for i in range(0, len(values) - size + 1, size)]


def _sliding(values, size, slide):
    return [values[max(0, end - size) : end] for end in range(slide, len(values) + 1, slide)]


class Count(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + 1

    def get_result(self, acc):
        return acc


def _source(env, records):
    # One source subtask: each key's records reach its window in source order.
    return env.from_collection(records).set_parallelism(1)


def test_tumbling_and_sliding_count_windows_per_key_match_the_reference(checkpoint_dir):
    records = _records(1_000)
    env = _env(checkpoint_dir)
    keyed = _source(env, records).key_by(lambda r: r[0])
    tumbling = keyed.count_window(10).reduce(lambda a, b: (a[0], a[1] + b[1]))
    got = tumbling.execute_and_collect(executor="local", limit=10_000)
    want = [(k, sum(w)) for k, vs in _per_key(records).items() for w in _tumbling(vs, 10)]
    assert sorted(got) == sorted(want) and len(want) == 7 * 14  # 143 records a key: the last 3 never fire

    env = _env(checkpoint_dir)
    sliding = (
        _source(env, records)
        .key_by(lambda r: r[0])
        .count_window(10, 4)
        .process(lambda key, ctx, elements: [(key, [v for _, v in elements])])
    )
    got = sliding.execute_and_collect(executor="local", limit=10_000)
    want = [(k, w) for k, vs in _per_key(records).items() for w in _sliding(vs, 10, 4)]
    assert sorted(got) == sorted(want)


def test_count_windows_over_the_whole_stream_run_on_one_subtask(checkpoint_dir):
    records = _records(500)
    env = _env(checkpoint_dir)
    windows = _source(env, records).count_window_all(50).aggregate(Count())
    assert windows.execute_and_collect(executor="local", limit=100) == [50] * 10
    env = _env(checkpoint_dir)
    sums = _source(env, records).count_window_all(100, 50).reduce(lambda a, b: ("all", a[1] + b[1]))
    want = [("all", sum(w)) for w in _sliding([v for _, v in records], 100, 50)]
    assert sums.execute_and_collect(executor="local", limit=100) == want


class Span(ProcessAllWindowFunction):
    def process(self, context, elements):
        values = [v for _, v in elements]
        yield (context.window().start, len(values), min(values), max(values))


def test_window_all_with_event_time_windows_matches_the_reference(checkpoint_dir):
    records = _records(3_000)
    ws = WatermarkStrategy.for_bounded_out_of_orderness(Time.seconds(1)).with_timestamp_assigner(lambda r: r[1] * 10)
    env = _env(checkpoint_dir)
    spans = env.from_collection(records, ws).window_all(TumblingEventTimeWindows.of(Time.seconds(5))).process(Span())
    by_window = collections.defaultdict(list)
    for _, v in records:
        by_window[v * 10 // 5_000 * 5_000].append(v)
    want = sorted((start, len(vs), min(vs), max(vs)) for start, vs in by_window.items())
    spans.sink_to(DiscardingSink())
    graph = env.get_job_graph()
    window_vertex = next(v for v in graph.vertices.values() if v.name.startswith("AllWindow(Process)"))
    assert window_vertex.parallelism == 1
    assert sorted(spans.execute_and_collect(executor="local", limit=10_000)) == want


def test_a_count_windows_partial_contents_survive_a_killed_task_exactly(checkpoint_dir, out_dir, tmp_path):
    n = 60_000
    records = _records(n)
    env = _env(checkpoint_dir)
    gate = tmp_path / "killed"  # half the input at 30,000 a second, the rest once both kills landed
    (
        env.from_source(GatedGenerator(lambda i: records[i], n, str(gate), n // 2, 30_000), source_name="generator")
        .set_parallelism(1)
        .key_by(lambda r: r[0])
        .count_window(100)
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .name("windows")
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("count-window-kill", executor="local")
    kill_each_after_checkpoints(client, "windows")
    gate.touch()
    assert client.wait(120).restarts == 2
    want = [(k, sum(w)) for k, vs in _per_key(records).items() for w in _tumbling(vs, 100)]
    assert sorted(map(tuple, read_committed(out_dir))) == sorted(want)


def test_bad_window_arguments_name_the_setting():
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection([1])
    with pytest.raises(InvalidConfigurationError, match="count window size"):
        stream.key_by(lambda r: r).count_window(0)
    with pytest.raises(InvalidConfigurationError, match="count window slide"):
        stream.count_window_all(5, 0)
    with pytest.raises(InvalidConfigurationError, match="window assigner"):
        stream.window_all(5)


def test_a_purged_windows_empty_contents_stay_empty_through_a_snapshot():
    """A count window just fired and purged holds the empty marker; a checkpoint
    taken then and restored must give back the marker itself, not a copy the
    reduce function would be handed as an accumulator (the job failed with
    "IndexError: tuple index out of range" on every restart)."""
    from weir.runtime import serialization
    from weir.runtime.windows import _EMPTY

    assert serialization.loads(serialization.dumps({"window": _EMPTY}))["window"] is _EMPTY

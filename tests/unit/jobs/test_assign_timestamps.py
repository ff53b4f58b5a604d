"""``assign_timestamps_and_watermarks`` anywhere in a stream: the operator on its
own (stamping, periodic watermarks, idleness, upstream watermarks dropped but the
end of input, a generator that is not checkpointed), and whole jobs against a
plain-Python reference, with a failover."""

from __future__ import annotations

import os
import random

import pytest

from weir import (
    Duration,
    InvalidConfigurationError,
    RestartStrategy,
    StreamExecutionEnvironment,
    TimestampAssigner,
    TumblingEventTimeWindows,
    UserFunctionError,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.eventtime import TimestampsAndWatermarksOperator
from weir.runtime.testing import OperatorHarness

T = 10**13  # a processing time later than any timer the operator set at open()


def _harness(strategy, interval_ms=200, **kw) -> OperatorHarness:
    return OperatorHarness(TimestampsAndWatermarksOperator("Timestamps/Watermarks", "tw", strategy, interval_ms), **kw)


def _bounded(ms=1_000):
    return WatermarkStrategy.for_bounded_out_of_orderness(ms).with_timestamp_assigner(lambda r: r[1])


def test_records_are_stamped_and_the_watermark_goes_out_every_interval_only_when_it_advanced():
    h = _harness(_bounded(1_000))
    assert h.process(("a", 5_000), ("b", 3_000)) == [("a", 5_000), ("b", 3_000)]
    assert h.timestamps == [5_000, 3_000]
    assert h.watermarks == []  # nothing before the interval's timer
    assert h.operator.next_processing_timer() is not None
    h.processing_time(T)
    assert h.watermarks == [3_999]
    h.process(("c", 4_000))
    h.processing_time(T + 200)
    assert h.watermarks == [3_999]  # no progress, nothing sent
    assert h.operator.next_processing_timer() == T + 400
    h.process(("d", 9_000))
    h.processing_time(T + 400)
    assert h.watermarks == [3_999, 7_999]


def test_upstream_watermarks_and_idleness_are_replaced_but_the_end_of_input_goes_through():
    h = _harness(_bounded(0))
    h.process(("a", 100), timestamps=[50_000])  # the assigner's time wins over the record's
    h.watermark(60_000)
    h.watermark_status(idle=True)
    assert h.timestamps == [100] and h.watermarks == [] and h.watermark_statuses == []
    h.watermark(MAX_WATERMARK)
    assert h.watermarks == [MAX_WATERMARK]
    assert h.operator.next_processing_timer() is None  # the end: no more periodic watermarks
    assert h.finish() == [] and h.watermarks == [MAX_WATERMARK]


def test_finish_emits_a_last_watermark():
    h = _harness(_bounded(10))
    h.process(("a", 1_000))
    h.finish()
    assert h.watermarks == [989]


def test_a_quiet_stream_goes_idle_after_the_timeout_and_active_again_with_records():
    h = _harness(_bounded(0).with_idleness(Duration.of_seconds(1)))
    h.process(("a", 1_000))
    h.processing_time(T)
    h.processing_time(T + 500)
    assert (h.watermarks, h.watermark_statuses) == ([999], [])
    h.processing_time(T + 1_000)  # a whole second without a record
    assert h.watermark_statuses == [True]
    h.processing_time(T + 1_200)
    assert h.watermark_statuses == [True]  # said once
    h.process(("a", 2_000))
    h.processing_time(T + 1_400)
    assert (h.watermarks, h.watermark_statuses) == ([999, 1_999], [True, False])


def test_without_an_assigner_records_keep_their_timestamps_and_without_timestamps_it_says_so():
    h = _harness(WatermarkStrategy.for_monotonous_timestamps())
    assert h.process("x", "y", timestamps=[7, 9]) == ["x", "y"]
    h.processing_time(T)
    assert (h.timestamps, h.watermarks) == ([7, 9], [8])
    with pytest.raises(InvalidConfigurationError, match="operator 'Timestamps/Watermarks'.*have no timestamps"):
        h.process("z")


class _FieldAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value["ts"] + (record_timestamp or 0)


def test_a_pyflink_timestamp_assigner_sees_the_records_previous_timestamp():
    h = _harness(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_FieldAssigner()))
    h.process({"ts": 5}, {"ts": 6}, timestamps=[100, 200])
    h.process({"ts": 7})
    assert h.timestamps == [105, 206, 7]


@pytest.mark.parametrize("bad", ["2024-01-01", 1.5, None, True])
def test_an_event_time_that_is_not_int_milliseconds_names_the_operator_and_the_record(bad):
    h = _harness(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: bad))
    with pytest.raises(UserFunctionError) as info:
        h.process({"id": 7})
    text = str(info.value)
    assert "timestamp assigner of operator 'Timestamps/Watermarks' raised TypeError" in text
    assert f"returned {bad!r}" in text and "on record {'id': 7}" in text


def test_numpy_style_integers_are_event_times():
    import numpy as np

    h = _harness(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: np.int64(r)))
    h.process(5, 6)
    assert h.timestamps == [5, 6] and all(type(t) is int for t in h.timestamps)


def test_the_generator_is_not_checkpointed_a_restored_operator_starts_from_min_watermark():
    h = _harness(_bounded(1_000))
    h.process(("a", 10_000))
    h.processing_time(T)
    assert h.watermarks == [8_999]
    snapshot = h.snapshot(1)
    h.close()
    restored = _harness(_bounded(1_000), restore=[snapshot])
    restored.process(("b", 2_000))  # replayed records: the watermark is theirs alone
    restored.processing_time(T)
    assert restored.watermarks == [999]


def test_a_strategy_that_is_not_a_watermark_strategy_is_refused_naming_the_call():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match=r"assign_timestamps_and_watermarks\(\) strategy"):
        env.from_collection([1]).assign_timestamps_and_watermarks(lambda r: r)


# ---------------------------------------------------------------- whole jobs
WINDOW_MS = 1_000


def _events(n: int, seed: int = 7) -> list[str]:
    """CSV lines ``key,ts``: roughly ordered, out of order by up to 500 ms."""
    rng = random.Random(seed)
    return [f"k{i % 7},{max(0, i * 10 + rng.randint(-500, 500))}" for i in range(n)]


def _parse(line: str) -> tuple[str, int, int]:
    key, ts = line.split(",")
    return (key, int(ts), 1)


def _reference(lines: list[str]) -> list[tuple[str, int, int]]:
    counts: dict[tuple[str, int], int] = {}
    for key, ts, _ in map(_parse, lines):
        w = ts - ts % WINDOW_MS
        counts[(key, w)] = counts.get((key, w), 0) + 1
    return sorted((k, w, c) for (k, w), c in counts.items())


def _windowed_counts(env, lines, parse=_parse):
    ws = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1)).with_timestamp_assigner(lambda e: e[1])
    return (
        env.from_collection(lines)
        .map(parse)
        .assign_timestamps_and_watermarks(ws)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(WINDOW_MS))
        .reduce(lambda a, b: (a[0], min(a[1], b[1]), a[2] + b[2]))
    )


def _as_result(rows):
    return sorted((k, ts - ts % WINDOW_MS, c) for k, ts, c in rows)


def _env(checkpoint_dir, interval_ms=50):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.01))
    return env


def test_windows_over_a_parsed_collection_match_the_reference(checkpoint_dir, out_dir):
    lines = _events(5_000)
    env = _env(checkpoint_dir)
    _windowed_counts(env, lines).sink_to(FileSink(out_dir))
    env.execute("assign-windows", executor="local")
    assert _as_result(read_committed(out_dir)) == _reference(lines)


def test_a_failover_replays_from_the_checkpoint_and_the_windows_stay_exact(checkpoint_dir, out_dir, tmp_path):
    lines = _events(20_000)
    marker = str(tmp_path / "raised")  # tasks run copies of the function: remember on disk

    def parse_failing_once(line):
        if line == lines[12_000] and not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("a bad line, once")
        return _parse(line)

    env = _env(checkpoint_dir)
    env.set_batch_size(256)
    _windowed_counts(env, lines, parse_failing_once).sink_to(FileSink(out_dir))
    result = env.execute("assign-failover", executor="local")
    assert os.path.exists(marker) and result.restarts == 1
    assert _as_result(read_committed(out_dir)) == _reference(lines)


def test_watermarks_are_periodic_windows_fire_while_an_endless_stream_runs(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir).set_parallelism(1)
    env.set_auto_watermark_interval(20)
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[1])
    (
        env.from_generator(lambda i: f"k0,{i * 100}", records_per_second=500)
        .map(_parse)
        .assign_timestamps_and_watermarks(ws)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(WINDOW_MS))
        .reduce(lambda a, b: (a[0], min(a[1], b[1]), a[2] + b[2]))
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("assign-periodic", executor="local")
    client.wait_until(lambda c: bool(read_committed(out_dir)))  # only a watermark mid-stream can close a window
    client.cancel()
    assert _as_result(read_committed(out_dir))[0] == ("k0", 0, 10)


@pytest.mark.parametrize("bad", [{"id": 8, "ts": "soon"}, {"id": 8}])
def test_a_failing_record_in_the_middle_of_a_batch_is_the_one_named(bad):
    # The assigner runs over a whole batch at once: the error still names the
    # record it failed on (a KeyError raised, or a time that is not an int),
    # not the batch's first or last.
    h = _harness(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r["ts"]))
    with pytest.raises(UserFunctionError) as info:
        h.process({"id": 7, "ts": 1}, bad, {"id": 9, "ts": 3})
    assert f"on record {bad!r}" in str(info.value)

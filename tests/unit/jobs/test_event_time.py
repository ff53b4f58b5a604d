"""Event time: timestamps through operators, watermarks per channel with idleness,
timers in keyed process functions (kept, restored and rescaled as keyed state)."""

from __future__ import annotations

import pytest

from weir import (
    InvalidConfigurationError,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    Time,
    TimeDomain,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import EndOfData, Watermark, WatermarkStatus
from weir.runtime.eventtime import BoundedOutOfOrdernessWatermarks
from weir.runtime.keygroups import key_group_for, operator_index_for_key_group
from weir.runtime.operators import StreamOperator
from weir.runtime.sources import IndexedReader, IndexSplit, Poll, Source, SourceReader, StaticSplitEnumerator
from weir.runtime.testing import OperatorHarness, TaskHarness


class CountPerMinute(KeyedProcessFunction):
    """Counts a key's records per minute of event time; emits (key, minute, count)
    when the watermark passes the minute's end."""

    def open(self, ctx):
        self.counts = ctx.get_map_state(__import__("runtime").MapStateDescriptor("counts"))

    def process_element(self, value, ctx):
        minute = ctx.timestamp() // 60_000
        self.counts.put(minute, (self.counts.get(minute) or 0) + 1)
        ctx.timer_service().register_event_time_timer((minute + 1) * 60_000 - 1)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.EVENT_TIME
        minute = timestamp // 60_000
        yield (ctx.get_current_key(), minute, self.counts.get(minute))
        self.counts.remove(minute)


def test_bounded_out_of_orderness_watermark():
    gen = BoundedOutOfOrdernessWatermarks(Time.seconds(5))
    gen.on_batch([10_000, 7_000, 12_000])
    assert gen.current_watermark() == 12_000 - 5_000 - 1
    gen.on_event(11_000)
    assert gen.current_watermark() == 6_999


def test_event_time_timers_fire_on_watermarks_in_order_and_outputs_carry_their_time():
    h = OperatorHarness.keyed_process(CountPerMinute(), key_selector=lambda r: r)
    assert h.process("a", "b", "a", timestamps=[1_000, 2_000, 61_000]) == []
    assert h.watermark(59_998) == []
    assert h.watermark(60_000) == [("a", 0, 1), ("b", 0, 1)]
    assert h.timestamps == [59_999, 59_999]
    assert h.watermark(200_000) == [("a", 1, 1)]
    assert h.watermarks == [59_998, 60_000, 200_000]


def test_timers_are_keyed_state_restored_into_another_parallelism():
    h = OperatorHarness.keyed_process(CountPerMinute(), key_selector=lambda r: r)
    keys = [f"k{i}" for i in range(20)]
    h.process(*keys, timestamps=[5_000] * len(keys))
    snap = h.snapshot(1)
    fired = []
    for i in range(3):
        r = OperatorHarness.keyed_process(CountPerMinute(), lambda r: r, restore=[snap], subtask=i, parallelism=3)
        out = r.watermark(60_000)
        assert {k for k, _, _ in out} == {
            k for k in keys if operator_index_for_key_group(128, 3, key_group_for(k, 128)) == i
        }
        fired += out
    assert sorted(fired) == sorted((k, 0, 1) for k in keys)


class Ticker(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_processing_time_timer(1_000)
        ctx.timer_service().register_processing_time_timer(2_000)
        ctx.timer_service().delete_processing_time_timer(2_000)

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), timestamp, ctx.time_domain().name)


def test_processing_time_timers_and_deletion():
    h = OperatorHarness.keyed_process(Ticker(), key_selector=lambda r: r)
    h.process("x")
    assert h.operator.next_processing_timer() == 1_000
    assert h.processing_time(999) == []
    assert h.processing_time(5_000) == [("x", 1_000, "PROCESSING_TIME")]
    assert h.operator.next_processing_timer() is None


class _Pass(StreamOperator):
    def process_batch(self, records, timestamps=None):
        self.output.collect(records, timestamps)


def test_task_watermark_is_the_minimum_over_channels_that_are_neither_idle_nor_ended(tmp_path):
    h = TaskHarness([("pass", _Pass)], 3, "file://" + str(tmp_path))
    h.deliver(0, Watermark(100))
    h.deliver(1, Watermark(50))
    assert _watermarks(h) == []  # channel 2 has said nothing yet
    h.deliver(2, WatermarkStatus(idle=True))
    assert _watermarks(h) == [50]
    h.deliver(1, Watermark(300), EndOfData(drain=True))
    assert _watermarks(h) == [50, 100]  # channel 1 ended, channel 2 idle
    h.deliver(2, Watermark(80))  # active again, behind
    h.deliver(0, Watermark(400))
    assert _watermarks(h) == [50, 100]
    h.deliver(2, Watermark(500))
    assert _watermarks(h) == [50, 100, 400]


def test_a_task_whose_open_inputs_are_all_idle_goes_idle_itself(tmp_path):
    h = TaskHarness([("pass", _Pass)], 2, "file://" + str(tmp_path))
    h.deliver(0, WatermarkStatus(idle=True))
    h.deliver(1, WatermarkStatus(idle=True))
    h.deliver(1, Watermark(10))
    statuses = [m.idle for _, _, msgs in h.ports.sent for m in msgs if isinstance(m, WatermarkStatus)]
    assert statuses == [True, False]


def _watermarks(h):
    return [m.timestamp for _, _, msgs in h.ports.sent for m in msgs if isinstance(m, Watermark)]


def test_a_strategy_without_timestamp_assigner_is_refused():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match="needs .with_timestamp_assigner"):
        env.from_collection([1], WatermarkStrategy.for_monotonous_timestamps())


CLICKS = [("ann", 1_000), ("bob", 30_000), ("ann", 65_000), ("ann", 59_000), ("bob", 125_000), ("ann", 10_000)]


def test_event_time_job_with_out_of_order_records(checkpoint_dir, out_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    ws = WatermarkStrategy.for_bounded_out_of_orderness(Time.minutes(1)).with_timestamp_assigner(lambda c: c[1])
    env.from_collection(CLICKS, ws).key_by(lambda c: c[0]).process(CountPerMinute()).sink_to(FileSink(out_dir))
    env.execute("event-time", executor="local")
    assert sorted(map(tuple, read_committed(out_dir))) == [("ann", 0, 3), ("ann", 1, 1), ("bob", 0, 1), ("bob", 2, 1)]


class _Silent(Source):
    """An unbounded source that never has a record: an idle partition."""

    bounded = False

    def create_splits(self, parallelism):
        return [IndexSplit(0, 0, None)]

    def create_reader(self, subtask, parallelism):
        return _SilentReader()


class _SilentReader(SourceReader):
    def add_splits(self, splits):
        self._splits = list(splits)

    def poll(self, max_records):
        return Poll([], wait_s=0.02)

    def snapshot_splits(self):
        return self._splits


def test_an_idle_source_does_not_hold_back_the_watermark(checkpoint_dir, out_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_auto_watermark_interval(20)
    assign = lambda c: c[1]  # noqa: E731
    idle = env.from_source(
        _Silent(),
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assign).with_idleness(200),
        "silent",
    )
    clicks = env.from_generator(
        lambda i: ("ann", i * 1_000),
        records_per_second=500,
        watermark_strategy=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assign),
    )
    clicks.union(idle).key_by(lambda c: c[0]).process(CountPerMinute()).sink_to(FileSink(out_dir))
    client = env.execute_async("idle", executor="local")
    client.wait_until(lambda c: bool(read_committed(out_dir)))  # a minute closes only if the silent source is left out
    client.cancel()
    assert read_committed(out_dir)[0] == ["ann", 0, 60]


class _OnePartition(Source):
    """Like a Kafka topic of one partition read at parallelism 2: subtask 0 reads
    the only split; subtask 1 asks and never gets one (more may come), so it
    never ends either."""

    bounded = False

    def create_enumerator(self, parallelism, restored):
        return _OwnerOnly(restored if restored is not None else [(0, IndexSplit(0, 0, None))])

    def create_reader(self, subtask, parallelism):
        return IndexedReader(lambda i: ("ann", i * 1_000), rate_per_s=500)


class _OwnerOnly(StaticSplitEnumerator):
    def handle_split_request(self, subtask, context):
        if subtask == 0 and self.remaining:
            super().handle_split_request(subtask, context)


def test_a_source_subtask_with_no_split_goes_idle_after_the_idle_timeout(checkpoint_dir, out_dir):
    """Before, a reader without a split emitted nothing and never went idle, so
    windows downstream of a one-partition topic at parallelism 2 never fired."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_auto_watermark_interval(20)
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda c: c[1]).with_idleness(200)
    env.from_source(_OnePartition(), ws, "one-partition").key_by(lambda c: c[0]).process(CountPerMinute()).sink_to(
        FileSink(out_dir)
    )
    client = env.execute_async("no-split-idle", executor="local")
    client.wait_until(lambda c: bool(read_committed(out_dir)))  # a minute closes only if subtask 1 is left out
    client.cancel()
    assert read_committed(out_dir)[0] == ["ann", 0, 60]

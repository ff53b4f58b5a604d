"""Side outputs: ``yield tag, value`` in process functions (keyed or not, in
``on_timer`` and in a ProcessWindowFunction), read with ``get_side_output(tag)``;
the same mechanism carries a window's late data. Against plain-Python
references, with a failover while keyed state decides what goes to the side."""

from __future__ import annotations

import collections
import os

import pytest

from tests.checker import check_running_sums
from weir import (
    InvalidConfigurationError,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    ProcessWindowFunction,
    RestartStrategy,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    Types,
    UserFunctionError,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.functions import as_callable
from weir.runtime.operators import ProcessOperator
from weir.runtime.testing import OperatorHarness

BAD = OutputTag("bad")
MILESTONES = OutputTag("milestones")


class Route(ProcessFunction):
    """Parses ``"user:amount"``; what does not parse goes to the side."""

    def process_element(self, value, ctx):
        user, _, amount = value.partition(":")
        if amount.isdigit():
            yield (user, int(amount))
        else:
            yield BAD, value


class Totals(KeyedProcessFunction):
    """A running total per user; every 100th record of a user is a milestone on the side."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", default=0))
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        self.total.update(self.total.value() + value[1])
        self.count.update(self.count.value() + 1)
        yield (ctx.get_current_key(), self.total.value())
        if self.count.value() % 100 == 0:
            yield MILESTONES, (ctx.get_current_key(), self.count.value())


def _harness(fn) -> OperatorHarness:
    return OperatorHarness(ProcessOperator("Process", "process", fn, as_callable(fn, "process_element", "process()")))


def test_a_process_function_yields_to_the_main_output_and_to_side_outputs_with_timestamps():
    h = _harness(Route())
    assert h.process("ann:3", "garbage", "bob:4", timestamps=[10, 20, 30]) == [("ann", 3), ("bob", 4)]
    assert h.timestamps == [10, 30]
    assert h.side_output("bad") == ["garbage"]


def test_a_keyed_process_function_yields_to_side_outputs_from_process_element_and_on_timer():
    class Timed(KeyedProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
            yield BAD, ("seen", value)

        def on_timer(self, timestamp, ctx):
            yield MILESTONES, (ctx.get_current_key(), timestamp)
            yield ("fired", timestamp)

    h = OperatorHarness.keyed_process(Timed(), key_selector=lambda r: r)
    assert h.process("a", "b", timestamps=[1, 2]) == []
    assert h.side_output("bad") == [("seen", "a"), ("seen", "b")]
    assert h.watermark(100) == [("fired", 11), ("fired", 12)]
    assert h.side_output("milestones") == [("a", 11), ("b", 12)]


def test_a_tuple_whose_first_field_is_not_an_output_tag_is_an_ordinary_record():
    h = _harness(lambda value, ctx: [("bad", value)])
    assert h.process(1) == [("bad", 1)] and h.side_output("bad") == []


def test_yielding_a_tag_without_a_value_names_the_operator_and_the_record():
    h = _harness(lambda value, ctx: [BAD])
    with pytest.raises(UserFunctionError) as info:
        h.process("x")
    text = str(info.value)
    assert "process function of operator 'Process' raised TypeError: yielded the OutputTag 'bad' alone" in text
    assert "on record 'x'" in text


def test_bad_tags_are_refused_where_they_are_made_or_read():
    with pytest.raises(InvalidConfigurationError, match="OutputTag id"):
        OutputTag("")
    with pytest.raises(InvalidConfigurationError, match="OutputTag id"):
        OutputTag(5)
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match=r"get_side_output\(\) tag='bad'"):
        env.from_collection([1]).process(Route()).get_side_output("bad")


def test_tags_are_equal_by_id_and_take_pyflinks_type_info_argument():
    assert OutputTag("late", type_info=Types.INT()) == OutputTag("late") == OutputTag("late", Types.STRING())
    with pytest.raises(InvalidConfigurationError, match="type_info of OutputTag 'late'='int'"):
        OutputTag("late", "int")


def _lines(n: int) -> list[str]:
    return [f"garbage-{i}" if i % 97 == 0 else f"u{i % 5}:{i % 13}" for i in range(n)]


def _job(env, lines, out_dir, route=None):
    parsed = env.from_collection(lines).process(route or Route())
    totals = parsed.key_by(lambda r: r[0]).process(Totals())
    totals.sink_to(FileSink(f"{out_dir}/totals"))
    totals.get_side_output(MILESTONES).sink_to(FileSink(f"{out_dir}/milestones"))
    parsed.get_side_output(BAD).sink_to(FileSink(f"{out_dir}/bad"))


def _check(out_dir, lines):
    good = [(u, int(a)) for u, _, a in (line.partition(":") for line in lines) if a.isdigit()]
    verdict = check_running_sums(map(tuple, read_committed(f"{out_dir}/totals")), good)
    assert verdict.exact and verdict.outputs == len(good), verdict
    per_user = collections.Counter(u for u, _ in good)
    milestones = sorted((u, c) for u, n in per_user.items() for c in range(100, n + 1, 100))
    assert sorted(map(tuple, read_committed(f"{out_dir}/milestones"))) == milestones
    assert sorted(read_committed(f"{out_dir}/bad")) == sorted(line for line in lines if line.startswith("garbage"))


def _env(checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.01))
    return env


def test_side_outputs_of_a_job_match_the_reference(checkpoint_dir, out_dir):
    lines = _lines(5_000)
    env = _env(checkpoint_dir)
    _job(env, lines, out_dir)
    env.execute("side-outputs", executor="local")
    _check(out_dir, lines)


class _FailingOnce(Route):
    def __init__(self, marker, line):
        self.marker, self.line = marker, line

    def process_element(self, value, ctx):
        if value == self.line and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise ValueError("once")
        yield from super().process_element(value, ctx)


def test_after_a_failover_side_outputs_decided_by_keyed_state_are_exactly_once(checkpoint_dir, out_dir, tmp_path):
    lines = _lines(30_000)
    marker = str(tmp_path / "raised")
    env = _env(checkpoint_dir)
    env.set_batch_size(256)
    _job(env, lines, out_dir, _FailingOnce(marker, lines[20_001]))
    result = env.execute("side-failover", executor="local")
    assert os.path.exists(marker) and result.restarts == 1
    _check(out_dir, lines)


class Spread(ProcessWindowFunction):
    """Each window's count; a window whose values differ by more than 5 also goes to the side."""

    def process(self, key, context, elements):
        values = [v for _, v, _ in elements]
        yield (key, context.window().start, len(values))
        if max(values) - min(values) > 5:
            yield BAD, (key, context.window().start)


def test_a_process_window_function_yields_to_a_side_output(checkpoint_dir, out_dir):
    events = [("a", 1, 1_000), ("a", 9, 2_000), ("b", 4, 1_500), ("a", 2, 12_000), ("b", 5, 3_000), ("b", 0, 25_000)]
    env = _env(checkpoint_dir)
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[2])
    counts = (
        env.from_collection(events, ws)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(10_000))
        .process(Spread())
    )
    counts.sink_to(FileSink(f"{out_dir}/counts"))
    counts.get_side_output(BAD).sink_to(FileSink(f"{out_dir}/spread"))
    env.execute("window-side", executor="local")
    assert sorted(map(tuple, read_committed(f"{out_dir}/counts"))) == [
        ("a", 0, 2),
        ("a", 10_000, 1),
        ("b", 0, 2),
        ("b", 20_000, 1),
    ]
    assert sorted(map(tuple, read_committed(f"{out_dir}/spread"))) == [("a", 0)]

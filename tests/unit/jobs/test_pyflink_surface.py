"""PyFlink's surface on weir (issue #32): names, shapes and printed records of
PyFlink 2.x that its release examples and its own tests rely on. Each test runs
its pipeline on the local executor and asserts the exact records PyFlink gives."""

from __future__ import annotations

import ast
import asyncio
import datetime
import functools
import json
import tempfile
from typing import Iterable

import pytest

from weir.common import Types, WatermarkStrategy
from weir.common.watermark_strategy import TimestampAssigner
from weir.datastream import (
    AggregateFunction,
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategy,
    MapFunction,
    ProcessFunction,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    WindowFunction,
    async_retry_predicates,
)
from weir.datastream.data_stream import DataStream
from weir.datastream.functions import KeyedProcessFunction
from weir.datastream.output_tag import OutputTag
from weir.datastream.state import (
    AggregatingStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from weir.datastream.window import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    TimeWindow,
    TumblingEventTimeWindows,
)
from weir.runtime.config import RestartStrategy
from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError, JobExecutionError
from weir.runtime.javastrings import java_string
from weir.runtime.joins import CoGroupFunction, JoinFunction, ProcessJoinFunction
from weir.runtime.row import Row
from weir.runtime.sinks import Sink, SinkWriter


@pytest.fixture(autouse=True)
def _local(monkeypatch, tmp_path):
    monkeypatch.setenv("WEIR_EXECUTOR", "local")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def collect(stream: DataStream) -> list:
    with stream.execute_and_collect() as records:
        return list(records)


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


def stamped(env: StreamExecutionEnvironment, records: list) -> DataStream:
    return env.from_collection(
        records, type_info=Types.TUPLE([Types.STRING(), Types.INT()])
    ).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    )


_written: list = []


class Remembering(Sink):
    """Keeps what it writes in this module (the local executor runs the job in this process)."""

    def create_writer(self, ctx):
        return _Append()


class _Append(SinkWriter):
    def write(self, records):
        _written.extend(records)


# ---------------------------------------------------------------- names and module paths


def test_pyflinks_module_paths_for_streams_and_output_tags_hold_weirs_classes():
    from weir.runtime.datastream import DataStream as Own
    from weir.runtime.functions import OutputTag as OwnTag

    assert DataStream is Own and OutputTag is OwnTag


def test_window_functions_take_pyflinks_four_type_parameters_and_a_subscripted_context():
    class Count(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
        def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]):
            return [(key, len(list(elements)))]

    class Sum(WindowFunction[tuple, tuple, str, CountWindow]):
        def apply(self, key, window, inputs):
            return [(key, sum(i[0] for i in inputs))]

    assert Count() and Sum()
    assert isinstance(EventTimeTrigger.create(), EventTimeTrigger)


def test_add_sink_attaches_a_weir_sink_as_sink_to_does():
    _written.clear()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(lambda x: x * 10).add_sink(Remembering())
    env.execute("add-sink")
    assert sorted(_written) == [10, 20, 30]


# ---------------------------------------------------------------- windows


def test_dynamic_gap_sessions_open_each_record_a_session_of_its_own_gap():
    class GapIsTheTimestamp(SessionWindowTimeGapExtractor):
        def extract(self, element) -> int:
            return element[1]

    env = StreamExecutionEnvironment.get_execution_environment()
    windows = (
        stamped(env, [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 9), ("hi", 9), ("hi", 15)])
        .key_by(lambda x: x[0])
        .window(EventTimeSessionWindows.with_dynamic_gap(GapIsTheTimestamp()))
        .process(lambda key, ctx, elements: [(key, ctx.window().start, ctx.window().end, len(list(elements)))])
    )
    # [1,2) [2,4) [3,6) [4,8) touch one after another; [9,18) [9,18) [15,30) do; 8 < 9 splits them.
    assert sorted(collect(windows)) == [("hi", 1, 8, 4), ("hi", 9, 30, 3)]


def test_a_dynamic_gap_that_is_not_positive_fails_naming_the_record():
    class Zero(SessionWindowTimeGapExtractor):
        def extract(self, element) -> int:
            return 0

    env = StreamExecutionEnvironment.get_execution_environment()
    stamped(env, [("hi", 1)]).key_by(lambda x: x[0]).window(EventTimeSessionWindows.with_dynamic_gap(Zero())).process(
        lambda key, ctx, elements: [key]
    ).print()
    with pytest.raises(JobExecutionError, match=r"session gap of record \('hi', 1\)"):
        env.execute("zero-gap")


class SumWithId(WindowFunction[tuple, tuple, str, CountWindow]):
    def apply(self, key, window, inputs):
        return [(key, window.id, sum(i[0] for i in inputs))]


def test_count_windows_hand_the_window_function_pyflinks_count_windows():
    env = StreamExecutionEnvironment.get_execution_environment()
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
    ds = env.from_collection(data, type_info=Types.TUPLE([Types.INT(), Types.STRING()])).key_by(lambda x: x[1])
    tumbling = ds.window(CountTumblingWindowAssigner.of(2)).apply(SumWithId())
    # hi's third record waits for a fourth; a window, once fired, is dropped.
    assert sorted(collect(tumbling)) == [("hello", 0, 6), ("hello", 1, 12), ("hi", 0, 4)]


def test_sliding_count_windows_fire_only_when_full_as_pyflinks():
    env = StreamExecutionEnvironment.get_execution_environment()
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]
    sums = env.from_collection(data).key_by(lambda x: x[1]).window(CountSlidingWindowAssigner(2, 1)).apply(SumWithId())
    assert sorted(collect(sums)) == [("hello", 0, 6), ("hello", 1, 10), ("hi", 0, 4), ("hi", 1, 8)]


def test_a_count_window_of_no_records_is_refused_naming_the_setting():
    with pytest.raises(InvalidConfigurationError, match="count window slide"):
        CountSlidingWindowAssigner(2, 0)


def test_purging_event_time_trigger_on_sessions():
    env = StreamExecutionEnvironment.get_execution_environment()
    windows = (
        stamped(env, [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)])
        .key_by(lambda x: x[0])
        .window(EventTimeSessionWindows.with_gap(3))
        .trigger(PurgingTrigger.of(EventTimeTrigger.create()))
        .process(lambda key, ctx, elements: [(key, ctx.window().start, ctx.window().end, len(list(elements)))])
    )
    assert sorted(collect(windows)) == [("hi", 1, 7, 4), ("hi", 8, 12, 2), ("hi", 15, 18, 1)]


# ---------------------------------------------------------------- declared types


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.FLOAT()))

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value[1])
        yield value[0], self.total.value()


def test_float_records_and_float_state_round_through_four_bytes_as_pyflinks_serializer():
    env = StreamExecutionEnvironment.get_execution_environment()
    data = [("Alice", 110.1), ("Alice", 20.0), ("Alice", 13.1), ("Alice", 20.1)]
    sums = (
        env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.FLOAT()]))
        .key_by(lambda x: x[0])
        .process(RunningSum())
    )
    # What PyFlink prints for the same program (its examples/datastream/state_access.py sums these).
    assert collect(sums)[-1] == ("Alice", 163.30001831054688)


class Keep(RunningSum):
    def process_element(self, value, ctx):
        self.total.update(value[1])
        yield value


def test_a_value_that_does_not_fit_its_states_type_fails_naming_the_state():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([("a", "x")]).key_by(lambda x: x[0]).process(Keep()).print()
    with pytest.raises(JobExecutionError, match="value state 'total' of Float"):
        env.execute("misfit")


def test_filter_keeps_the_streams_declared_type():
    env = StreamExecutionEnvironment.get_execution_environment()
    row = Types.ROW([Types.STRING(), Types.INT()])
    ds = env.from_collection([("a", 1)], type_info=row)
    assert ds.filter(lambda r: True).get_type() == row
    assert ds.key_by(lambda r: r[0]).filter(lambda r: True).get_type() == row


# ---------------------------------------------------------------- print()


def test_print_shows_records_as_pyflink_does(capsys):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    typed = env.from_collection(
        [("a", 1.5, True)], type_info=Types.TUPLE([Types.STRING(), Types.FLOAT(), Types.BOOLEAN()])
    )
    typed.print()
    typed.map(lambda t: Row(t[0], None), output_type=Types.ROW([Types.STRING(), Types.INT()])).print("rows")
    env.from_collection([("a", 1)]).print()
    env.execute("print")
    assert sorted(capsys.readouterr().out.splitlines()) == ["('a', 1)", "(a,1.5,true)", "rows> +I[a, null]"]


def test_print_numbers_each_subtask_from_one_above_parallelism_one(capsys):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(["x"]).print("out")
    env.execute("print-subtasks")
    assert capsys.readouterr().out.strip() in ("out:1> x", "out:2> x")


@pytest.mark.parametrize(
    ("value", "type_info", "printed"),
    [
        (163.3000030517578, Types.FLOAT(), "163.3"),  # the 4-byte float nearest 163.3
        (163.30001831054688, Types.DOUBLE(), "163.30001831054688"),
        (1e7, None, "1.0E7"),
        (0.00015, None, "1.5E-4"),
        (0.001, None, "0.001"),
        (-2.0, None, "-2.0"),
        (float("inf"), None, "Infinity"),
        ([1, 2], Types.LIST(Types.INT()), "[1, 2]"),
        ({"a": None}, None, "{a=null}"),
        (Row(1, ("x", False)), None, "+I[1, (x,false)]"),
        (datetime.datetime(2021, 1, 9, 12, 0, 0, 11000), Types.SQL_TIMESTAMP(), "2021-01-09 12:00:00.011"),
        (datetime.datetime(2021, 1, 9), None, "2021-01-09 00:00:00.0"),
        (datetime.time(12, 0, 0, 5), Types.SQL_TIME(), "12:00:00"),
    ],
)
def test_java_strings(value, type_info, printed):
    assert java_string(value, type_info) == printed


# ---------------------------------------------------------------- state


class Sums(KeyedProcessFunction):
    """A reducing and an aggregating state of the same running sum, as PyFlink's tests use them."""

    def open(self, runtime_context):
        self.reduced = runtime_context.get_reducing_state(
            ReducingStateDescriptor("reduced", lambda a, b: a + b, Types.INT())
        )
        self.aggregated = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("aggregated", Adding(), Types.INT())
        )

    def process_element(self, value, ctx):
        self.reduced.add(value[0])
        self.aggregated.add(value[0])
        yield self.reduced.get(), self.aggregated.get(), value[1]


class Adding(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return value + accumulator

    def get_result(self, accumulator):
        return accumulator * 10

    def merge(self, a, b):
        return a + b


def test_reducing_and_aggregating_state_fold_each_keys_values():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]
    sums = env.from_collection(data).key_by(lambda x: x[1]).process(Sums())
    assert sorted(collect(sums)) == [
        (1, 10, "hi"),
        (2, 20, "hello"),
        (4, 40, "hi"),
        (6, 60, "hello"),
        (9, 90, "hi"),
        (12, 120, "hello"),
    ]


def test_a_reducing_state_without_a_function_is_refused_naming_it():
    with pytest.raises(InvalidConfigurationError, match="reduce function of state 'r'"):
        ReducingStateDescriptor("r", None, Types.INT())


class Seen(KeyedProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen", Types.INT(), Types.STRING()))

    def process_element(self, value, ctx):
        before = (value[0] in self.seen, self.seen[value[0]])
        self.seen[value[0]] = value[1]
        yield value[0], before, sorted(self.seen)


def test_map_state_reads_as_a_dict():
    env = StreamExecutionEnvironment.get_execution_environment()
    records = collect(env.from_collection([(1, "a"), (2, "b"), (1, "c")]).key_by(lambda x: "k").process(Seen()))
    assert records == [(1, (False, None), [1]), (2, (False, None), [1, 2]), (1, (True, "a"), [1, 2])]


# ---------------------------------------------------------------- keyed aggregations


def test_sum_min_max_and_by_on_rows_tuples_and_numbers():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    rows = env.from_collection(
        [(1, 1), (1, 2), (1, 3), (2, 5), (2, 1)], type_info=Types.ROW_NAMED(["v1", "v2"], [Types.INT(), Types.INT()])
    )
    sums = (
        rows.key_by(lambda x: x[0])
        .sum("v2")
        .key_by(lambda x: x[0])
        .sum(1)
        .map(lambda x: (x[1], x[0]), output_type=Types.TUPLE([Types.INT(), Types.INT()]))
        .key_by(lambda x: x[1])
        .sum()
    )
    assert collect(sums) == [(1, 1), (5, 1), (15, 1), (5, 2), (16, 2)]  # PyFlink's test_keyed_sum


def keyed_rows():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    data = [("a", 3, 0), ("a", 1, 1), ("b", 5, 0), ("b", 3, 1)]
    names = Types.ROW_NAMED(["v1", "v2", "v3"], [Types.STRING(), Types.INT(), Types.INT()])
    return env.from_collection(data, type_info=names).key_by(lambda x: x[0])


def test_min_and_max_keep_the_first_records_other_fields_and_by_keeps_the_record():
    assert [tuple(r) for r in collect(keyed_rows().min_by("v2"))] == [
        ("a", 3, 0),
        ("a", 1, 1),
        ("b", 5, 0),
        ("b", 3, 1),
    ]
    assert [tuple(r) for r in collect(keyed_rows().max_by(1))] == [("a", 3, 0), ("a", 3, 0), ("b", 5, 0), ("b", 5, 0)]
    assert [tuple(r) for r in collect(keyed_rows().min(1))] == [("a", 3, 0), ("a", 1, 0), ("b", 5, 0), ("b", 3, 0)]
    assert [tuple(r) for r in collect(keyed_rows().max("v3"))] == [("a", 3, 0), ("a", 3, 1), ("b", 5, 0), ("b", 5, 1)]
    env = StreamExecutionEnvironment.get_execution_environment()
    assert collect(env.from_collection([3, 1, 5]).key_by(lambda x: 0).max()) == [3, 3, 5]


def test_a_field_name_a_record_lacks_fails_naming_it():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([(1, 2), (1, 3)]).key_by(lambda x: x[0]).sum("v2").print()
    with pytest.raises(JobExecutionError, match="field 'v2' of a tuple record"):
        env.execute("no-such-field")


# ---------------------------------------------------------------- partitioning and the plan


def test_partition_custom_sends_each_record_to_the_chosen_subtask():
    env = StreamExecutionEnvironment.get_execution_environment()
    routed = (
        env.from_collection([("a", 0), ("b", 1), ("c", 2), ("d", 3)])
        .partition_custom(lambda key, n: key % n, lambda x: x[1])
        .map(lambda x: x)
        .set_parallelism(2)
        .process(Subtask())
        .set_parallelism(2)
    )
    assert sorted(collect(routed)) == [("a", 0), ("b", 1), ("c", 0), ("d", 1)]


class Subtask(ProcessFunction):
    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        yield value[0], self.subtask


def test_a_custom_partitioner_choosing_no_subtask_fails_naming_the_record():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([("a", 7)]).partition_custom(lambda key, n: key, lambda x: x[1]).map(
        lambda x: x
    ).set_parallelism(2).print()
    with pytest.raises(JobExecutionError, match=r"custom partitioner.*channel 7, not one of 0..1"):
        env.execute("bad-channel")


def test_shuffle_reaches_every_record_downstream():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert sorted(collect(env.from_collection(list(range(50))).shuffle().map(lambda x: x).set_parallelism(3))) == list(
        range(50)
    )


@pytest.mark.parametrize("repartition", ["rebalance", "broadcast", "forward", "shuffle", "rescale"])
def test_a_keyed_stream_refuses_repartitioning_as_pyflink_does(repartition):
    keyed = StreamExecutionEnvironment.get_execution_environment().from_collection([1]).key_by(lambda x: x)
    with pytest.raises(InvalidJobGraphError, match="a keyed stream's records go to the subtask of their key"):
        getattr(keyed, repartition)()


def test_project_keeps_the_chosen_tuple_fields_and_their_types():
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection(
        [[1, 2, 3, "4"], [5, 6, 7, "8"]],
        type_info=Types.TUPLE([Types.INT(), Types.LONG(), Types.INT(), Types.STRING()]),
    )
    with pytest.raises(InvalidConfigurationError, match="project"):
        ds.project(4)
    with pytest.raises(InvalidJobGraphError, match="only a stream of a declared Types.TUPLE"):
        env.from_collection([(1, 2)]).project(0)
    projected = ds.project(1, 3)
    assert projected.get_type() == Types.TUPLE([Types.LONG(), Types.STRING()])
    assert sorted(collect(projected)) == [(2, "4"), (6, "8")]


def test_the_execution_plan_is_flinks_json():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    ds = env.from_collection([1, 2, 3])
    ds.union(env.from_collection([4])).broadcast().map(lambda x: x).set_parallelism(3).key_by(lambda x: x).reduce(
        max
    ).print()
    plan = json.loads(env.get_execution_plan())
    assert [(n["type"], n["pact"], n["parallelism"]) for n in plan["nodes"]] == [
        ("Source: collection", "Data Source", 2),
        ("Source: collection", "Data Source", 2),
        ("Map", "Operator", 3),
        ("Reduce", "Operator", 2),
        ("Sink: PrintSink", "Data Sink", 2),
    ]
    assert [p["ship_strategy"] for n in plan["nodes"] for p in n["predecessors"]] == [
        "BROADCAST",
        "BROADCAST",
        "HASH",
        "FORWARD",
    ]


def test_a_keyed_streams_records_are_collected_with_their_keys_as_pyflinks():
    env = StreamExecutionEnvironment.get_execution_environment()
    data = [("pyflink", 1), ("datastream", 2)]
    keyed = env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.INT()])).key_by(lambda r: r[0])
    with keyed.execute_and_collect() as records:
        assert sorted(records, key=str) == [
            Row(f0="datastream", f1=("datastream", 2)),
            Row(f0="pyflink", f1=("pyflink", 1)),
        ]


def test_rescale_and_shuffle_show_in_the_plan():
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([1])
    ds.rescale().map(lambda x: x).print()
    ds.shuffle().map(lambda x: x).print()
    plan = json.loads(env.get_execution_plan())
    assert [p["ship_strategy"] for n in plan["nodes"] if n["type"] == "Map" for p in n["predecessors"]] == [
        "RESCALE",
        "SHUFFLE",
    ]


class Counting(MapFunction):
    def open(self, runtime_context):
        group = runtime_context.get_metrics_group().add_group("records")
        self.counter = group.counter("seen")
        self.meter = group.meter("rate", 1)
        self.distribution = group.distribution("lengths")
        group.gauge("last", lambda: self.counter.get_count())

    def map(self, value):
        self.counter.inc()
        self.meter.mark_event()
        self.distribution.update(len(value))
        return value, self.counter.get_count(), self.meter.get_count(), self.distribution.sum, self.distribution.max


def test_a_functions_metrics_count_what_it_saw_in_its_subtask():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    seen = collect(env.from_collection(["ab", "cde"]).map(Counting()))
    assert seen == [("ab", 1, 1, 2, 2), ("cde", 2, 2, 5, 3)]


def test_add_python_file_makes_the_file_importable_by_functions(tmp_path):
    (tmp_path / "helper_for_weir_test.py").write_text("def add_two(a):\n    return a + 2\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_python_file(str(tmp_path / "helper_for_weir_test.py"))

    def add(value):
        from helper_for_weir_test import add_two

        return add_two(value)

    assert sorted(collect(env.from_collection([1, 2]).map(add))) == [3, 4]
    with pytest.raises(InvalidConfigurationError, match="add_python_file"):
        env.add_python_file(str(tmp_path / "missing.py"))


def test_add_jars_is_ignored_with_a_warning(caplog):
    StreamExecutionEnvironment.get_execution_environment().add_jars("file:///x.jar")
    assert "add_jars(file:///x.jar) ignored: weir runs no JVM" in caplog.text


def test_a_configuration_sets_parallelism_and_mode_and_names_what_it_ignores(caplog):
    from weir.common import Configuration
    from weir.datastream import RuntimeExecutionMode

    config = Configuration().set_integer("parallelism.default", 3).set_string("execution.runtime-mode", "batch")
    config.set_boolean("pipeline.object-reuse", True)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    assert env.get_parallelism() == 3 and env.config.runtime_mode is RuntimeExecutionMode.BATCH
    assert (
        config.get_boolean("pipeline.object-reuse", False)
        and Configuration(config).get_integer("parallelism.default", 1) == 3
    )
    assert "configuration keys weir does not apply: pipeline.object-reuse" in caplog.text
    with pytest.raises(InvalidConfigurationError, match="execution.runtime-mode"):
        StreamExecutionEnvironment.get_execution_environment(
            Configuration().set_string("execution.runtime-mode", "fast")
        )


# ---------------------------------------------------------------- window joins and co-groups (Flink's, beyond PyFlink)


def two_streams():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    orders = stamped(env, [("ann", 1), ("bob", 2), ("ann", 4), ("ann", 12)])
    payments = stamped(env, [("ann", 3), ("ann", 5), ("cid", 6), ("ann", 11)])
    return orders, payments


class Pair(JoinFunction):
    def join(self, first, second):
        return first[0], first[1], second[1]


def test_a_window_join_pairs_each_keys_records_of_a_window():
    orders, payments = two_streams()
    joined = (
        orders.join(payments)
        .where(lambda o: o[0])
        .equal_to(lambda p: p[0])
        .window(TumblingEventTimeWindows.of(10))
        .apply(Pair())
    )
    # [0,10): ann's orders 1 and 4 with payments 3 and 5; [10,20): 12 with 11; bob and cid have no partner.
    assert sorted(collect(joined)) == [("ann", 1, 3), ("ann", 1, 5), ("ann", 4, 3), ("ann", 4, 5), ("ann", 12, 11)]


def test_a_co_group_gets_both_sides_of_a_key_even_when_one_is_empty():
    class Counts(CoGroupFunction):
        def co_group(self, first, second):
            yield len(first), len(second)

    orders, payments = two_streams()
    grouped = (
        orders.co_group(payments)
        .where(lambda o: o[0])
        .equal_to(lambda p: p[0])
        .window(TumblingEventTimeWindows.of(10))
        .apply(Counts())
    )
    assert sorted(collect(grouped)) == [(0, 1), (1, 0), (1, 1), (2, 2)]


def test_a_join_without_its_window_is_refused_naming_the_step():
    orders, payments = two_streams()
    with pytest.raises(InvalidConfigurationError, match=r"apply\(\).*window\(assigner\)"):
        orders.join(payments).where(lambda o: o[0]).equal_to(lambda p: p[0]).apply(Pair())


# ---------------------------------------------------------------- interval joins (Flink's, beyond PyFlink)


class Within(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        yield left[0], left[1], right[1], ctx.get_timestamp()


def test_an_interval_join_pairs_records_of_a_key_within_the_bounds():
    orders, payments = two_streams()
    joined = (
        orders.key_by(lambda o: o[0]).interval_join(payments.key_by(lambda p: p[0])).between(-1, 2).process(Within())
    )
    # ann's order at 1 takes payments at 0..3 (3); at 4 takes 3..6 (3, 5); at 12 takes 11..14 (11).
    assert sorted(collect(joined)) == [("ann", 1, 3, 3), ("ann", 4, 3, 4), ("ann", 4, 5, 5), ("ann", 12, 11, 12)]


def test_an_interval_join_of_many_records_a_key_finds_every_pair_without_reading_the_other_sides_whole_state(
    monkeypatch,
):
    """Before, each record copied its timestamp's list and read every entry of the
    other side's buffer for its key (``MapState.items``, once a record)."""
    import random

    import weir.runtime.state

    scans = []
    real = weir.runtime.state.MapState.items
    monkeypatch.setattr(weir.runtime.state.MapState, "items", lambda self: scans.append(1) or real(self))
    rng = random.Random(7)
    lefts = [(f"k{rng.randrange(5)}", t) for t in range(0, 3_000, 3)]
    rights = [(f"k{rng.randrange(5)}", t) for t in range(1, 3_000, 4)]
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    joined = (
        stamped(env, lefts)
        .key_by(lambda o: o[0])
        .interval_join(stamped(env, rights).key_by(lambda p: p[0]))
        .between(-40, 25)
        .process(Within())
    )
    expected = [(k, lt, rt, max(lt, rt)) for k, lt in lefts for rk, rt in rights if k == rk and -40 <= rt - lt <= 25]
    assert sorted(collect(joined)) == sorted(expected) and len(expected) > 1_000
    assert scans == []


def test_exclusive_bounds_leave_the_bounds_out():
    orders, payments = two_streams()
    joined = (
        orders.key_by(lambda o: o[0])
        .interval_join(payments.key_by(lambda p: p[0]))
        .between(-1, 2)
        .lower_bound_exclusive()
        .upper_bound_exclusive()
        .process(Within())
    )
    assert sorted(collect(joined)) == [("ann", 4, 5, 5)]  # 3 - 4 is the lower bound, 1 + 2 = 3 the upper


def test_the_results_carry_the_later_records_time_into_windows():
    orders, payments = two_streams()
    joined = (
        orders.key_by(lambda o: o[0]).interval_join(payments.key_by(lambda p: p[0])).between(0, 10).process(Within())
    )
    per_window = (
        joined.key_by(lambda j: j[0])
        .window(TumblingEventTimeWindows.of(5))
        .process(lambda key, ctx, elements: [(ctx.window().start, len(list(elements)))])
    )
    # Pairs (1,3)@3 (1,5)@5 (1,11)@11 (4,5)@5 (4,11)@11, none for 12: [0,5) has 1, [5,10) 2, [10,15) 2.
    assert sorted(collect(per_window)) == [(0, 1), (5, 2), (10, 2)]


def test_interval_join_bounds_in_the_wrong_order_are_refused():
    orders, payments = two_streams()
    with pytest.raises(InvalidConfigurationError, match="interval join bounds"):
        orders.key_by(lambda o: o[0]).interval_join(payments.key_by(lambda p: p[0])).between(2, -1)


# ---------------------------------------------------------------- async I/O (PyFlink 2.x's AsyncDataStream)


class Lookup(AsyncFunction):
    """Answers after a delay that makes later records finish first; fails each record's first attempt when asked."""

    def __init__(self, fail_first=False):
        self.fail_first = fail_first
        self.failed = set()

    async def async_invoke(self, value):
        await asyncio.sleep((10 - value) / 1000)
        if self.fail_first and value not in self.failed:
            self.failed.add(value)
            raise TimeoutError("the service timed out")  # a failure of the call, not the operator's time-out
        return [value * 10]


def numbers(parallelism=1):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env.from_collection(list(range(8)))


def test_ordered_wait_keeps_the_records_order():
    assert collect(AsyncDataStream.ordered_wait(numbers(), Lookup(), 5_000, capacity=4)) == [i * 10 for i in range(8)]


def test_unordered_wait_emits_as_calls_complete():
    results = collect(AsyncDataStream.unordered_wait(numbers(2), Lookup(), 5_000))
    assert sorted(results) == [i * 10 for i in range(8)]


def test_a_retry_strategy_calls_again_after_an_accepted_failure():
    retry = AsyncRetryStrategy.fixed_delay(
        max_attempts=2,
        backoff_time_millis=1,
        exception_predicate=functools.partial(
            async_retry_predicates.exception_type_predicate, expected_error_type=TimeoutError
        ),
    )
    results = collect(AsyncDataStream.ordered_wait_with_retry(numbers(), Lookup(fail_first=True), 5_000, retry))
    assert results == [i * 10 for i in range(8)]


def test_a_failure_no_strategy_retries_fails_the_job_naming_the_record():
    env = StreamExecutionEnvironment.get_execution_environment()
    AsyncDataStream.ordered_wait(env.from_collection([0]), Lookup(fail_first=True), 5_000).print()
    with pytest.raises(
        JobExecutionError,
        match="async_invoke of operator 'AsyncWait' raised TimeoutError: the service timed out on record 0",
    ):
        env.execute("async-fails")


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(10)
        return [value]

    def timeout(self, value):
        return [("timed out", value)]


def test_a_call_past_its_timeout_gives_the_timeout_records():
    assert collect(AsyncDataStream.unordered_wait(numbers(), Slow(), 20)) == [("timed out", i) for i in range(8)]


_cancelled: list[int] = []  # module level: the operator's copy of the function records here


class FailsWhileOthersWait(AsyncFunction):
    """Record 3's call fails while the calls of records 0-2 are still waiting for their answers."""

    async def async_invoke(self, value):
        if value == 3:
            raise ValueError("the service refused it")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            _cancelled.append(value)
            raise
        return [value]


def test_a_failing_call_cancels_the_calls_in_flight_and_closes_its_event_loop_cleanly():
    """The other calls were left pending on a closed event loop, never cancelled:
    the garbage collector destroyed them later, in the middle of unrelated code,
    and an ast.parse in the same process died with SystemError (Python 3.11)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.set_restart_strategy(RestartStrategy.no_restart())
    AsyncDataStream.unordered_wait(env.from_collection([0, 1, 2, 3]), FailsWhileOthersWait(), 60_000).print()
    with pytest.raises(
        JobExecutionError,
        match="async_invoke of operator 'AsyncWait' raised ValueError: the service refused it on record 3",
    ):
        env.execute("async-fails-in-flight")
    assert sorted(_cancelled) == [0, 1, 2], "the calls in flight were not cancelled"
    assert isinstance(ast.parse("total = sum(x * x for x in range(10))"), ast.Module)


def test_an_async_job_whose_calls_all_completed_closes_without_a_failover():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    AsyncDataStream.ordered_wait(env.from_collection(list(range(8))), Lookup(), 5_000).sink_to(Remembering())
    _written.clear()
    result = env.execute("async-closes")
    assert (result.status.value, result.restarts, _written) == ("FINISHED", 0, [i * 10 for i in range(8)])


def test_async_invoke_must_be_a_coroutine():
    class Plain(AsyncFunction):
        def async_invoke(self, value):
            return [value]

    with pytest.raises(InvalidConfigurationError, match="async def async_invoke"):
        AsyncDataStream.unordered_wait(numbers(), Plain(), 1_000)

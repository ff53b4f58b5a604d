"""PyFlink DataStream programs that run on weir with only their import root changed.

Each program below is written against PyFlink's documented API, in the shape of
the PyFlink example or documentation page it cites, and uses nothing of weir's
own: with ``weir`` in its imports replaced by ``pyflink`` it is a PyFlink
program, and the test asserts the results PyFlink's semantics give
it. The programs call ``execute_and_collect()`` without weir's ``executor``
argument, as PyFlink programs do; ``WEIR_EXECUTOR=local`` runs them in-process.
"""

from __future__ import annotations

import collections
import json
import tempfile

import pytest

# PyFlink's imports with its root `pyflink` replaced by `weir` (PyFlink's module paths
# are mirrored under weir): nothing else of the programs below changes.
from weir.common import Duration, Row, Time, Types, WatermarkStrategy
from weir.common.watermark_strategy import TimestampAssigner
from weir.datastream import FlatMapFunction, KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from weir.datastream.state import ValueStateDescriptor
from weir.datastream.window import TumblingEventTimeWindows


@pytest.fixture(autouse=True)
def _local(monkeypatch, tmp_path):
    monkeypatch.setenv("WEIR_EXECUTOR", "local")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default checkpoint storage is in the temp folder


# --- 1. Word count with types: the pipeline of PyFlink's examples/datastream/word_count.py and
# of the "Python DataStream API tutorial" (docs/dev/python/datastream_tutorial), in streaming
# mode: flat_map, a map to (word, 1) typed Types.TUPLE, key_by, a rolling reduce.

LINES = ["To be, or not to be", "that is the question", "To sleep perchance to dream"]


def word_count(lines):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    ds = env.from_collection(lines, type_info=Types.STRING())

    def split(line):
        yield from line.lower().replace(",", "").split()

    counts = (
        ds.flat_map(split, output_type=Types.STRING())
        .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0], key_type=Types.STRING())
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with counts.execute_and_collect() as results:
        return list(results)


def test_word_count_with_types():
    words = collections.Counter(" ".join(LINES).lower().replace(",", "").split())
    # A rolling reduce emits each word's count after each of its records: (to, 1) ... (to, 4).
    assert sorted(word_count(LINES)) == sorted((w, i) for w, n in words.items() for i in range(1, n + 1))


# --- 2. A keyed process function with a ValueStateDescriptor typed Types.INT(), emitting rows
# typed Types.ROW_NAMED: the shape of PyFlink's examples/datastream/state_access.py and
# event_time_timer.py (a KeyedProcessFunction keeping a running value per key in open()'s state).


class CountVisits(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.visits = runtime_context.get_state(ValueStateDescriptor("visits", Types.INT()))

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        visits = self.visits.value()
        visits = 1 if visits is None else visits + 1
        self.visits.update(visits)
        yield Row(ctx.get_current_key(), value["page"], visits)


def visits_per_user(clicks):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)  # each user's clicks in order
    visits = (
        env.from_collection(clicks)
        .key_by(lambda click: click["user"], key_type=Types.STRING())
        .process(
            CountVisits(),
            output_type=Types.ROW_NAMED(["user", "page", "visits"], [Types.STRING(), Types.STRING(), Types.INT()]),
        )
    )
    return visits.filter(lambda row: row.visits > 1).execute_and_collect(limit=100)


def test_keyed_process_function_with_int_value_state_and_named_rows():
    clicks = [
        {"user": "ann", "page": "/a"},
        {"user": "bob", "page": "/b"},
        {"user": "ann", "page": "/c"},
        {"user": "ann", "page": "/a"},
        {"user": "bob", "page": "/a"},
    ]
    got = visits_per_user(clicks)
    assert sorted(got, key=repr) == [
        Row(user="ann", page="/a", visits=3),
        Row(user="ann", page="/c", visits=2),
        Row(user="bob", page="/a", visits=2),
    ]
    # The rows a PyFlink job hands on: named as the type says, read by name and position.
    assert [(r.user, r["visits"], r[1]) for r in sorted(got, key=repr)][0] == ("ann", 3, "/a")


# --- 3. Rows in, a map typed Types.ROW_NAMED, then keyed state in a flat_map: the source and
# map of PyFlink's examples/datastream/basic_operations.py (from_collection with
# type_info=Types.ROW_NAMED(["id", "info"], ...), fields read as data.id / data.info), and the
# keyed FlatMapFunction of Flink's state documentation (docs/dev/datastream/fault-tolerance/state,
# "Using Keyed State", Python tab: an average emitted every two records of a key).


class AverageOfTwo(FlatMapFunction):
    def open(self, runtime_context: RuntimeContext):
        self.sum = runtime_context.get_state(ValueStateDescriptor("sum", Types.TUPLE([Types.INT(), Types.INT()])))

    def flat_map(self, value):
        count, total = self.sum.value() or (0, 0)
        count, total = count + 1, total + value.tel
        self.sum.update((count, total))
        if count >= 2:
            self.sum.clear()
            yield value.country, total // count


def average_tel_per_country():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    ds = env.from_collection(
        collection=[
            (1, '{"name": "Ada", "tel": 120, "addr": {"country": "UK", "city": "London"}}'),
            (2, '{"name": "Bo", "tel": 135, "addr": {"country": "China", "city": "Shanghai"}}'),
            (3, '{"name": "Cy", "tel": 124, "addr": {"country": "USA", "city": "Boston"}}'),
            (4, '{"name": "Di", "tel": 32, "addr": {"country": "China", "city": "Hangzhou"}}'),
            (5, '{"name": "Ed", "tel": 15, "addr": {"country": "UK", "city": "Leeds"}}'),
        ],
        type_info=Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()]),
    )

    def parse(data):
        info = json.loads(data.info)
        return Row(data.id, info["addr"]["country"], info["tel"])

    people = ds.map(
        parse, output_type=Types.ROW_NAMED(["id", "country", "tel"], [Types.INT(), Types.STRING(), Types.INT()])
    )
    averages = people.key_by(lambda person: person.country).flat_map(
        AverageOfTwo(), output_type=Types.TUPLE([Types.STRING(), Types.INT()])
    )
    with averages.execute_and_collect() as results:
        return sorted(results)


def test_named_rows_through_a_typed_map_into_keyed_state():
    assert average_tel_per_country() == [("China", 83), ("UK", 67)]


# --- 4. Event time: a WatermarkStrategy with bounded out-of-orderness and a TimestampAssigner
# class, key_by, a tumbling event-time window and a reduce, the pipeline of PyFlink's
# examples/datastream/windowing/tumbling_time_window.py. The one record out of order
# (("b", 6, 3) after a timestamp of 4) is within the bound, so no record is late.


class ThirdField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[2]


def window_sums(events):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    ds = env.from_collection(events, type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG()]))
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(2)).with_timestamp_assigner(
        ThirdField()
    )
    sums = (
        ds.assign_timestamps_and_watermarks(strategy)
        .key_by(lambda e: e[0], key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(5)))
        .reduce(
            lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2])),
            output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG()]),
        )
    )
    with sums.execute_and_collect() as results:
        return sorted(results)


def test_tumbling_event_time_windows_with_a_timestamp_assigner():
    events = [("a", 1, 0), ("b", 2, 1), ("a", 3, 4), ("b", 6, 3), ("a", 4, 6), ("b", 5, 9), ("a", 7, 12)]
    # Windows [0, 5), [5, 10), [10, 15): a sums 1+3, 4, 7; b sums 2+6, 5 (with each sum's latest timestamp).
    assert window_sums(events) == [("a", 4, 4), ("a", 4, 6), ("a", 7, 12), ("b", 5, 9), ("b", 8, 3)]

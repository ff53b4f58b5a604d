"""PyFlink's type arguments on every method that takes one, by PyFlink's keyword
and position, and what a declared type does to a stream's records in a job:
converted as PyFlink's serializers hand them on, or the job fails naming the
operator, the type and the record."""

from __future__ import annotations

import pytest

from tests.unit.pure.test_windows import Count
from weir import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    InvalidConfigurationError,
    JobExecutionError,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    ProcessWindowFunction,
    RecordTypeError,
    RestartStrategy,
    Row,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
    WindowFunction,
)
from weir.runtime.sources import CollectionSource

T = Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.INT()])


class Both(CoMapFunction, CoFlatMapFunction, CoProcessFunction, BroadcastProcessFunction):
    def map1(self, value):
        return value

    map2 = map1

    def flat_map1(self, value):
        yield value

    flat_map2 = flat_map1

    def process_element1(self, value, ctx):
        yield value

    process_element2 = process_element = process_broadcast_element = process_element1


def _declared(stream):
    return stream._t.record_types.main


def _calls(env):
    """Each method of PyFlink's that takes a type, called with it by keyword and by position."""
    ds = env.from_collection([1])
    keyed = ds.key_by(lambda r: r, key_type=Types.INT())
    windowed = keyed.window(TumblingEventTimeWindows.of(10))
    all_windowed = ds.window_all(TumblingEventTimeWindows.of(10))
    connected = ds.connect(env.from_collection([2]))
    rules = env.from_collection([3]).broadcast(MapStateDescriptor("rules", Types.STRING(), Types.INT()))
    by_kw = {
        "from_collection": env.from_collection([1], type_info=T),
        "from_source": env.from_source(CollectionSource([1]), source_name="s", type_info=T),
        "map": ds.map(lambda r: r, output_type=T),
        "flat_map": ds.flat_map(lambda r: [r], output_type=T),
        "process": ds.process(Both(), output_type=T),
        "keyed process": keyed.process(lambda r, ctx: [r], output_type=T),
        "keyed map": keyed.map(lambda r: r, output_type=T),
        "window reduce": windowed.reduce(lambda a, b: a, output_type=T),
        "window aggregate": windowed.aggregate(Count(), accumulator_type=Types.INT(), output_type=T),
        "window process": windowed.process(ProcessWindowFunction(), output_type=T),
        "window apply": windowed.apply(WindowFunction(), output_type=T),
        "all-window aggregate": all_windowed.aggregate(
            Count(), window_function=None, accumulator_type=Types.INT(), output_type=T
        ),
        "co map": connected.map(Both(), output_type=T),
        "co flat_map": connected.flat_map(Both(), output_type=T),
        "co process": connected.process(Both(), output_type=T),
        "keyed co process": connected.key_by(lambda r: r, lambda r: r, key_type=Types.INT()).process(
            Both(), output_type=T
        ),
        "broadcast process": ds.connect(rules).process(Both(), output_type=T),
    }
    by_position = {
        "from_collection": env.from_collection([1], T),
        "from_source": env.from_source(CollectionSource([1]), None, "s", T),
        "map": ds.map(lambda r: r, T),
        "flat_map": ds.flat_map(lambda r: [r], T),
        "process": ds.process(Both(), T),
        "keyed process": ds.key_by(lambda r: r, Types.INT()).process(lambda r, ctx: [r], T),
        "keyed map": keyed.map(lambda r: r, T),
        "window reduce": windowed.reduce(lambda a, b: a, None, T),
        "window aggregate": windowed.aggregate(Count(), None, Types.INT(), T),
        "window process": windowed.process(ProcessWindowFunction(), T),
        "window apply": windowed.apply(WindowFunction(), T),
        "all-window aggregate": all_windowed.aggregate(Count(), None, Types.INT(), T),
        "co map": connected.map(Both(), T),
        "co flat_map": connected.flat_map(Both(), T),
        "co process": connected.process(Both(), T),
        "keyed co process": connected.key_by(lambda r: r, lambda r: r, Types.INT()).process(Both(), T),
        "broadcast process": ds.connect(rules).process(Both(), T),
    }
    return by_kw, by_position


def test_every_method_takes_pyflinks_type_argument_by_keyword_and_by_position():
    by_kw, by_position = _calls(StreamExecutionEnvironment.get_execution_environment())
    assert by_kw.keys() == by_position.keys()
    assert {name: _declared(s) for name, s in by_kw.items()} == {name: T for name in by_kw}
    assert {name: _declared(s) for name, s in by_position.items()} == {name: T for name in by_kw}


def test_state_descriptors_and_output_tags_take_pyflinks_types_by_position():
    assert ValueStateDescriptor("x", Types.INT()).value_type_info == Types.INT()
    assert ListStateDescriptor("xs", Types.STRING()).elem_type_info == Types.STRING()
    rules = MapStateDescriptor("rules", Types.STRING(), Types.LIST(Types.INT()))
    assert (rules.key_type_info, rules.value_type_info) == (Types.STRING(), Types.LIST(Types.INT()))
    assert OutputTag("late", Types.INT()).type_info == Types.INT()
    assert ValueStateDescriptor("x", Types.INT(), default=0).default == 0  # weir's default goes by keyword


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda env: env.from_collection([1]).map(str, output_type=str), "output_type of Map=<class 'str'>"),
        (lambda env: env.from_collection([1]).key_by(str, key_type="int"), "key_by\\(\\) key_type='int'"),
        (lambda env: env.from_collection([1], type_info=int), "type_info of source 'collection'"),
        (lambda env: ValueStateDescriptor("count", 0), "value_type_info of state 'count'=0: .*default=..."),
        (lambda env: MapStateDescriptor("m", "key type", "value type"), "key_type_info of state 'm'='key type'"),
        (
            lambda env: env.from_collection(
                [1], WatermarkStrategy.for_monotonous_timestamps(), WatermarkStrategy.for_monotonous_timestamps()
            ),
            "give one",
        ),
    ],
)
def test_a_type_argument_that_is_not_a_type_is_refused_naming_it(make, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        make(StreamExecutionEnvironment.get_execution_environment())


def _env():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_restart_strategy(RestartStrategy.no_restart())
    return env


def test_a_row_named_output_gives_rows_with_its_names_downstream():
    env = _env()
    words = env.from_collection(["a", "bb", "a"])
    rows = words.map(lambda w: Row(w, len(w)), output_type=T)  # a positional Row takes the type's names
    got = (
        rows.key_by(lambda r: r.word)
        .map(lambda r: (r.word, r["n"], repr(r)))
        .execute_and_collect(executor="local", limit=10)
    )
    assert sorted(got) == [("a", 1, "Row(word='a', n=1)")] * 2 + [("bb", 2, "Row(word='bb', n=2)")]


def test_from_collection_with_a_row_type_makes_rows_of_tuples_and_dicts():
    env = _env()
    ds = env.from_collection([("a", 1), {"n": 2, "word": "b"}], type_info=T)
    assert sorted(ds.execute_and_collect(executor="local", limit=10), key=repr) == [
        Row(word="a", n=1),
        Row(word="b", n=2),
    ]


def test_a_tuple_output_type_gives_tuples_and_basic_types_convert():
    env = _env()
    ds = env.from_collection([[1, 2], [3, 4]]).map(
        lambda xs: xs, output_type=Types.TUPLE([Types.INT(), Types.DOUBLE()])
    )
    assert sorted(ds.execute_and_collect(executor="local", limit=10)) == [(1, 2.0), (3, 4.0)]


def test_a_record_that_does_not_fit_its_output_type_fails_the_job_naming_operator_type_and_record():
    env = _env()
    ds = env.from_collection(["a"]).map(lambda w: (w, 1), output_type=T).name("to-rows")
    with pytest.raises(JobExecutionError) as failed:
        ds.execute_and_collect(executor="local", limit=10)
    cause = failed.value.__cause__
    assert isinstance(cause, RecordTypeError) and cause.operator == "to-rows"
    assert "emitted a record that does not fit its declared type RowTypeInfo(word: String, n: Integer)" in str(cause)
    assert "return Row(...) as PyFlink requires" in str(cause) and "the record: ('a', 1)" in str(cause)


class Split(ProcessFunction):
    SHORT = OutputTag("short", Types.ROW_NAMED(["word"], [Types.STRING()]))

    def process_element(self, value, ctx):
        if len(value) < 3:
            yield self.SHORT, Row(value)
        else:
            yield value


def test_a_side_output_takes_the_type_of_the_tag_it_is_read_with():
    env = _env()
    split = env.from_collection(["ab", "abc", "x"]).process(Split(), output_type=Types.STRING())
    got = split.get_side_output(Split.SHORT).execute_and_collect(executor="local", limit=10)
    assert sorted(got, key=repr) == [Row(word="ab"), Row(word="x")]


class Tally(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", Types.INT()))

    def process_element(self, value, ctx):
        self.n.update((self.n.value() or 0) + 1)
        yield Row(value, self.n.value())


def test_keyed_process_and_window_outputs_are_typed():
    env = _env()
    tallies = env.from_collection(["a", "b", "a"]).key_by(lambda w: w).process(Tally(), output_type=T)
    assert sorted(tallies.execute_and_collect(executor="local", limit=10), key=repr) == [
        Row(word="a", n=1),
        Row(word="a", n=2),
        Row(word="b", n=1),
    ]

    env = _env()
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r[1])
    counts = (
        env.from_collection([("a", 1), ("a", 2), ("b", 3)], ws)
        .key_by(lambda r: r[0])
        .window(TumblingEventTimeWindows.of(10))
        .aggregate(Count(), output_type=Types.LONG())
    )
    assert sorted(counts.execute_and_collect(executor="local", limit=10)) == [1, 2]


def test_a_stream_reports_its_declared_type_as_pyflinks_get_type():
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection(["a"])
    assert ds.get_type() == Types.PICKLED_BYTE_ARRAY()
    typed = ds.map(lambda w: Row(w, 1), output_type=T)
    assert typed.get_type() == T and typed.key_by(lambda r: r.word).get_type() == T
    assert typed.union(typed).get_type() == T
    assert typed.process(Split()).get_side_output(Split.SHORT).get_type() == Split.SHORT.type_info


def test_a_reduce_keeps_its_streams_type_as_in_pyflink():
    env = _env().set_parallelism(1)  # one source subtask: the reduce sees the records in order
    rows = env.from_collection([("a", 1), ("a", 2)], type_info=T)
    sums = rows.key_by(lambda r: r.word).reduce(lambda a, b: Row(a[0], a[1] + b[1]))  # a positional Row ...
    assert sorted(sums.execute_and_collect(executor="local", limit=10), key=repr) == [
        Row(word="a", n=1),
        Row(word="a", n=3),
    ]  # ... named by the stream's type

    env = _env()
    rows = env.from_collection([("a", 1), ("a", 2)], type_info=T)
    tuples = rows.key_by(lambda r: r.word).reduce(lambda a, b: (a[0], a[1] + b[1])).name("sum")
    with pytest.raises(JobExecutionError) as failed:
        tuples.execute_and_collect(executor="local", limit=10)
    assert isinstance(failed.value.__cause__, RecordTypeError) and failed.value.__cause__.operator == "sum"


class Deduplicate(FlatMapFunction):
    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.BOOLEAN()))

    def flat_map(self, value):
        if not self.seen.value():
            self.seen.update(True)
            yield value


def test_a_keyed_streams_map_flat_map_and_filter_have_the_keys_state_as_in_pyflink():
    class Number(MapFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", Types.INT(), default=0))

        def map(self, value):
            self.n.update(self.n.value() + 1)
            return value, self.n.value()

    class Second(FilterFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", Types.INT(), default=0))

        def filter(self, value):
            self.n.update(self.n.value() + 1)
            return self.n.value() == 2

    words = ["a", "b", "a", "a", "b"]
    env = _env()
    keyed = env.from_collection(words).key_by(lambda w: w)
    assert sorted(keyed.map(Number()).execute_and_collect(executor="local", limit=10)) == [
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 1),
        ("b", 2),
    ]
    env = _env()
    assert sorted(
        env.from_collection(words)
        .key_by(lambda w: w)
        .flat_map(Deduplicate())
        .execute_and_collect(executor="local", limit=10)
    ) == ["a", "b"]
    env = _env()
    assert sorted(
        env.from_collection(words).key_by(lambda w: w).filter(Second()).execute_and_collect(executor="local", limit=10)
    ) == ["a", "b"]


def test_a_failing_keyed_map_is_named_as_a_map_function():
    env = _env()
    failing = env.from_collection([1]).key_by(lambda x: x).map(lambda x: 1 / 0).name("div")
    with pytest.raises(JobExecutionError) as failed:
        failing.execute_and_collect(executor="local", limit=10)
    assert "map function of operator 'div' raised ZeroDivisionError" in str(failed.value.__cause__)

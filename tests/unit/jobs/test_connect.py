"""``connect``: two streams of different types into one operator (CoMap,
CoFlatMap, CoProcess, KeyedCoProcess). The task routes each input to its method,
aligns barriers across both inputs and takes the smaller watermark; whole jobs
match plain-Python references, also after tasks are killed."""

from __future__ import annotations

import collections
import random
import threading

import pytest

from tests.checker import check_running_sums
from tests.kills import kill_one_at_random
from weir import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    InvalidJobGraphError,
    KeyedCoProcessFunction,
    OutputTag,
    RestartStrategy,
    StreamExecutionEnvironment,
    UserFunctionError,
    ValueStateDescriptor,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import EndOfData, Watermark
from weir.runtime.keygroups import key_group_for
from weir.runtime.network import Timestamped
from weir.runtime.operators import CoProcessOperator, KeyedCoProcessOperator, TwoInputOperator
from weir.runtime.testing import OperatorHarness, TaskHarness

FINAL = OutputTag("final")
BAD = OutputTag("bad")


# ---------------------------------------------------------------- the task


class _Tagged(TwoInputOperator):
    """Tags each record with the input it came from and records end_input calls."""

    def __init__(self, name, uid):
        super().__init__(name, uid)
        self.ended: list[int] = []

    def process_batch(self, records, timestamps=None):
        self.output.collect([(1, r) for r in records])

    def process_batch2(self, records, timestamps=None):
        self.output.collect([(2, r) for r in records])

    def end_input(self, input_index):
        self.ended.append(input_index)


def _sent(h, kind):
    for w in h.task.writers:
        w.flush()  # what is buffered is sent
    out = []
    for _, _, messages in h.ports.sent:
        for m in messages:
            if kind is list and isinstance(m, (list, Timestamped)):
                out += m if isinstance(m, list) else m.records
            elif kind is not list and isinstance(m, kind):
                out.append(m.timestamp)
    return out


def test_a_two_input_task_routes_each_input_aligns_barriers_across_both_and_takes_the_smaller_watermark(tmp_path):
    h = TaskHarness([("co", _Tagged)], 1, "file://" + str(tmp_path), second_input_channels=1)
    h.deliver(0, ["a"])
    h.deliver(1, ["b"])
    assert _sent(h, list) == [(1, "a"), (2, "b")]
    h.deliver(0, h.barrier(1))
    h.deliver(0, ["held"])  # behind input 1's barrier: held back until input 2's comes
    h.deliver(1, ["c"])
    assert _sent(h, list)[2:] == [(2, "c")] and h.ports.acks == []
    h.deliver(1, h.barrier(1))
    assert [a[0] for a in h.ports.acks] == [1]
    assert _sent(h, list)[3:] == [(1, "held")]
    h.deliver(0, Watermark(100))
    h.deliver(1, Watermark(50))
    h.deliver(1, Watermark(200))
    assert _sent(h, Watermark) == [50, 100]
    op = h.task.head
    h.deliver(1, EndOfData(drain=True))
    assert op.ended == [1] and not h.ports.ended_input
    h.deliver(0, EndOfData(drain=True))
    assert op.ended == [1, 0] and h.ports.ended_input


# ---------------------------------------------------------------- operators


class Sum(KeyedCoProcessFunction):
    """One running total per key over both inputs: ints ``(key, n)`` on the
    first, strings ``"key:n"`` on the second. The first record of a key sets an
    event-time timer at the end of time, which sends the key's final total to the
    side; a string that does not parse goes to the side too."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", default=0))

    def _add(self, n, ctx):
        if self.total.value() == 0:
            ctx.timer_service().register_event_time_timer(10**12)
        self.total.update(self.total.value() + n)
        yield (ctx.get_current_key(), self.total.value())

    def process_element1(self, value, ctx):
        yield from self._add(value[1], ctx)

    def process_element2(self, value, ctx):
        key, _, n = value.partition(":")
        if not n.isdigit():
            yield BAD, value
            return
        yield from self._add(int(n), ctx)

    def on_timer(self, timestamp, ctx):
        yield FINAL, (ctx.get_current_key(), self.total.value())


def _key2(line):
    return line.partition(":")[0]


def _keyed_harness(fn=None):
    fn = fn or Sum()
    calls = (("process_element1", fn.process_element1), ("process_element2", fn.process_element2))
    return OperatorHarness(KeyedCoProcessOperator("KeyedCoProcess", "co", fn, calls, (lambda r: r[0], _key2)))


def test_both_inputs_of_a_key_share_its_state_and_timers_and_keep_their_timestamps():
    h = _keyed_harness()
    assert h.process(("a", 1), ("b", 5), timestamps=[10, 20]) == [("a", 1), ("b", 5)]
    assert h.process2("a:2", "b:x", "c:4", timestamps=[30, 40, 50]) == [("a", 3), ("c", 4)]
    assert h.timestamps == [10, 20, 30, 50]
    assert h.side_output("bad") == ["b:x"]
    assert h.watermark(10**12) == []
    assert sorted(h.side_output("final")) == [("a", 3), ("b", 5), ("c", 4)]


def test_keyed_co_state_is_restored_by_key_group_after_a_rescale():
    h = _keyed_harness()
    h.process(("a", 1), ("b", 2), ("c", 3))
    snap = h.snapshot(1)
    outs = []
    for subtask in range(2):
        fn = Sum()
        calls = (("process_element1", fn.process_element1), ("process_element2", fn.process_element2))
        op = KeyedCoProcessOperator("KeyedCoProcess", "co", fn, calls, (lambda r: r[0], _key2))
        g = OperatorHarness(op, restore=[snap], subtask=subtask, parallelism=2)
        mine = [k for k in "abc" if key_group_for(k, 128) in g.operator.ctx.key_groups]  # as the partitioner routes
        assert 0 < len(mine) < 3
        outs += g.process2(*(f"{k}:10" for k in mine))
    assert sorted(outs) == [("a", 11), ("b", 12), ("c", 13)]


def test_a_failing_co_function_names_the_operator_its_method_and_the_record():
    class Boom(CoProcessFunction):
        def process_element1(self, value, ctx):
            yield value

        def process_element2(self, value, ctx):
            raise ValueError("no")

    fn = Boom()
    op = CoProcessOperator(
        "CoProcess", "co", fn, (("process_element1", fn.process_element1), ("process_element2", fn.process_element2))
    )
    h = OperatorHarness(op)
    assert h.process(1) == [1]
    with pytest.raises(
        UserFunctionError, match=r"process_element2 of operator 'CoProcess' raised ValueError: no on record 'x'"
    ):
        h.process2("x")


# ---------------------------------------------------------------- jobs


def _env(checkpoint_dir, p=2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


class Shape(CoMapFunction):
    def map1(self, value):
        return ("int", value * 2)

    def map2(self, value):
        return ("str", value.upper())


class Split(CoFlatMapFunction):
    def flat_map1(self, value):
        return range(value % 3)

    def flat_map2(self, value):
        yield from value.split()


def test_co_map_and_co_flat_map_over_inputs_of_two_types_match_the_reference(checkpoint_dir):
    ints, words = list(range(500)), [f"w{i} x{i}" for i in range(300)]
    env = _env(checkpoint_dir)
    connected = env.from_collection(ints).connect(env.from_collection(words))
    mapped = connected.map(Shape(), output_type=None).execute_and_collect(executor="local", limit=10_000)
    assert sorted(mapped) == sorted([("int", i * 2) for i in ints] + [("str", w.upper()) for w in words])
    flat = env.from_collection(ints).connect(env.from_collection(words)).flat_map(Split())
    expected = [j for i in ints for j in range(i % 3)] + [t for w in words for t in w.split()]
    assert sorted(flat.execute_and_collect(executor="local", limit=10_000), key=repr) == sorted(expected, key=repr)


def test_a_co_map_on_two_keyed_streams_reads_and_writes_each_keys_state(checkpoint_dir):
    class Count(CoMapFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", default=0))

        def map1(self, value):
            self.n.update(self.n.value() + 1)
            return (value[0], self.n.value())

        map2 = map1

    env = _env(checkpoint_dir)
    left = env.from_collection([(k, i) for i in range(50) for k in "abc"]).key_by(lambda r: r[0])
    right = env.from_collection([(k, i) for i in range(30) for k in "cd"]).key_by(lambda r: r[0])
    out = left.connect(right).map(Count()).execute_and_collect(executor="local", limit=10_000)
    per_key = collections.defaultdict(list)
    for k, n in out:
        per_key[k].append(n)
    assert {k: sorted(v) for k, v in per_key.items()} == {
        "a": list(range(1, 51)),
        "b": list(range(1, 51)),
        "c": list(range(1, 81)),
        "d": list(range(1, 31)),
    }


def _inputs(n):
    pairs = [(f"k{i % 37}", i % 11) for i in range(n)]
    lines = [f"k{i % 41}:{i % 7}" if i % 101 else f"k{i}:bad" for i in range(n)]
    return pairs, lines


def _sum_job(env, pairs, lines, out_dir, lines_per_second=None):
    first = env.from_collection(pairs)
    if lines_per_second is None:
        second = env.from_collection(lines)
    else:
        second = env.from_generator(lambda i: lines[i], count=len(lines), records_per_second=lines_per_second)
    totals = first.connect(second).key_by(lambda r: r[0], _key2).process(Sum()).name("sum")
    totals.sink_to(FileSink(f"{out_dir}/totals"))
    totals.get_side_output(FINAL).sink_to(FileSink(f"{out_dir}/final"))
    totals.get_side_output(BAD).sink_to(FileSink(f"{out_dir}/bad"))


def _check_sum_job(out_dir, pairs, lines):
    parsed = [(k, int(n)) for k, _, n in (line.partition(":") for line in lines) if n.isdigit()]
    v = check_running_sums(map(tuple, read_committed(f"{out_dir}/totals")), pairs + parsed)
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, len(pairs) + len(parsed)), v
    finals = collections.Counter()
    for k, n in pairs + parsed:
        finals[k] += n
    assert sorted(map(tuple, read_committed(f"{out_dir}/final"))) == sorted((k, t) for k, t in finals.items() if t)
    assert sorted(read_committed(f"{out_dir}/bad")) == sorted(
        line for line in lines if not line.partition(":")[2].isdigit()
    )


def test_a_keyed_co_process_job_matches_the_reference_and_its_timers_wait_for_the_slower_input(checkpoint_dir, out_dir):
    """The second input runs for about a second after the first ended: had the
    operator's watermark followed the first input alone, its end-of-time
    watermark would fire the timers early and the final totals would miss the
    second input's later records."""
    pairs, lines = _inputs(4_000)
    env = _env(checkpoint_dir)
    _sum_job(env, pairs, lines, out_dir, lines_per_second=4_000)
    env.execute("keyed-co", executor="local")
    _check_sum_job(out_dir, pairs, lines)


@pytest.mark.parametrize("seed", range(2))
def test_a_keyed_co_process_job_is_exact_when_tasks_are_killed(checkpoint_dir, out_dir, seed):
    print(f"seed={seed}")
    rng = random.Random(seed)
    pairs, lines = _inputs(150_000)
    env = _env(checkpoint_dir)
    env.set_batch_size(256)
    _sum_job(env, pairs, lines, out_dir)
    client = env.execute_async("keyed-co-kills", executor="local")
    kills = 0
    while kills < 3 and not client.status().is_terminal:
        threading.Event().wait(rng.uniform(0.05, 0.3))
        if client.checkpoints() and client.status().name == "RUNNING" and kill_one_at_random(client, rng, "sum"):
            kills += 1
    result = client.wait(120)
    assert kills >= 1 and 1 <= result.restarts <= kills
    _check_sum_job(out_dir, pairs, lines)


# ---------------------------------------------------------------- misuse


def test_misuse_of_connect_is_refused_with_what_to_do():
    env = StreamExecutionEnvironment.get_execution_environment()
    a, b = env.from_collection([1]), env.from_collection(["x"])
    with pytest.raises(InvalidJobGraphError, match="Sum is a KeyedCoProcessFunction: key both inputs first"):
        a.connect(b).process(Sum())
    with pytest.raises(InvalidJobGraphError, match="one input is keyed and the other is not"):
        a.key_by(lambda r: r).connect(b).map(Shape())
    with pytest.raises(
        TypeError, match=r"ConnectedStreams.map\(\) takes an object with map1\(\) and map2\(\) methods, got function"
    ):
        a.connect(b).map(lambda r: r)
    with pytest.raises(TypeError, match="connect.. takes a DataStream or a BroadcastStream, got list"):
        a.connect([1])
    other = StreamExecutionEnvironment.get_execution_environment().from_collection([2])
    with pytest.raises(
        InvalidJobGraphError, match="CoMap: connect.. joins two streams of one StreamExecutionEnvironment"
    ):
        a.connect(other).map(Shape())


def test_the_job_graph_feeds_each_input_by_its_own_edge_and_never_chains_a_two_input_operator():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    a = env.from_collection([("a", 1)]).map(lambda r: r).name("left")
    b = env.from_collection(["a:1"])
    a.connect(b).key_by(lambda r: r[0], _key2).process(Sum()).name("sum").print()
    graph = env.get_job_graph()
    co = graph.vertices["sum"]
    assert co.name == "sum -> Sink: PrintSink"
    assert [(e.source, e.partition.kind, e.input_index) for e in co.inputs] == [
        ("source-collection", "hash", 0),
        ("source-collection-2", "hash", 1),
    ]

"""Broadcast state: ``stream.broadcast(MapStateDescriptor(...))`` connected to a
keyed or non-keyed stream. The broadcast side writes the state, the element side
reads it, ``apply_to_keyed_state`` reaches every key. The state is checkpointed
and each subtask restores one subtask's copy: after a failover and through
rescales 2 -> 3 -> 1 the jobs match a plain-Python reference exactly."""

from __future__ import annotations

import collections

import pytest

from tests.pausing import GatedGenerator
from weir import (
    BroadcastProcessFunction,
    InvalidConfigurationError,
    InvalidJobGraphError,
    KeyedBroadcastProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    OutputTag,
    RestartStrategy,
    StreamExecutionEnvironment,
    Types,
    UserFunctionError,
    ValueStateDescriptor,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.operators import CoProcessOperator, KeyedCoProcessOperator
from weir.runtime.state import OperatorSnapshot, broadcast_copy
from weir.runtime.testing import OperatorHarness

RULES = MapStateDescriptor(
    "rules", Types.STRING(), Types.PICKLED_BYTE_ARRAY()
)  # PyFlink's shape: (name, key type, value type)
PENDING = ListStateDescriptor("pending")
UNRULED = OutputTag("unruled")


def _apply(event, factor):
    user, category, amount = event
    return (user, category, amount * factor)


class KeyedRules(KeyedBroadcastProcessFunction):
    """Events ``(user, category, amount)`` keyed by user; rules ``(category,
    factor)`` broadcast. An event whose category has a rule goes out scaled; one
    that has none yet waits in its user's keyed state until the rule comes."""

    def open(self, ctx):
        self.pending = ctx.get_list_state(PENDING)

    def process_element(self, event, ctx):
        factor = ctx.get_broadcast_state(RULES).get(event[1])
        if factor is None:
            self.pending.add(event)
            yield UNRULED, event
        else:
            yield _apply(event, factor)

    def process_broadcast_element(self, rule, ctx):
        category, factor = rule
        ctx.get_broadcast_state(RULES).put(category, factor)
        released = []

        def release(user, pending):
            waiting = list(pending.get())
            released.extend(_apply(e, factor) for e in waiting if e[1] == category)
            pending.update([e for e in waiting if e[1] != category])

        ctx.apply_to_keyed_state(PENDING, release)
        yield from released


class Rules(BroadcastProcessFunction):
    """The same on a non-keyed stream: waiting events are operator list state."""

    def open(self, ctx):
        self.pending = ctx.get_list_state(PENDING)

    process_element = KeyedRules.process_element

    def process_broadcast_element(self, rule, ctx):
        category, factor = rule
        ctx.get_broadcast_state(RULES)[category] = factor
        waiting = list(self.pending.get())
        self.pending.update([e for e in waiting if e[1] != category])
        yield from (_apply(e, factor) for e in waiting if e[1] == category)


def _operator(fn, keyed):
    calls = (("process_element", fn.process_element), ("process_broadcast_element", fn.process_broadcast_element))
    if keyed:
        return KeyedCoProcessOperator("KeyedBroadcastProcess", "rules", fn, calls, (lambda e: e[0], None), (RULES,))
    return CoProcessOperator("BroadcastProcess", "rules", fn, calls, (RULES,))


# ---------------------------------------------------------------- operators


@pytest.mark.parametrize("keyed", [True, False])
def test_the_broadcast_side_writes_rules_the_element_side_reads_them_and_waiting_events_are_released(keyed):
    h = OperatorHarness(_operator(KeyedRules() if keyed else Rules(), keyed))
    assert h.process(("ann", "food", 2), ("bob", "toys", 3), ("ann", "toys", 1)) == []
    assert h.side_output("unruled") == [("ann", "food", 2), ("bob", "toys", 3), ("ann", "toys", 1)]
    assert sorted(h.process2(("toys", 10))) == [("ann", "toys", 10), ("bob", "toys", 30)]
    assert h.process(("bob", "toys", 5)) == [("bob", "toys", 50)]
    assert h.process2(("food", 100)) == [("ann", "food", 200)]
    assert h.snapshot(1).broadcast == {"rules": {"toys": 10, "food": 100}}


class Writer(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("k", value)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("typo")).put("k", value)


def test_writing_broadcast_state_from_the_element_side_or_naming_an_unknown_one_is_a_clear_error():
    h = OperatorHarness(_operator(Writer(), keyed=False))
    with pytest.raises(
        UserFunctionError,
        match=(
            r"process_element of operator 'BroadcastProcess' raised TypeError: broadcast state 'rules' is read-only "
            r"in process_element: change it in process_broadcast_element"
        ),
    ):
        h.process(1)
    with pytest.raises(
        UserFunctionError,
        match=(
            r"process_broadcast_element of operator 'BroadcastProcess' raised ValueError: no broadcast state named "
            r"'typo': give its descriptor to stream.broadcast\(...\); this operator has \['rules'\]"
        ),
    ):
        h.process2(1)


def test_the_broadcast_side_of_a_keyed_operator_has_no_current_key():
    class KeyedWrite(KeyedRules):
        def process_broadcast_element(self, rule, ctx):
            self.pending.add(rule)

    h = OperatorHarness(_operator(KeyedWrite(), keyed=True))
    with pytest.raises(
        UserFunctionError,
        match=(
            r"process_broadcast_element of operator 'KeyedBroadcastProcess' raised TypeError: process_broadcast_element "
            r"has no current key, so no keyed state or timers: reach every key's state with ctx.apply_to_keyed_state"
        ),
    ):
        h.process2(("food", 1))


def test_apply_to_keyed_state_visits_each_key_with_state_under_the_descriptor_and_its_timers_see_the_rules():
    COUNT = ValueStateDescriptor("count", default=0)

    class Counting(KeyedBroadcastProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(COUNT)

        def process_element(self, value, ctx):
            self.count.update(self.count.value() + 1)
            ctx.timer_service().register_event_time_timer(100)

        def process_broadcast_element(self, value, ctx):
            seen = []
            ctx.apply_to_keyed_state(COUNT, lambda key, state: (seen.append((key, state.value())), state.update(0)))
            ctx.get_broadcast_state(RULES).put("reset", value)
            yield from sorted(seen)

        def on_timer(self, timestamp, ctx):
            yield (
                ctx.get_current_key(),
                ctx.get_broadcast_state(RULES).get("reset"),
                self.count.value(),
                ctx.time_domain().name,
            )

    fn = Counting()
    calls = (("process_element", fn.process_element), ("process_broadcast_element", fn.process_broadcast_element))
    h = OperatorHarness(KeyedCoProcessOperator("KeyedBroadcastProcess", "c", fn, calls, (lambda r: r, None), (RULES,)))
    h.process("a", "b", "a")
    assert h.process2("first") == [("a", 2), ("b", 1)]
    h.process("b")
    assert h.watermark(100) == [("a", "first", 0, "EVENT_TIME"), ("b", "first", 1, "EVENT_TIME")]


def test_each_subtask_restores_one_subtasks_copy_round_robin_and_a_running_ones_before_a_finished_ones():
    copies = [OperatorSnapshot(broadcast={"rules": {"v": i}}) for i in range(2)]
    assert [broadcast_copy(copies, s) for s in range(3)] == [
        {"rules": {"v": 0}},
        {"rules": {"v": 1}},
        {"rules": {"v": 0}},
    ]
    copies[0].finished = True
    exited = OperatorSnapshot(finished=True)  # a subtask that had exited left no state
    assert [broadcast_copy([exited, *copies], s) for s in range(2)] == [{"rules": {"v": 1}}, {"rules": {"v": 1}}]
    restored = broadcast_copy(copies, 0)
    restored["rules"]["v"] = 99
    assert copies[1].broadcast == {"rules": {"v": 1}}  # a copy, not the snapshot's own


@pytest.mark.parametrize("keyed", [True, False])
def test_a_rescaled_operator_gives_every_new_subtask_the_rules(keyed):
    h = OperatorHarness(_operator(KeyedRules() if keyed else Rules(), keyed), subtask=0, parallelism=2)
    h.process2(("toys", 10))
    g = OperatorHarness(_operator(KeyedRules() if keyed else Rules(), keyed), subtask=1, parallelism=2)
    g.process2(("toys", 10))
    snaps = [h.snapshot(1), g.snapshot(1)]
    for subtask in range(3):
        new = OperatorHarness(
            _operator(KeyedRules() if keyed else Rules(), keyed), restore=snaps, subtask=subtask, parallelism=3
        )
        assert new.process(("ann", "toys", 2)) == [("ann", "toys", 20)]


# ---------------------------------------------------------------- jobs

CATEGORIES = 40


def _events(n):
    return [(f"u{i % 53}", f"c{i % CATEGORIES}", i % 9) for i in range(n)]


def _rules():
    return [(f"c{c}", c + 2) for c in range(CATEGORIES)]


def _job(env, events, out_dir, keyed, gate, rules_per_second):
    """Each events reader passes on a quarter of the events, then waits for ``gate``:
    the job runs until the test has acted, however loaded the machine."""
    free = len(events) // 4
    stream = env.from_source(GatedGenerator(lambda i: events[i], len(events), gate, free), source_name="events")
    rules = env.from_generator(
        lambda i: _rules()[i], count=CATEGORIES, records_per_second=rules_per_second
    ).set_parallelism(1)
    if keyed:
        applied = stream.key_by(lambda e: e[0]).connect(rules.broadcast(RULES)).process(KeyedRules(), output_type=None)
    else:
        applied = stream.connect(rules.broadcast(RULES)).process(Rules())
    applied.name("apply").sink_to(FileSink(out_dir))


def _expected(events):
    factors = dict(_rules())
    return sorted(_apply(e, factors[e[1]]) for e in events)


def _env(checkpoint_dir, p=2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.set_max_parallelism(8)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


def _wait_for_checkpoint(client, after=0):
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" and s["checkpoint_id"] > after for s in c.checkpoints()))


def _latest(client):
    return max([c["checkpoint_id"] for c in client.checkpoints()], default=0)


@pytest.mark.parametrize("keyed", [True, False])
def test_a_broadcast_job_is_exact_after_its_operator_tasks_are_killed(checkpoint_dir, out_dir, tmp_path, keyed):
    events = _events(30_000)
    env = _env(checkpoint_dir)
    gate = str(tmp_path / "acted")
    _job(env, events, out_dir, keyed, gate, rules_per_second=40)
    client = env.execute_async("broadcast-kills", executor="local")
    for subtask in (0, 1):  # each once, with rules both before and after the checkpoint it restores
        _wait_for_checkpoint(client, _latest(client) + 5)  # 250 ms on: some rules are in it
        client.kill_task("apply", subtask)
    open(gate, "w").close()
    result = client.wait(120)
    assert result.restarts == 2
    assert sorted(map(tuple, read_committed(out_dir))) == _expected(events)


@pytest.mark.parametrize("keyed", [True, False])
def test_broadcast_state_follows_rescales_2_3_1_while_running(checkpoint_dir, out_dir, tmp_path, keyed):
    events = _events(40_000)
    env = _env(checkpoint_dir)
    gate = str(tmp_path / "acted")
    _job(env, events, out_dir, keyed, gate, rules_per_second=30)
    client = env.execute_async("broadcast-rescale", executor="local")
    for p in (3, 1):
        _wait_for_checkpoint(client, _latest(client) + 5)
        client.rescale({"apply": p})
        assert sum(t.startswith("apply/") for t in client.tasks()) == p
    open(gate, "w").close()
    result = client.wait(120)
    assert result.restarts == 0
    out = sorted(map(tuple, read_committed(out_dir)))
    assert collections.Counter(out) == collections.Counter(_expected(events))


def test_misuse_of_broadcast_is_refused_with_what_to_do():
    env = StreamExecutionEnvironment.get_execution_environment()
    events, rules = env.from_collection([("u", "c", 1)]), env.from_collection([("c", 2)])
    with pytest.raises(InvalidConfigurationError, match="broadcast state descriptor.*use MapStateDescriptor"):
        rules.broadcast(ValueStateDescriptor("rules"))
    with pytest.raises(InvalidConfigurationError, match="each needs a name of its own"):
        rules.broadcast(RULES, MapStateDescriptor("rules"))
    with pytest.raises(
        InvalidJobGraphError, match="KeyedRules is a KeyedBroadcastProcessFunction, but the stream .* is not keyed"
    ):
        events.connect(rules.broadcast(RULES)).process(KeyedRules())
    with pytest.raises(InvalidJobGraphError, match="Rules is a BroadcastProcessFunction, but the stream .* is keyed"):
        events.key_by(lambda e: e[0]).connect(rules.broadcast(RULES)).process(Rules())
    assert type(rules.broadcast()).__name__ == "DataStream"  # without descriptors: the broadcast partitioner, as before

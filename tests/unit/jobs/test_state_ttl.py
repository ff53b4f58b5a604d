"""State time-to-live (#17 item 6): value, list and map state against a plain-Python
model of Flink's TTL rules, on a clock the test moves by hand; expired entries
leave snapshots, timestamps survive restore and rescale, and a keyed job with a
TTL state gives exact output through killed tasks."""

from __future__ import annotations

import pathlib
import random
import threading

import pytest

import weir.runtime.state
from tests.kills import kill_each_after_checkpoints
from tests.pausing import GatedGenerator
from weir import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    InvalidConfigurationError,
    JobStatus,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    RestartStrategy,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
    read_keyed_state_dict,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.state_reader import _plain
from weir.runtime.testing import OperatorHarness

UpdateType = StateTtlConfig.UpdateType
StateVisibility = StateTtlConfig.StateVisibility


class Clock:
    """Processing time for state TTL, per thread: each task thread (and the test's
    own) moves its own, so subtasks running side by side never see each other's."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> int:
        return getattr(self._local, "now_ms", 0)

    def set(self, now_ms: int) -> None:
        self._local.now_ms = now_ms


CLOCK = Clock()


@pytest.fixture(autouse=True)
def _clock(monkeypatch):
    CLOCK.set(0)
    monkeypatch.setattr(weir.runtime.state, "processing_time_ms", CLOCK)


def _ttl(ms=1_000, update=UpdateType.OnCreateAndWrite, visibility=StateVisibility.NeverReturnExpired, background=True):
    builder = StateTtlConfig.new_builder(ms).set_update_type(update).set_state_visibility(visibility)
    return (builder if background else builder.disable_cleanup_in_background()).build()


def _descriptor(kind, config):
    d = kind("s")
    d.enable_time_to_live(config)
    return d


class Touch(KeyedProcessFunction):
    """Per record ``(key, op, arg)``: reads or writes the key's TTL value state and
    yields what the read saw."""

    def __init__(self, config):
        self.config = config

    def open(self, ctx):
        self.state = ctx.get_state(_descriptor(ValueStateDescriptor, self.config))

    def process_element(self, value, ctx):
        _, op, arg = value
        if op == "write":
            self.state.update(arg)
        else:
            yield self.state.value()


class Model:
    """Flink's TTL rules for one value per key, written out plainly."""

    def __init__(self, ttl_ms, update, visibility):
        self.ttl_ms, self.update, self.visibility = ttl_ms, update, visibility
        self.entries = {}  # key -> (value, last access)

    def write(self, key, value, now):
        self.entries[key] = (value, now)

    def read(self, key, now):
        if key not in self.entries:
            return None
        value, last = self.entries[key]
        if last + self.ttl_ms <= now:
            del self.entries[key]
            return value if self.visibility is StateVisibility.ReturnExpiredIfNotCleanedUp else None
        if self.update is UpdateType.OnReadAndWrite:
            self.entries[key] = (value, now)
        return value


@pytest.mark.parametrize("update", [UpdateType.OnCreateAndWrite, UpdateType.OnReadAndWrite])
@pytest.mark.parametrize(
    "visibility", [StateVisibility.NeverReturnExpired, StateVisibility.ReturnExpiredIfNotCleanedUp]
)
def test_value_state_ttl_matches_flinks_rules_over_random_reads_and_writes(update, visibility):
    seed = 17  # the sequence replays from it
    rng = random.Random(seed)
    config = _ttl(100, update, visibility)
    h = OperatorHarness.keyed_process(Touch(config), key_selector=lambda r: r[0])
    model = Model(100, update, visibility)
    now = 0
    for i in range(3_000):
        now += rng.choice((0, 1, 10, 40, 99, 100, 150))
        CLOCK.set(now)
        key = rng.choice("abc")
        if rng.random() < 0.4:
            h.process((key, "write", i))
            model.write(key, i, now)
        else:
            assert h.process((key, "read", None)) == [model.read(key, now)], f"seed {seed}, step {i}"


class Lists(KeyedProcessFunction):
    """Appends each record's value to its key's TTL list and map, and yields what both hold."""

    def open(self, ctx):
        config = _ttl(100)
        self.items = ctx.get_list_state(_named(ListStateDescriptor, "items", config))
        self.seen = ctx.get_map_state(_named(MapStateDescriptor, "seen", config))

    def process_element(self, value, ctx):
        key, v = value
        if v is not None:
            self.items.add(v)
            self.seen.put(v, True)
        yield sorted(self.items.get()), sorted(self.seen.keys()), self.seen.contains(v), self.seen.is_empty()


def test_list_elements_and_map_entries_expire_one_by_one():
    h = OperatorHarness.keyed_process(Lists(), key_selector=lambda r: r[0])
    CLOCK.set(0)
    h.process(("a", 1))
    CLOCK.set(60)
    h.process(("a", 2))
    CLOCK.set(99)
    assert h.process(("a", None)) == [([1, 2], [1, 2], False, False)]
    CLOCK.set(100)  # 1 is 100 ms old: gone; 2 lives until 160
    assert h.process(("a", None)) == [([2], [2], False, False)]
    CLOCK.set(160)
    assert h.process(("a", None)) == [([], [], False, True)]
    assert (
        not h.operator.keyed_backend.tables["items"] and not h.operator.keyed_backend.tables["seen"]
    )  # cleaned on access


def _write_then_snapshot(background, written_ms, snapshot_ms):
    h = OperatorHarness.keyed_process(Touch(_ttl(1_000, background=background)), key_selector=lambda r: r[0])
    for key, t in written_ms.items():
        CLOCK.set(t)
        h.process((key, "write", key.upper()))
    CLOCK.set(snapshot_ms)
    return h, h.snapshot(1)


def _restored(snapshot, now_ms, subtask=0, parallelism=1, background=True):
    CLOCK.set(now_ms)
    return OperatorHarness.keyed_process(
        Touch(_ttl(1_000, background=background)),
        lambda r: r[0],
        restore=[snapshot],
        subtask=subtask,
        parallelism=parallelism,
    )


def _stored_keys(snapshot):
    return sorted(snapshot.keyed.tables.get("s", {}))


def test_expired_entries_leave_snapshots_unless_background_cleanup_is_off():
    h, snap = _write_then_snapshot(True, {"a": 0, "b": 500}, snapshot_ms=1_200)
    assert _stored_keys(snap) == ["b"]
    assert "a" not in h.operator.keyed_backend.tables["s"]  # and the state kept is swept too
    _, snap = _write_then_snapshot(False, {"a": 0, "b": 500}, snapshot_ms=1_200)
    assert _stored_keys(snap) == ["a", "b"]  # disable_cleanup_in_background(): only reads clean up
    h = _restored(snap, 1_200, background=False)
    assert h.process(("a", "read", None), ("b", "read", None)) == [None, "B"]  # still expired after the restore
    cleaned = StateTtlConfig.new_builder(1_000).disable_cleanup_in_background().cleanup_full_snapshot().build()
    assert cleaned.cleanup_at_snapshot


def test_timestamps_survive_restore_so_expired_state_stays_expired():
    _, snap = _write_then_snapshot(True, {"a": 0, "b": 400}, snapshot_ms=900)
    assert _stored_keys(snap) == ["a", "b"]  # neither expired at the checkpoint
    # Restored later: each entry keeps its own write time, not the restore's.
    assert _restored(snap, 999).process(("a", "read", None), ("b", "read", None)) == ["A", "B"]
    assert _restored(snap, 1_000).process(("a", "read", None), ("b", "read", None)) == [None, "B"]
    assert _restored(snap, 5_000).process(("a", "read", None), ("b", "read", None)) == [None, None]


def test_ttl_state_rescales_by_key_group_with_its_timestamps():
    keys = {f"k{i}": i for i in range(40)}  # k<i> written at i ms
    _, snap = _write_then_snapshot(True, keys, snapshot_ms=39)
    seen = {}
    for subtask in range(2):
        h = _restored(snap, 1_020, subtask=subtask, parallelism=2)  # keys written before 20 ms expired
        for key in list(h.operator.keyed_backend.tables["s"]):
            seen[key] = h.process((key, "read", None))[0]
    assert seen == {k: (k.upper() if t > 20 else None) for k, t in keys.items()}


def test_misused_ttl_names_the_setting():
    with pytest.raises(InvalidConfigurationError, match="state TTL"):
        StateTtlConfig.new_builder(-1)
    with pytest.raises(InvalidConfigurationError, match="state TTL update type.*OnReadAndWrite"):
        StateTtlConfig.new_builder(Time.seconds(1)).set_update_type("OnReadAndWrite")
    with pytest.raises(InvalidConfigurationError, match="time to live of state 'x'"):
        ValueStateDescriptor("x").enable_time_to_live(Time.seconds(1))
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match="broadcast state 'rules'"):
        env.from_collection([1]).broadcast(_named(MapStateDescriptor, "rules", _ttl()))
    disabled = StateTtlConfig.new_builder(Time.seconds(1)).set_update_type(UpdateType.Disabled).build()
    assert _descriptor(ValueStateDescriptor, disabled).ttl_config is None


def _named(kind, name, config):
    d = kind(name)
    d.enable_time_to_live(config)
    return d


class OperatorListWithTtl(KeyedProcessFunction):
    def open(self, ctx):
        ctx.get_list_state(_named(ListStateDescriptor, "buffer", _ttl()))

    def process_element(self, value, ctx):
        yield value


def test_operator_state_with_ttl_is_refused_naming_the_operator(out_dir):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection([1]).process(OperatorListWithTtl()).name("buffering").sink_to(FileSink(out_dir))
    with pytest.raises(Exception, match="operator 'buffering' is not keyed, and only keyed state has a time to live"):
        env.execute("ttl-misuse", executor="local")


# ---------------------------------------------------------------- a whole job
TTL_MS = 30


class Sessions(KeyedProcessFunction):
    """Per key: how many of its records lie within the TTL of one another (a
    count that restarts after a gap of TTL_MS), and its values still alive in a
    TTL list. A record's ``t`` is the processing time its subtask sees."""

    def open(self, ctx):
        self.count = ctx.get_state(_named(ValueStateDescriptor, "count", _ttl(TTL_MS)))
        self.recent = ctx.get_list_state(_named(ListStateDescriptor, "recent", _ttl(TTL_MS)))

    def process_element(self, value, ctx):
        key, t = value
        CLOCK.set(t)
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.recent.add(t)
        yield key, t, n, len(list(self.recent.get()))


def _job_records(n, seed=7):
    rng = random.Random(seed)
    return [(f"k{rng.randrange(12)}", i) for i in range(n)]


def _job_reference(records):
    out, last, recent = [], {}, {}
    for key, t in records:
        n = last[key][1] + 1 if key in last and t - last[key][0] < TTL_MS else 1
        last[key] = (t, n)
        alive = [s for s in recent.get(key, []) if t - s < TTL_MS] + [t]
        recent[key] = alive
        out.append((key, t, n, len(alive)))
    return out


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_ttl_job_matches_the_reference_through_killed_tasks_and_a_rescale(checkpoint_dir, out_dir, tmp_path, backend):
    """Each entry's write time travels through the restores of two kills and a
    rescale from 2 to 3 subtasks, on either backend."""
    n = 30_000
    records = _job_records(n)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_state_backend(backend())
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    # One source subtask: each key's records reach its subtask in order, so its clock only moves forward.
    # Half the records at 7,500 a second, the rest once the kills and the rescale are done.
    gate = tmp_path / "rescaled"
    (
        env.from_source(GatedGenerator(lambda i: records[i], n, str(gate), n // 2, 7_500), source_name="generator")
        .set_parallelism(1)
        .key_by(lambda r: r[0])
        .process(Sessions())
        .name("sessions")
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("ttl-kill", executor="local")
    kill_each_after_checkpoints(client, "sessions")
    after = max(c["checkpoint_id"] for c in client.checkpoints()) + 3  # state saved after the restores
    client.wait_until(
        lambda c: any(s["status"] == "COMPLETED" and s["checkpoint_id"] >= after for s in c.checkpoints())
    )
    client.rescale({"sessions": 3})
    assert sum(t.startswith("sessions/") for t in client.tasks()) == 3
    gate.touch()
    assert client.wait(120).restarts == 2
    want = _job_reference(records)
    assert any(r[2] > 1 for r in want) and any(r[2] == 1 and r[1] > TTL_MS for r in want)  # both outcomes occur
    assert sorted(map(tuple, read_committed(out_dir))) == sorted(want)


class Kept(KeyedProcessFunction):
    """Keeps each record's value in a TTL value, list and map state, and in a plain
    value state as a pair that looks like a TTL entry (value, int)."""

    def open(self, ctx):
        config = _ttl(60_000)
        self.value = ctx.get_state(_named(ValueStateDescriptor, "value", config))
        self.items = ctx.get_list_state(_named(ListStateDescriptor, "items", config))
        self.seen = ctx.get_map_state(_named(MapStateDescriptor, "seen", config))
        self.pair = ctx.get_state(ValueStateDescriptor("pair"))

    def process_element(self, value, ctx):
        key, v = value
        self.value.update(v)
        self.items.add(v)
        self.seen.put(v, -v)
        self.pair.update((v, 7))
        yield value


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_ttl_entries_are_stored_as_plain_tuples_and_read_back_without_their_timestamps(
    checkpoint_dir, out_dir, backend
):
    """A TTL entry is a plain ``(value, last_access_ms)`` tuple, which pickles five
    times as fast as the class of weir's it was (no class name in the state files);
    read_keyed_state knows the TTL states from the snapshot, so a plain state whose
    values are pairs is read as it is."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_state_backend(backend())
    env.enable_checkpointing(60_000)  # only the final checkpoint
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    records = [(k, 10 * k + i) for i in range(3) for k in range(50)]
    env.from_collection(records).key_by(lambda r: r[0]).process(Kept()).uid("kept").sink_to(FileSink(out_dir))
    assert env.execute("ttl-plain", executor="local").status is JobStatus.FINISHED
    (final,) = pathlib.Path(checkpoint_dir.removeprefix("file://")).glob("ttl-plain/*/chk-*")
    state_files = [p for p in final.parent.parent.rglob("*") if p.is_file()]
    assert state_files and not [p for p in state_files if b"TtlValue" in p.read_bytes()]
    last = {k: 10 * k + 2 for k in range(50)}
    assert read_keyed_state_dict(str(final), "kept", "value") == last
    assert read_keyed_state_dict(str(final), "kept", "items") == {k: [10 * k, 10 * k + 1, 10 * k + 2] for k in last}
    assert read_keyed_state_dict(str(final), "kept", "seen") == {
        k: {10 * k + i: -(10 * k + i) for i in range(3)} for k in last
    }
    assert read_keyed_state_dict(str(final), "kept", "pair") == {k: (v, 7) for k, v in last.items()}


def test_a_snapshot_of_the_earlier_ttl_entries_still_restores():
    """Snapshots before 2026-11-29 hold ``TtlValue`` entries: they restore, expire
    as theirs, and read without their timestamps."""
    _, snap = _write_then_snapshot(True, {"a": 0, "b": 400}, snapshot_ms=900)
    snap.keyed.tables["s"] = {k: weir.runtime.state.TtlValue(*entry) for k, entry in snap.keyed.tables["s"].items()}
    assert _restored(snap, 1_000).process(("a", "read", None), ("b", "read", None)) == [None, "B"]
    # read_keyed_state strips their timestamps too, though such snapshots name no TTL states.
    old = weir.runtime.state.TtlValue
    assert _plain({"a": old("A", 0)}, ttl=False) == {"a": "A"}
    assert _plain({"a": [old(1, 0), old(2, 5)]}, ttl=False) == {"a": [1, 2]}
    assert _plain({"a": {"x": old(1, 0)}}, ttl=False) == {"a": {"x": 1}}
    assert _plain({"a": ("A", 0)}, ttl=False) == {"a": ("A", 0)}  # a plain state's pair, as it is

"""Incremental keyed snapshots: what a delta holds, how a chain restores (every
state type, at any parallelism), when a chain writes everything again, what a
backend keeps for later deltas however many checkpoints fail, and which shared
files a discard may delete."""

from __future__ import annotations

import random

import pytest

from weir.runtime.incremental import NEWEST_KEPT, REMOVED, KeyedSnapshot, merged
from weir.runtime.keygroups import KeyGroupRange, key_group_for, operator_index_for_key_group
from weir.runtime.serialization import dumps, loads
from weir.runtime.shared_state import SharedFiles
from weir.runtime.state import (
    AggregatingStateDescriptor,
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
    keyed_state,
)
from weir.runtime.timers import InternalTimerService, TimeDomain

MAX_P = 16


def _backend(p: int, i: int) -> KeyedStateBackend:
    return KeyedStateBackend(MAX_P, KeyGroupRange.for_subtask(MAX_P, p, i), clock=lambda: 1_000)


def _owner(key, p: int) -> int:
    return operator_index_for_key_group(MAX_P, p, key_group_for(key, MAX_P))


def _snapshot(b: KeyedStateBackend, checkpoint_id: int, base: int | None) -> KeyedSnapshot:
    b.incremental_base = base
    return loads(dumps(b.snapshot(checkpoint_id)))  # as a restore reads it: a copy, REMOVED by reference


def _live(b: KeyedStateBackend) -> dict:
    return {name: dict(t) for name, t in b.tables.items() if t}


def test_a_checkpoint_on_its_base_writes_only_the_keys_touched_since():
    b = _backend(1, 0)
    total = keyed_state(b, ValueStateDescriptor("total", default=0))
    for key in range(1_000):
        b.touch(key)
        total.update(key)
    first = _snapshot(b, 1, None)
    for key in range(10):
        b.touch(key)
        total.update(total.value() + 1) if key % 2 else total.clear()
    second = _snapshot(b, 2, base=1)
    assert (first.delta, len(first.tables["total"])) == (False, 1_000)
    assert second.delta and second.tables == {"total": {k: (k + 1 if k % 2 else REMOVED) for k in range(10)}}, (
        second.tables
    )
    assert merged([first, second]).tables == _live(b)


def test_without_a_base_it_wrote_itself_a_backend_writes_everything():
    b = _backend(1, 0)
    b.touch("a")
    b.table("v")["a"] = 1
    assert not _snapshot(b, 1, base=None).delta
    b.touch("a")
    assert not _snapshot(b, 2, base=7).delta  # 7: a checkpoint of another attempt


HOT, COLD = 1_000, 10


@pytest.mark.parametrize("told", [True, False], ids=["aborts-told", "no-word"])
def test_a_thousand_failed_checkpoints_on_hot_keys_keep_at_most_three_bases_and_the_next_delta_restores_exactly(told):
    """A store that hangs fails every checkpoint after the first for an hour. Before,
    the backend kept each failed snapshot's touched keys (here 1,000 sets of 1,000
    keys) and unioned them all at every snapshot."""
    b = _backend(1, 0)
    total = keyed_state(b, ValueStateDescriptor("total", default=0))
    for key in range(HOT + COLD):
        b.touch(key)
        total.update(0)
    first = _snapshot(b, 1, None)
    b.checkpoint_completed(1)
    for cid in range(2, 1002):
        for key in range(HOT):
            b.touch(key)
            total.update(total.value() + 1)
        if cid == 2:  # keys touched in the first failed interval only: the next delta must still hold them
            for key in range(HOT, HOT + COLD):
                b.touch(key)
                total.clear()
        assert _snapshot(b, cid, base=1).delta
        if told:
            b.checkpoint_aborted(cid)
        assert len(b.kept_bases()) <= (2 if told else 1 + NEWEST_KEPT), b.kept_bases()
    last = _snapshot(b, 1002, base=1)
    assert last.delta and b.kept_bases()[0] == 1
    restored = _backend(1, 0)
    restored.restore([(b.key_groups, merged([first, last]))])
    assert _live(restored) == {"total": {k: 1000 for k in range(HOT)}}


def test_with_two_checkpoints_in_flight_the_older_is_still_a_base_once_it_completes():
    b = _backend(1, 0)
    for key in range(100):
        b.touch(key)
        b.table("v")[key] = 0
    _snapshot(b, 1, None)
    b.checkpoint_completed(1)
    b.touch(1)
    _snapshot(b, 2, base=1)
    b.touch(2)
    _snapshot(b, 3, base=1)  # taken while 2 is still pending
    b.checkpoint_completed(2)
    b.touch(3)
    fourth = _snapshot(b, 4, base=2)
    assert fourth.delta and set(fourth.tables["v"]) == {2, 3}
    assert b.kept_bases() == [2, 3, 4]


def _touch_everything(backends, p, rnd, step):
    """One interval's records: every state type changes for a random set of keys."""
    for key in rnd.sample(range(300), 60):
        b = backends[_owner(key, p)]
        b.touch(key)
        states = {d.name: keyed_state(b, d) for d in _descriptors()}
        op = rnd.randrange(4)
        if op == 0:
            for s in states.values():
                s.clear()
            continue
        states["value"].update((key, step))
        states["list"].add(step)
        states["map"].put(step % 3, key)
        if op == 1:
            states["map"].remove((step + 1) % 3)
        states["reducing"].add(step)
        states["aggregating"].add(step)
        states["ttl"].update(step)
        timers = InternalTimerService(b)
        timers.register(TimeDomain.EVENT_TIME, step, namespace=op)
        if op == 2:
            timers.delete(TimeDomain.EVENT_TIME, step - 1, namespace=op)


class _Count:
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator


def _descriptors():
    ttl = ValueStateDescriptor("ttl")
    ttl.enable_time_to_live(StateTtlConfig.new_builder(60_000).build())
    return [
        ValueStateDescriptor("value"),
        ListStateDescriptor("list"),
        MapStateDescriptor("map"),
        ReducingStateDescriptor("reducing", lambda a, b: a + b),
        AggregatingStateDescriptor("aggregating", _Count()),
        ttl,
    ]


def test_every_state_type_restores_from_its_chain_at_any_parallelism():
    rnd = random.Random(7)
    old = [_backend(2, i) for i in range(2)]
    chains: list[list[KeyedSnapshot]] = [[], []]
    for cid in range(1, 9):
        _touch_everything(old, 2, rnd, cid)
        for i, b in enumerate(old):
            chains[i].append(_snapshot(b, cid, base=cid - 1 if cid > 1 else None))
    assert {s.delta for chain in chains for s in chain[1:]} == {True, False}, "full snapshots amid the deltas"
    expected = {}
    for b in old:
        for name, table in _live(b).items():
            expected.setdefault(name, {}).update(table)
    assert set(expected) == {"value", "list", "map", "reducing", "aggregating", "ttl", "_timers/event"}
    for p in (1, 2, 3):
        restored = {}
        for i in range(p):
            b = _backend(p, i)
            b.restore([(old[j].key_groups, merged(chains[j])) for j in range(2)])
            for name, table in b.tables.items():
                assert not restored.get(name, {}).keys() & table.keys(), "a key restored twice"
                restored.setdefault(name, {}).update(table)
        assert {n: t for n, t in restored.items() if t} == expected, p


def test_a_chain_writes_everything_again_once_its_deltas_outweigh_its_full_snapshot():
    b = _backend(1, 0)
    for key in range(100):
        b.touch(key)
        b.table("v")[key] = 0
    kinds = []
    for cid in range(1, 8):
        kinds.append("delta" if _snapshot(b, cid, base=cid - 1 if cid > 1 else None).delta else "full")
        for key in range(40):
            b.touch(key)
    assert kinds == ["full", "delta", "delta", "full", "delta", "delta", "full"]  # 40 + 40 <= 100 < 40 * 3


def test_older_files_grouped_by_key_group_still_restore():
    legacy = {key_group_for(k, MAX_P): {} for k in range(50)}
    for k in range(50):
        legacy[key_group_for(k, MAX_P)].setdefault("v", {})[k] = -k
    news = [_backend(3, i) for i in range(3)]
    for b in news:
        b.restore([(KeyGroupRange(0, MAX_P), legacy)])
    assert sorted(k for b in news for k in b.table("v")) == list(range(50))
    assert all(_owner(k, 3) == i for i, b in enumerate(news) for k in b.table("v"))


def _metadata(*uris):
    handles = [
        {"uri": uris[-1], "sha256": "0", "size": 1, "base": [{"uri": u, "sha256": "0", "size": 1} for u in uris[:-1]]}
    ]
    return {"operators": {"op": {"handles": handles}}}


def test_a_file_a_kept_checkpoint_still_names_survives_the_discard_of_the_one_that_wrote_it():
    shared = SharedFiles("file:///run/shared")
    shared.completed(1, _metadata("file:///run/shared/a-1"))
    shared.completed(2, _metadata("file:///run/shared/a-1", "file:///run/shared/a-2"))
    assert shared.discarded([1]) == []  # checkpoint 2 builds on a-1
    assert sorted(shared.discarded([2])) == ["file:///run/shared/a-1", "file:///run/shared/a-2"]


def test_a_base_a_pending_checkpoint_builds_on_is_deleted_only_after_it_ended():
    shared = SharedFiles("file:///run/shared")
    shared.completed(1, _metadata("file:///run/shared/a-1"))
    shared.build_on(1)
    shared.completed(2, _metadata("file:///run/shared/b-2"))  # a full one: it names nothing of 1
    assert shared.discarded([1]) == []
    assert shared.built(1) == ["file:///run/shared/a-1"]


def test_files_outside_the_runs_shared_folder_are_never_deleted():
    shared = SharedFiles("file:///run/shared")
    shared.completed(5, _metadata("file:///old-run/shared/a-5", "file:///run/shared/a-6"))
    assert shared.discarded([5]) == ["file:///run/shared/a-6"]
    shared.completed(6, _metadata("file:///run/shared/a-7"))
    assert shared.unreferenced([]) == []


def test_snapshots_pickle_without_the_memo_and_still_take_cycles():
    from weir.runtime.serialization import dumps_state

    shared = ("a", 1)
    cyclic: list = [1]
    cyclic.append(cyclic)
    back = loads(dumps_state({"x": shared, "y": shared, "removed": REMOVED, "cycle": cyclic}))
    assert back["x"] == back["y"] == shared and back["removed"] is REMOVED
    assert back["cycle"][1] is back["cycle"], "a cycle is pickled with the memo, and restores as one"


class _Acks:
    def __init__(self):
        self.handles = {}

    def acknowledge_checkpoint(self, checkpoint_id, handle, operators, alignment_ms):
        self.handles[checkpoint_id] = handle

    def decline_checkpoint(self, checkpoint_id, reason, detail):
        raise AssertionError(detail)


def test_a_tasks_chain_of_files_is_cut_at_its_length_limit(tmp_path):
    from weir.runtime.events import CheckpointBarrier
    from weir.runtime.snapshot_writer import MAX_CHAIN, SnapshotWriter

    acks = _Acks()
    writer = SnapshotWriter("v/0", "attempt", acks)
    bases = []
    for cid in range(1, MAX_CHAIN + 3):
        barrier = CheckpointBarrier(cid, 0, location=f"file://{tmp_path}/run/chk-{cid}", base=cid - 1 or None)
        bases.append(writer.base_for(barrier))
        writer.submit(barrier, b"state", {}, bases[-1], [])
        writer.wait()
    writer.shutdown()
    lengths = [len(acks.handles[cid].chain) for cid in sorted(acks.handles)]
    assert max(lengths) == MAX_CHAIN and lengths[MAX_CHAIN] == 1, lengths  # the next one writes everything
    assert bases[MAX_CHAIN] is None and bases[MAX_CHAIN + 1] == MAX_CHAIN + 1


class _HeldUpload:
    """A backend's upload that waits for ``go`` (a slow store), then uploads one
    file of its own and names one that an earlier checkpoint uploaded."""

    def __init__(self, local: str, reused: str):
        import threading

        self.started, self.go, self.local, self.reused = threading.Event(), threading.Event(), local, reused

    def run(self, folder, prefix, shared):
        from weir.runtime.storage import DbFile, StateHandle, join, upload_file

        self.started.set()
        self.go.wait(10)
        return (
            DbFile("db/new.sst", upload_file(self.local, join(folder, f"{prefix}-db-new.sst"))),
            DbFile("db/old.sst", StateHandle(self.reused, "", 3)),
        )


def test_a_failed_tasks_write_under_way_deletes_its_files_but_not_a_reused_upload_and_a_queued_one_never_runs(
    tmp_path,
):
    """Before, a write under way when its task failed went on, and its files stayed
    for ever: no checkpoint names them, and a takeover's sweep had run already."""
    import threading

    from weir.runtime.events import CheckpointBarrier
    from weir.runtime.snapshot_writer import SnapshotWriter

    (tmp_path / "run" / "shared").mkdir(parents=True)
    (tmp_path / "run" / "shared" / "v-0-1-attempt-db-old.sst").write_bytes(b"sst")
    (tmp_path / "sst").write_bytes(b"sst")
    upload = _HeldUpload(str(tmp_path / "sst"), f"file://{tmp_path}/run/shared/v-0-1-attempt-db-old.sst")
    acks = _Acks()
    writer = SnapshotWriter("v/0", "attempt", acks)
    for cid in (2, 3):
        writer.submit(
            CheckpointBarrier(cid, 0, location=f"file://{tmp_path}/run/chk-{cid}"), b"state", {}, None, [upload]
        )
    assert upload.started.wait(10)
    ended = threading.Thread(target=writer.shutdown, kwargs={"abandon": True})
    ended.start()
    upload.go.set()
    ended.join(10)
    assert not ended.is_alive()
    left = sorted(p.name for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert acks.handles == {}
    assert left == ["v-0-1-attempt-db-old.sst"], left  # checkpoint 2's own files are gone, 3 never ran


class _FailingUpload:
    def run(self, folder, prefix, shared):
        raise OSError(28, "No space left on device")


def test_a_write_that_fails_deletes_what_the_uploads_before_it_made_and_declines(tmp_path):
    from weir.runtime.events import CheckpointBarrier
    from weir.runtime.snapshot_writer import SnapshotWriter

    (tmp_path / "run" / "shared").mkdir(parents=True)
    (tmp_path / "run" / "shared" / "v-0-1-attempt-db-old.sst").write_bytes(b"sst")
    (tmp_path / "sst").write_bytes(b"sst")
    first = _HeldUpload(str(tmp_path / "sst"), f"file://{tmp_path}/run/shared/v-0-1-attempt-db-old.sst")
    first.go.set()
    declined = []
    acks = _Acks()
    acks.decline_checkpoint = lambda cid, reason, detail: declined.append((cid, detail))
    writer = SnapshotWriter("v/0", "attempt", acks)
    writer.submit(
        CheckpointBarrier(2, 0, location=f"file://{tmp_path}/run/chk-2"), b"state", {}, None, [first, _FailingUpload()]
    )
    writer.wait()
    writer.shutdown()
    assert declined == [(2, "writing its state failed: [Errno 28] No space left on device")]
    assert sorted(p.name for p in (tmp_path / "run").rglob("*") if p.is_file()) == ["v-0-1-attempt-db-old.sst"]

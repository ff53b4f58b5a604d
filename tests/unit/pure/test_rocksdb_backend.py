"""The RocksDB keyed state backend: every state type on both backends, its
checkpoints (files uploaded once, named again), rescaling 2 -> 3 -> 1 from its
snapshots, restores across backends both ways, which uploaded files a discard
may delete, the settings it refuses, and a full local disk named as such."""

from __future__ import annotations

import os
import random

import pytest

from tests.unit.pure.test_incremental import MAX_P, _descriptors, _owner, _touch_everything
from weir import EmbeddedRocksDBStateBackend, InvalidConfigurationError, StreamExecutionEnvironment
from weir.runtime.errors import LocalDiskFullError
from weir.runtime.incremental import Keyed, KeyedSnapshot, merged
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.rocksdb_backend import Changes, RocksDBKeyedStateBackend, RocksDBSettings, RocksDBSnapshot, state_id
from weir.runtime.rocksdb_timers import timer_of
from weir.runtime.serialization import dumps, loads
from weir.runtime.shared_state import SharedFiles
from weir.runtime.state import (
    KeyedStateBackend,
    ListStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
    _Ttl,
    keyed_state,
)
from weir.runtime.storage import StateHandle, handle_to_json
from weir.runtime.timer_queues import TIMERS

STATES = ["value", "list", "map", "reducing", "aggregating", "ttl", "_timers/event"]


def _heap(p: int, i: int) -> KeyedStateBackend:
    return KeyedStateBackend(MAX_P, KeyGroupRange.for_subtask(MAX_P, p, i), clock=lambda: 1_000)


OFTEN = RocksDBSettings(cache_entries=7)  # writes the cache back every few records
# Any change outgrows the write buffer, so every checkpoint materializes (no change logs).
MATERIALIZING = RocksDBSettings(cache_entries=7, write_buffer_bytes=1)


def _rocks(p: int, i: int, config: RocksDBSettings = OFTEN) -> RocksDBKeyedStateBackend:
    return RocksDBKeyedStateBackend(
        MAX_P, KeyGroupRange.for_subtask(MAX_P, p, i), config, f"test-{i}", "op", "op", clock=lambda: 1_000
    )


BACKENDS = {"heap": _heap, "rocksdb": _rocks}


class _Storage:
    """Checkpoints as a task writes them: the snapshot pickled, the uploads run
    into one shared folder, the state handle naming what they uploaded."""

    def __init__(self, folder) -> None:
        self.shared = f"file://{folder}/shared"
        self.handles: dict[tuple[int, int], StateHandle] = {}

    def checkpoint(self, b: KeyedStateBackend, subtask: int, cid: int, base: int | None) -> Keyed:
        b.incremental_base = base
        snap = loads(dumps(b.snapshot(cid)))
        files = tuple(f for u in b.take_uploads() for f in u.run(self.shared, f"t{subtask}-{cid}", shared=True))
        self.handles[subtask, cid] = StateHandle(f"{self.shared}/t{subtask}-{cid}.state", "0", 1, files=files)
        return snap.located(files) if isinstance(snap, RocksDBSnapshot) else snap

    def metadata(self, cid: int) -> dict:
        handles = [handle_to_json(h) for (_, c), h in self.handles.items() if c == cid]
        return {"operators": {"op": {"handles": handles}}}


def stored_timers(b: KeyedStateBackend, name: str) -> dict:
    """The timers ``b`` stores under ``name``, as the heap keeps them: key -> {(timestamp, namespace)}."""
    if not isinstance(b, RocksDBKeyedStateBackend):
        return dict(b.table(name))
    b.write_back()
    out: dict = {}
    for db_key, raw in b.scan(state_id(name)):
        ts, key, ns = timer_of(db_key, raw)
        out.setdefault(key, set()).add((ts, ns))
    return out


def _contents(backends: list[KeyedStateBackend]) -> dict[str, dict]:
    """Every state's entries over ``backends``, each key in one backend only."""
    out: dict[str, dict] = {}
    for b in backends:
        for name in STATES:
            entries = stored_timers(b, name) if name.startswith(TIMERS) else dict(b.table(name).items())
            assert not out.get(name, {}).keys() & entries.keys(), f"a key of {name} in two subtasks"
            out.setdefault(name, {}).update(entries)
    return {n: t for n, t in out.items() if t}


def _close(backends) -> None:
    for b in backends:
        b.close()


@pytest.mark.parametrize("before", BACKENDS)
@pytest.mark.parametrize("after", BACKENDS)
def test_every_state_type_restores_on_either_backend_at_any_parallelism(before, after, tmp_path):
    rnd = random.Random(11)
    storage = _Storage(tmp_path)
    old = [BACKENDS[before](2, i) for i in range(2)]
    chains: list[list[Keyed]] = [[], []]
    for cid in range(1, 6):
        _touch_everything(old, 2, rnd, cid)
        for i, b in enumerate(old):
            chains[i].append(storage.checkpoint(b, i, cid, base=cid - 1 if cid > 1 else None))
    expected = _contents(old)
    assert set(expected) == set(STATES)
    for p in (1, 2, 3):
        new = [BACKENDS[after](p, i) for i in range(p)]
        for b in new:
            b.restore([(old[j].key_groups, merged(chains[j])) for j in range(2)])
        assert _contents(new) == expected, (before, after, p)
        assert all(_owner(k, p) == i for i, b in enumerate(new) for k in b.table("value")), "keys where they belong"
        _close(new)
    _close(old)


def test_rescaling_2_to_3_to_1_from_rocksdb_snapshots(tmp_path):
    storage = _Storage(tmp_path)
    two = [_rocks(2, i) for i in range(2)]
    for key in range(500):
        b = two[_owner(key, 2)]
        b.touch(key)
        keyed_state(b, ValueStateDescriptor("v")).update(key * 10)
        keyed_state(b, ListStateDescriptor("l")).add(key)
    snaps = [storage.checkpoint(b, i, 1, None) for i, b in enumerate(two)]
    three = [_rocks(3, i) for i in range(3)]
    for b in three:
        b.restore([(two[j].key_groups, snaps[j]) for j in range(2)])
        assert all(_owner(k, 3) == b.key_groups.start * 3 // MAX_P for k in b.table("v"))
    for key in range(0, 500, 5):  # go on changing state at parallelism 3
        b = three[_owner(key, 3)]
        b.touch(key)
        keyed_state(b, ListStateDescriptor("l")).add(-key)
    snaps = [storage.checkpoint(b, 10 + i, 2, None) for i, b in enumerate(three)]
    (one,) = [_rocks(1, 0)]
    one.restore([(three[j].key_groups, snaps[j]) for j in range(3)])
    assert dict(one.table("v").items()) == {k: k * 10 for k in range(500)}
    assert dict(one.table("l").items()) == {k: [k, -k] if k % 5 == 0 else [k] for k in range(500)}
    _close([*two, *three, one])


def test_a_materializing_checkpoint_uploads_only_the_ssts_its_base_did_not_name(tmp_path):
    storage = _Storage(tmp_path)
    b = _rocks(1, 0, MATERIALIZING)
    for cid, keys in enumerate((range(100), range(100, 110), range(110, 120)), start=1):
        for key in keys:
            b.touch(key)
            keyed_state(b, ValueStateDescriptor("v")).update(key)
        storage.checkpoint(b, 0, cid, base=cid - 1 if cid > 1 else None)
    ssts = [{f.handle.uri for f in storage.handles[0, cid].files if f.name.endswith(".sst")} for cid in (1, 2, 3)]
    assert ssts[0] < ssts[1] < ssts[2], "each names its base's SSTs again and adds one"
    assert all(uri.split("/")[-1].startswith("t0-1-") for uri in ssts[0]), "uploaded once, by checkpoint 1"
    b.close()


def test_an_upload_that_fails_deletes_the_files_it_uploaded_but_not_those_its_base_named(tmp_path, monkeypatch):
    """Before, the SSTs uploaded before the failing one stayed in the shared folder,
    named by no checkpoint, for the run's life."""
    from weir.runtime import rocksdb_backend

    storage = _Storage(tmp_path)
    b = _rocks(1, 0, MATERIALIZING)
    for cid, keys in enumerate((range(100), range(100, 110)), start=1):
        for key in keys:
            b.touch(key)
            keyed_state(b, ValueStateDescriptor("v")).update(key)
        if cid == 1:
            storage.checkpoint(b, 0, cid, base=None)
    before = {p.name for p in (tmp_path / "shared").iterdir()}
    b.incremental_base = 1
    b.snapshot(2)
    (upload,) = b.take_uploads()
    upload_file, calls = rocksdb_backend.upload_file, []

    def failing_second(local, uri):
        calls.append(uri)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return upload_file(local, uri)

    monkeypatch.setattr(rocksdb_backend, "upload_file", failing_second)
    with pytest.raises(OSError, match="No space left"):
        upload.run(storage.shared, "t0-2", shared=True)
    assert len(calls) == 2, "checkpoint 2 uploads at least two files of its own"
    assert {p.name for p in (tmp_path / "shared").iterdir()} == before
    b.close()


def test_between_materializations_a_checkpoint_uploads_one_change_log_and_a_restore_replays_them(tmp_path):
    storage = _Storage(tmp_path)
    b = _rocks(1, 0, RocksDBSettings(cache_entries=7, write_buffer_bytes=4_000))
    intervals = (range(100), range(100, 110), range(110, 120), range(120, 400), range(400, 410))
    snaps = []
    for cid, keys in enumerate(intervals, start=1):
        for key in keys:
            b.touch(key)
            keyed_state(b, ValueStateDescriptor("v")).update(key * 2)
        snaps.append(storage.checkpoint(b, 0, cid, base=cid - 1 if cid > 1 else None))
    files = {cid: {f.name.split("/")[1]: f.handle.uri for f in storage.handles[0, cid].files} for cid in range(1, 6)}
    uploaded = {cid: {n for n, uri in files[cid].items() if f"/t0-{cid}-" in uri} for cid in files}
    assert any(n.endswith(".sst") for n in uploaded[1]) and not any(n.startswith("weir-changes-") for n in files[1])
    assert uploaded[2] == {"weir-changes-000000000002"}, "the materialization's files are named again"
    assert uploaded[3] == {"weir-changes-000000000003"} and files[3].items() > files[2].items()
    # 280 changes outgrow the 4,000-byte write buffer: checkpoint 4 materializes, on checkpoint 1's SSTs
    assert not any(n.startswith("weir-changes-") for n in files[4]) and any(n.endswith(".sst") for n in uploaded[4])
    assert {n: u for n, u in files[1].items() if n.endswith(".sst")}.items() <= files[4].items()
    assert uploaded[5] == {"weir-changes-000000000005"}
    for cid, through in ((3, 120), (5, 410)):
        new = _rocks(1, 0)
        new.restore([(b.key_groups, snaps[cid - 1])], checkpoint_id=cid)
        assert dict(new.table("v").items()) == {k: k * 2 for k in range(through)}, f"checkpoint {cid}"
        new.close()
    b.close()


def test_a_state_cleared_whole_between_checkpoints_stays_cleared_after_a_restore(tmp_path):
    """A whole table's clear is a range delete, which the change log does not hold:
    the next checkpoint materializes instead of naming logs that would bring the keys back."""
    storage = _Storage(tmp_path)
    b = _rocks(1, 0)
    snaps = []
    for cid in (1, 2, 3):
        for key in range(10 * cid):
            b.touch(key)
            keyed_state(b, ValueStateDescriptor("v")).update(key)
        if cid == 3:
            b.table("v").clear()
        snaps.append(storage.checkpoint(b, 0, cid, base=cid - 1 if cid > 1 else None))
    new = _rocks(1, 0)
    new.restore([(b.key_groups, snaps[-1])], checkpoint_id=3)
    assert dict(new.table("v").items()) == {}
    _close([new, b])


def test_without_incremental_checkpoints_every_checkpoint_uploads_everything(tmp_path):
    storage = _Storage(tmp_path)
    b = _rocks(1, 0, RocksDBSettings(incremental=False))
    for cid in (1, 2):
        b.touch(cid)
        keyed_state(b, ValueStateDescriptor("v")).update(cid)
        storage.checkpoint(b, 0, cid, base=cid - 1 if cid > 1 else None)
    assert all(f.handle.uri.split("/")[-1].startswith("t0-2-") for f in storage.handles[0, 2].files)
    b.close()


def test_an_sst_a_retained_checkpoint_names_survives_the_discard_of_the_checkpoint_that_uploaded_it(tmp_path):
    storage = _Storage(tmp_path)
    shared = SharedFiles(storage.shared)
    b = _rocks(1, 0, MATERIALIZING)
    for cid in (1, 2):
        b.touch(cid)
        keyed_state(b, ValueStateDescriptor("v")).update(cid)
        storage.checkpoint(b, 0, cid, base=cid - 1 if cid > 1 else None)
        shared.completed(cid, storage.metadata(cid))
    first, second = (set(storage.handles[0, c].uris) for c in (1, 2))
    kept = first & second
    assert kept and all(u.endswith(".sst") for u in kept), "checkpoint 2 names an SST checkpoint 1 uploaded"
    freed = set(shared.discarded([1]))
    assert freed == first - second and not freed & kept, "only what checkpoint 2 does not name goes"
    assert set(shared.discarded([2])) == second
    b.close()


def test_a_write_back_waits_for_the_next_record_so_values_changed_in_place_are_kept():
    b = _rocks(1, 0, RocksDBSettings(cache_entries=1))
    items = keyed_state(b, ListStateDescriptor("l"))
    for _ in range(2):  # the second round reads each list back from RocksDB
        for key in range(20):
            b.touch(key)
            for i in range(3):
                items.add(i)  # appends to the cached list in place
    b.write_back()
    assert dict(b.table("l").items()) == {k: [0, 1, 2] * 2 for k in range(20)}
    assert not b.table("l").cache, "the cache was written back between records"
    b.close()


def test_the_database_folder_is_deleted_when_the_backend_closes():
    b = _rocks(1, 0)
    folder = b.folder
    b.touch(1)
    keyed_state(b, ValueStateDescriptor("v")).update(1)
    b.snapshot(1)
    b.close()
    assert not os.path.exists(folder)


def test_a_heap_snapshot_and_a_rocksdb_snapshot_read_alike(tmp_path):
    storage = _Storage(tmp_path)
    heap, rocks = _heap(1, 0), _rocks(1, 0)
    for b in (heap, rocks):
        _touch_everything([b], 1, random.Random(3), 1)
    snaps = [storage.checkpoint(b, i, 1, None) for i, b in enumerate((heap, rocks))]
    assert isinstance(snaps[0], KeyedSnapshot) and isinstance(snaps[1], RocksDBSnapshot)
    assert snaps[1].tables_in(KeyGroupRange(0, MAX_P)) == {n: t for n, t in snaps[0].tables.items() if t}
    rocks.close()


@pytest.mark.parametrize(
    "configure",
    [
        lambda: EmbeddedRocksDBStateBackend(enable_incremental_checkpointing="yes"),
        lambda: EmbeddedRocksDBStateBackend().set_db_storage_path("relative/dir"),
        lambda: EmbeddedRocksDBStateBackend().set_write_back_cache_entries(0),
        lambda: EmbeddedRocksDBStateBackend().set_block_cache_size(-1),
        lambda: EmbeddedRocksDBStateBackend().set_write_buffer_size(1.5),
        lambda: StreamExecutionEnvironment.get_execution_environment().set_state_backend("rocksdb"),
    ],
)
def test_a_wrong_setting_is_refused_naming_it(configure):
    with pytest.raises(InvalidConfigurationError) as err:
        configure()
    assert err.value.setting in (
        "enable_incremental_checkpointing",
        "RocksDB db storage path",
        "RocksDB write_back_cache_entries",
        "RocksDB block_cache_size",
        "RocksDB write_buffer_size",
        "state backend",
    )


def test_the_pyflink_names_choose_the_backend():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert type(env.get_state_backend()).__name__ == "HashMapStateBackend"
    backend = EmbeddedRocksDBStateBackend(True)
    backend.set_db_storage_paths("/tmp/a", "file:///tmp/b")
    assert env.set_state_backend(backend) is env and env.get_state_backend() is backend
    assert backend.get_db_storage_paths() == ["/tmp/a", "/tmp/b"] and backend.is_incremental_checkpoints_enabled()
    assert _descriptors()  # the same descriptors serve both backends


class _CountingDb:
    """A database whose reads are counted."""

    def __init__(self, db) -> None:
        self.db, self.reads = db, 0

    def get(self, key):
        self.reads += 1
        return self.db.get(key)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_a_batch_is_read_ahead_in_one_read_and_a_key_that_fails_is_left_to_the_loop():
    b = _rocks(1, 0, RocksDBSettings())
    values = b.table("v")
    values[1] = "one"
    b.write_back()
    b.db = counting = _CountingDb(b.db)  # type: ignore[assignment]
    b.read_ahead([1, 2, 1])
    assert counting.reads == 1  # one multi-get for the batch
    assert (values.get(1), values.get(2), 2 in values) == ("one", None, False)
    assert counting.reads == 1  # the loop reads the cache
    b.read_ahead([3, []])  # a list is no key: the loop names its record
    values[2] = "two"
    b.write_back()  # a key read ahead and never set writes nothing, not even a tombstone
    assert sorted(values.items()) == [(1, "one"), (2, "two")]
    assert sum(1 for _ in b.scan(values._sid)) == 2
    b.db = counting.db
    b.close()


class _Unreadable:
    """Another subtask's snapshot, which a restore must not touch."""

    def __getattr__(self, name):
        raise AssertionError(f"a restore read another subtask's snapshot ({name})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restore_at_the_same_parallelism_reads_no_other_subtasks_state(backend, tmp_path):
    storage = _Storage(tmp_path)
    old = [BACKENDS[backend](2, i) for i in range(2)]
    _touch_everything(old, 2, random.Random(5), 1)
    snaps = [storage.checkpoint(b, i, 1, None) for i, b in enumerate(old)]
    for i in range(2):
        new = BACKENDS[backend](2, i)
        new.restore([(old[j].key_groups, snaps[j] if j == i else _Unreadable()) for j in range(2)])
        assert _contents([new]) == _contents([old[i]])
        new.close()
    _close(old)


def test_hot_keys_stay_cached_however_many_records_touch_them():
    b = _rocks(1, 0, RocksDBSettings(cache_entries=100))
    counts = b.table("count")
    writes = []
    real = b.write_back
    b.write_back = lambda: (writes.append(len(counts.cache)), real())[1]  # type: ignore[method-assign]
    for start in range(0, 5_000, 50):  # 5,000 records over 20 keys, in batches, as a reduce's loop
        batch = [i % 20 for i in range(start, start + 50)]
        b.read_ahead(batch)  # it counts each batch's entries
        for key in batch:
            counts[key] = counts.get(key, 0) + 1
        b.changed(batch)
    assert writes == []  # 20 entries never outgrow a bound of 100
    assert dict(counts.items()) == {k: 250 for k in range(20)}
    for key in range(20, 200):  # 180 new keys do
        b.touch(key)
        counts[key] = 1
    assert writes and max(writes) <= 101
    b.close()


def test_after_a_restore_from_a_checkpoint_the_next_one_names_its_ssts_again_in_the_same_run_only(tmp_path):
    storage = _Storage(tmp_path)
    old = _rocks(1, 0)
    _touch_everything([old], 1, random.Random(2), 1)
    snap = storage.checkpoint(old, 0, 7, None)
    restored_ssts = {f.handle.uri for f in storage.handles[0, 7].files if f.name.endswith(".sst")}
    for same_run in (True, False):
        new = _rocks(1, 0)
        new.restore([(old.key_groups, snap)], checkpoint_id=7)  # a failover: checkpoint 7 is the base
        new.touch(1)
        keyed_state(new, ValueStateDescriptor("value")).update("after")
        writer = storage if same_run else _Storage(tmp_path / "another-run")
        writer.checkpoint(new, 0, 8, base=7)
        ssts = {f.handle.uri for f in writer.handles[0, 8].files if f.name.endswith(".sst")}
        assert (restored_ssts <= ssts) is same_run and len(ssts - restored_ssts) >= 1
        new.close()
    old.close()


def test_rocksdbs_no_space_error_is_a_local_disk_full_error_naming_the_folder_and_other_errors_stay_as_they_are(
    monkeypatch, tmp_path
):
    b = _rocks(1, 0, RocksDBSettings(storage_paths=(str(tmp_path),)))
    values = keyed_state(b, ValueStateDescriptor("value"))
    raised: list[Exception] = []
    monkeypatch.setattr(Changes, "write", lambda changes, db: (_ for _ in ()).throw(raised[-1]))
    b.touch(1)
    values.update("one")
    # What rocksdict raises when RocksDB's write finds the disk full: a plain Exception.
    raised.append(Exception(f"IO error: No space left on device: While appending to file: {b.folder}/db/000047.log"))
    with pytest.raises(LocalDiskFullError) as full:
        b.snapshot(1)
    assert str(full.value) == (
        f"local disk full: operator 'op' cannot write its RocksDB state in {b.folder} (IO error: No space left on "
        f"device: While appending to file: {b.folder}/db/000047.log); free space on that disk or point "
        "EmbeddedRocksDBStateBackend.set_db_storage_paths at a larger one (a job that keeps finding it full fails "
        "rather than restarting for ever)"
    )
    raised.append(Exception("IO error: Corruption: block checksum mismatch"))
    b.touch(2)
    values.update("two")
    with pytest.raises(Exception, match="Corruption") as other:
        b.write_back()
    assert type(other.value) is Exception
    b.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "full"])
def test_a_thousand_checkpoints_keep_bounded_bookkeeping_and_a_restore_from_the_last_completed_is_exact(
    tmp_path, incremental
):
    """Incremental: 1,000 checkpoints on hot keys all fail; full uploads (PyFlink
    ports' ``incremental=False``): 1,000 all complete. Before, the backend kept an
    upload per checkpoint for ever in both (incremental ones: all after the last
    completed base)."""
    storage = _Storage(tmp_path)
    b = _rocks(1, 0, RocksDBSettings(cache_entries=7, incremental=incremental))
    values = keyed_state(b, ValueStateDescriptor("value"))

    def interval(step: int) -> None:
        for key in range(20):
            b.touch(key)
            values.update(step)

    interval(0)
    storage.checkpoint(b, 0, 1, None)
    b.checkpoint_completed(1)
    for cid in range(2, 1002):
        interval(cid)
        if incremental:
            storage.checkpoint(b, 0, cid, base=1)
            b.checkpoint_aborted(cid)
        else:
            storage.checkpoint(b, 0, cid, base=cid - 1)
            b.checkpoint_completed(cid)
        assert len(b.kept_bases()) <= (2 if incremental else 0), b.kept_bases()
    assert b.kept_bases() == ([1] if incremental else [])  # the completed base, its SSTs named again
    interval(1002)
    last = storage.checkpoint(b, 0, 1002, base=1 if incremental else 1001)
    b.checkpoint_completed(1002)
    restored = _rocks(1, 0)
    restored.restore([(b.key_groups, last)], checkpoint_id=1002)
    assert _contents([restored]) == {"value": {k: 1002 for k in range(20)}}
    _close([b, restored])


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_a_snapshots_ttl_cleanup_checks_a_bounded_number_of_entries_and_a_few_snapshots_clean_everything(
    kind, monkeypatch
):
    """Before, each snapshot read every entry of a TTL state into a list (on RocksDB
    5.3 s and +72 MB a checkpoint at 200,000 keys): the cleanup cost grew with
    the state, not with what changed."""
    monkeypatch.setattr(KeyedStateBackend, "TTL_SWEEP_BUDGET", 1_000, raising=False)
    backend = BACKENDS[kind](1, 0)
    ttl = ValueStateDescriptor("s")
    ttl.enable_time_to_live(StateTtlConfig.new_builder(500).build())
    assert backend.ttl(ttl) is not None
    table = backend.table("s")
    n = 4_500
    for k in range(n):  # written at 0 (the odd ones) and at 900 (the even ones)
        backend.touch(k)
        table[k] = (k, 900 if k % 2 == 0 else 0)
    backend.touched = set()
    backend.write_back() if kind == "rocksdb" else None
    calls = [0]
    real = _Ttl.unexpired
    monkeypatch.setattr(_Ttl, "unexpired", lambda self, *a: calls.__setitem__(0, calls[0] + 1) or real(self, *a))
    checked = []
    for cid in range(1, 6):  # at 1,000 the odd ones have expired
        calls[0] = 0
        backend.snapshot(cid)
        checked.append(calls[0])
    assert max(checked) <= 1_000 and sum(checked) >= n, checked
    assert sorted(k for k, _ in backend.table("s").items()) == list(range(0, n, 2))

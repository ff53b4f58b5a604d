"""Keyed state in an embedded RocksDB (Flink's ``EmbeddedRocksDBStateBackend``):
state larger than the heap, and checkpoints that upload only new files.

One RocksDB per operator subtask, in a folder of its own on the local disk
(created fresh, deleted when the task closes). The folder carries an owner file
(``weir.runtime.local_folders``): when it makes its own folder and when it closes,
a backend sweeps the folders of dead processes from the parent; weir deletes
nothing else there. The local disk running full while the database, its logs
or its checkpoint links are written is a :class:`LocalDiskFullError` naming the
folder, not an error of the job's code: the job master restarts it a few times,
then fails the job.

A key is stored under ``key group (2 bytes, big-endian) + state id (4 bytes) +
the key's stable bytes``, so a key group's entries are one contiguous range
(a rescale takes ranges); the value is the pickled ``(key, value)``, so
iterating gives the keys back. State ids are a hash of the state name (equal
in every subtask, so ranges copy between databases as they are); the names are
kept under ``_META`` for readers.

The state classes change values in place (a list appended to), so a table is
read through a **write-back cache**: ``get`` returns the cached object, and
the cache goes to RocksDB in one ``WriteBatch`` only between records (in
:meth:`RocksDBKeyedStateBackend.touch`, once it holds more than its bound of
entries) and at a snapshot. Nothing is written while a state object may still
change what it read. Before a batch of records, :meth:`RocksDBKeyedStateBackend.read_ahead`
reads the entries of the batch's keys into the cache in one multi-get per table
(a key not stored is remembered as absent, so it is neither read again nor written).

A checkpoint is a **materialization** plus a **change log** (Flink's incremental
RocksDB snapshot, with its changelog backend's log, FLIP-158). A materialization
writes the cache, flushes the memtable and creates a RocksDB checkpoint (hard
links) in a local folder. After it, every batch written to the database is also
appended to a change log file, and each checkpoint that does not materialize
closes the log as a file of that folder: the checkpoint is the folder's files,
the materialization and the logs since, replayed in order at a restore. A
checkpoint materializes when the logs since the last one would outgrow the
write buffer (or number ``_MAX_LOGS``), or a change was not logged (a restore,
a whole state cleared). So the memtable is flushed when it is about full, not
at every checkpoint: each 1 s checkpoint flushing a small level-0 file made
compaction rewrite the level below every dozen seconds.

The loop thread links the folder's files into one folder per checkpoint; the
snapshot writer's thread uploads them. SSTs and change logs never change, so
one the base checkpoint named is named again instead of uploaded
(:class:`RocksDBUpload`), as are a materialization's MANIFEST, CURRENT and
OPTIONS. A savepoint uploads everything into its own folder.

Threads: everything but :meth:`RocksDBUpload.run` runs on the task's loop thread.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, Callable, Iterable, Iterator, MutableMapping

import xxhash
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    DataBlockIndexType,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from weir.runtime.errors import (
    CorruptCheckpointError,
    InvalidConfigurationError,
    LocalDiskFullError,
    StateSerializationError,
)
from weir.runtime.incremental import FileKeyed, Keyed, PossibleBases, restore_into
from weir.runtime.keygroups import KeyGroupRange, prefixed_keys
from weir.runtime.local_folders import ROCKSDB_PREFIX, OwnedFolder, sweep
from weir.runtime.rocksdb_timers import RocksDBTimers, timer_of
from weir.runtime.serialization import dumps_each, dumps_state, loads, loads_each
from weir.runtime.state import KeyedStateBackend
from weir.runtime.storage import (
    DbFile,
    delete_files,
    download_file,
    join,
    read_file,
    safe_name,
    upload_file,
    within,
)
from weir.runtime.timer_queues import TIMERS

_META = b"\xff\xff"  # + state id -> state name; sorts after every key group (at most 32768 of them)
_COPY_BATCH = 10_000  # entries per WriteBatch when a restore copies ranges
_LOG = "weir-changes-"  # + checkpoint id: a change log file (RocksDB's own names start with a digit or capital)
_MAX_LOGS = 32  # change logs a checkpoint names before the next one materializes
_NO_SPACE = "No space left on device"  # in RocksDB's IO errors, which rocksdict raises as plain Exceptions
# After a state's prefix, past all its entries: a key's bytes start with a type tag
# below 0xff, a timer's with 8 bytes of timestamp (see weir.runtime.rocksdb_timers).
_PAST = b"\xff" * 9


class _Gone:
    """A cached key removed since the last write-back."""


_GONE = _Gone()
_MISSING = object()


def state_id(name: str) -> bytes:
    return xxhash.xxh32_intdigest(name.encode("utf-8")).to_bytes(4, "big")


def _group(key_group: int) -> bytes:
    return key_group.to_bytes(2, "big")


@dataclass(frozen=True)
class RocksDBSettings:
    """What ``EmbeddedRocksDBStateBackend`` sets (see its doc), per operator subtask."""

    cache_entries: int = 10_000
    block_cache_bytes: int = 64 << 20
    write_buffer_bytes: int = 16 << 20
    incremental: bool = True
    storage_paths: tuple[str, ...] = ()


def _options(settings: RocksDBSettings) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(settings.write_buffer_bytes)
    # Each checkpoint flushes the memtable, so level 0 gets a small file a checkpoint,
    # and keyed state's keys land all over the key space: compacting level 0 rewrites
    # the whole level below. Waiting for 12 files instead of 4 halves compaction's
    # CPU and what checkpoints upload (25M keys a task, 1 s checkpoints); LZ4 is
    # cheaper than the default Snappy.
    options.set_level_zero_file_num_compaction_trigger(12)
    options.set_compression_type(DBCompressionType.lz4())
    # Bloom filters, on the memtable and per SST: a key's first read (a miss) skips
    # what it is not in instead of searching it (each halves a miss's time here).
    # 16 bits a key, not the usual 10: a miss probes a filter per level-0 file and
    # level, and each false positive (1% at 10 bits, 0.1% at 16) reads and
    # decompresses a block; 16 bits cut a new key's whole cost by 10-14% (12M
    # keys, one task), for 12 MB more filter memory per 16M keys.
    options.set_memtable_prefix_bloom_ratio(0.1)
    options.set_memtable_whole_key_filtering(True)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(settings.block_cache_bytes))
    table.set_bloom_filter(16, False)
    table.set_data_block_index_type(DataBlockIndexType.binary_and_hash())  # a hit finds its entry by hash
    options.set_block_based_table_factory(table)
    return options


def _open(path: str, options: Options) -> Rdict:
    db = Rdict(path, options, access_type=AccessType.read_write())
    no_log = WriteOptions()  # no RocksDB write-ahead log: a restore reads checkpoints (with weir's change logs)
    no_log.disable_wal = True  # type: ignore[method-assign,assignment]  # a property, whatever the stub says
    db.set_write_options(no_log)
    return db


@dataclass
class Changes:
    """Entries to write, of distinct keys: ``values[i]`` under ``keys[i]``, and
    ``deletes``. Parallel lists rather than pairs, so that filling, logging and
    writing them each run as one loop in C."""

    keys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    deletes: list[bytes] = field(default_factory=list)

    def write(self, db: Rdict) -> None:
        """Into ``db`` in one batch, in key order: sorted inserts into the memtable
        take half the time of scattered ones (1.2-1.5 against 2.3-2.8 us each here)."""
        batch = WriteBatch(raw_mode=True)
        keys, values = self.keys, self.values
        order = sorted(range(len(keys)), key=keys.__getitem__)
        collections.deque(map(batch.put, map(keys.__getitem__, order), map(values.__getitem__, order)), 0)
        for db_key in self.deletes:
            batch.delete(db_key)
        db.write(batch)

    def dumps(self) -> bytes:
        """For a change log (in the order filled: pickling follows memory, nearly twice as
        fast as in key order)."""
        return dumps_state((self.keys, self.values, self.deletes))

    @classmethod
    def loads_each(cls, log: bytes) -> "Iterator[Changes]":
        """The changes :meth:`dumps` wrote one after another into ``log`` (weir's own file)."""
        for keys, values, deletes in loads_each(log):
            yield cls(keys, values, deletes)


@contextlib.contextmanager
def _on_local_disk(folder: str, operator: str) -> Iterator[None]:
    """The disk running full at ``folder`` is a :class:`LocalDiskFullError` naming
    it, not whatever RocksDB or the OS raised."""
    try:
        yield
    except LocalDiskFullError:
        raise  # from a nested write: named already
    except Exception as exc:
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or _NO_SPACE in str(exc):
            raise LocalDiskFullError(folder, operator, str(exc)) from exc
        raise


def _scan(db: Rdict, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The raw entries with ``start <= key < end``."""
    it = db.iter()
    it.seek(start)
    while it.valid():
        key = it.key()
        if key >= end:
            return
        yield key, it.value()
        it.next()


class _Table(MutableMapping[Any, Any]):
    """One keyed state's entries, read and written through the write-back cache
    (see the module's doc). Iteration writes nothing: it gives the cached
    object of a key read since the last write-back, else a fresh copy."""

    def __init__(self, backend: "RocksDBKeyedStateBackend", sid: bytes) -> None:
        self._backend = backend
        self._sid = sid
        self.cache: dict[Any, Any] = {}
        self.absent: set[Any] = set()  # keys read since the last write-back and not stored (unless cached since)
        self.held_keys: dict[Any, bytes] = {}  # of the keys read since the last write-back: encoded once
        self._gone = 0  # pops since the last write-back: the cache may hold _GONE
        self._prefixes = [_group(g) + sid for g in range(backend.max_parallelism)]

    def _db_keys(self, keys: list[Any]) -> list[bytes]:
        """The db keys of ``keys``, held until the next write-back."""
        db_keys = prefixed_keys(keys, self._prefixes)
        self.held_keys.update(zip(keys, db_keys))
        return db_keys

    def _db_key(self, key: Any) -> bytes:
        db_key = self.held_keys.get(key)
        return self._db_keys([key])[0] if db_key is None else db_key

    def get(self, key: Any, default: Any = None) -> Any:
        value = self.cache.get(key, _MISSING)
        if value is _MISSING:
            if key in self.absent:
                return default
            raw = self._backend.db.get(self._db_key(key))
            if raw is None:
                self.absent.add(key)
                return default
            value = self.cache[key] = loads(raw)[1]
        return default if value is _GONE else value

    def read_ahead(self, keys: list[Any]) -> None:
        """The entries of ``keys`` not cached, read in one multi-get into the cache."""
        cache, absent = self.cache, self.absent
        todo = [k for k in dict.fromkeys(keys) if k not in cache and k not in absent]
        if todo:
            db_keys: list[Any] = self._db_keys(todo)  # rocksdict's stub wants a list of any key type
            found = self._backend.db.get(db_keys) or []  # a list for a list
            for key, raw in zip(todo, found):
                if raw is None:
                    absent.add(key)
                else:
                    cache[key] = loads(raw)[1]

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self.cache[key] = value

    def __delitem__(self, key: Any) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def pop(self, key: Any, default: Any = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            return default
        self.cache[key] = _GONE
        self._gone += 1
        return value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = self.cache[key] = default
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        cache = self.cache
        out = [(k, v) for k, v in cache.items() if v is not _GONE]
        for _, raw in self._backend.scan(self._sid):
            key, value = loads(raw)
            if key not in cache:
                out.append((key, value))
        return out

    def __iter__(self) -> Iterator[Any]:
        return iter([k for k, _ in self.items()])

    def __len__(self) -> int:
        return len(self.items())

    def clear(self) -> None:
        self.cache.clear()
        self._backend.delete_state(self._sid)

    def drain(self, changes: Changes) -> None:
        """The cache's entries into ``changes``; the cache is emptied. Without a
        pop since the last drain, every step is one loop in C."""
        cache, held = self.cache, self.held_keys
        if not cache.keys() <= held.keys():
            self._db_keys([k for k in cache if k not in held])  # those set without a read
        if self._gone:
            kept = [(k, v) for k, v in cache.items() if v is not _GONE]
            changes.keys.extend([held[k] for k, _ in kept])
            changes.deletes.extend([held[k] for k, v in cache.items() if v is _GONE])
        else:
            kept = list(cache.items())
            changes.keys.extend(map(held.__getitem__, cache))
        changes.values.extend(dumps_each(kept))
        cache.clear()
        self.absent.clear()
        held.clear()
        self._gone = 0


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state of one operator subtask in its own RocksDB (see the module's doc).
    ``folder_name`` names its folder (job, task, uid, attempt); ``uid`` names its
    files in snapshots, ``operator`` (the name) its errors."""

    def __init__(
        self,
        max_parallelism: int,
        key_groups: KeyGroupRange,
        config: RocksDBSettings,
        folder_name: str,
        uid: str,
        operator: str,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(max_parallelism, key_groups, clock)
        self._config = config
        self._operator = operator
        self._owner = safe_name(uid)
        self._cache_bound = config.cache_entries
        self._entries_held = 0  # at least the cache's entries: counted since the last count, once per record and table
        paths = config.storage_paths or (tempfile.gettempdir(),)
        self._parent = parent = paths[key_groups.start % len(paths)]
        sweep(parent)  # a killed task's folder, with hard links to files storage freed long ago
        with _on_local_disk(parent, operator):
            owned = OwnedFolder(parent, f"{ROCKSDB_PREFIX}{safe_name(folder_name)}-")
        self.folder = owned.path
        self._remove_folder = weakref.finalize(self, owned.remove)
        self._options = _options(config)
        self._db_path = os.path.join(self.folder, "db")
        with self._local_disk():
            self.db = _open(self._db_path, self._options)
        self._tables: dict[str, _Table] = {}
        self._timer_queues: dict[str, RocksDBTimers] = {}
        self._names: dict[bytes, str] = {}
        # Uploads of snapshots a later one may name as its base, to name their files
        # again: none without incremental checkpoints.
        self._uploads: PossibleBases[RocksDBUpload] = PossibleBases()
        self._pending: list[RocksDBUpload] = []
        self._materialized = ""  # local folder: the last materialization's RocksDB checkpoint and the logs since
        self._materialization = 0  # its checkpoint id
        self._log: BinaryIO | None = None  # the change log since the last checkpoint, while every change is logged
        self._log_path = os.path.join(self.folder, "changes")
        self._logged = 0  # bytes in the logs since the last materialization
        self._logs = 0  # how many

    # ------------------------------------------------------------ state access
    def table(self, name: str) -> _Table:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = _Table(self, self._state_id(name))
        return t

    def timers(self, name: str) -> RocksDBTimers:
        """The timers of one time domain, in this database (see ``weir.runtime.rocksdb_timers``)."""
        queue = self._timer_queues.get(name)
        if queue is None:
            queue = self._timer_queues[name] = RocksDBTimers(self, self._state_id(name))
        return queue

    def _state_id(self, name: str) -> bytes:
        """The id of state ``name``, its name stored for readers."""
        sid = state_id(name)
        other = self._names.get(sid)
        if other is not None and other != name:
            raise InvalidConfigurationError(
                f"keyed state name of operator '{self._operator}'",
                name,
                f"hashes to the same RocksDB id as state '{other}': rename one of them",
            )
        self._names[sid] = name
        self._apply(Changes([_META + sid], [name.encode("utf-8")]))
        return sid

    def touch(self, key: Any) -> None:
        self.current_key = key
        self._entries_held += len(self._tables) + len(self._timer_queues)  # a timer change a record, as a rule
        if self._entries_held > self._cache_bound:
            self._write_back_if_full()

    def changed(self, keys: list[Any]) -> None:
        """Nothing to do: :meth:`read_ahead` counted the batch's entries (and wrote
        the cache back first if they would not fit)."""

    def _write_back_if_full(self, coming: int = 0) -> None:
        """Count the cache's entries (the running count only bounds them: a hot key
        counts once per record) and write it back if, with ``coming`` entries about
        to be read in, it holds more than its bound."""
        self._entries_held = sum(max(len(t.cache), len(t.held_keys)) for t in self._tables.values()) + sum(
            len(q.pending) for q in self._timer_queues.values()
        )
        if self._entries_held + coming > self._cache_bound:
            self.write_back()

    def read_ahead(self, keys: list[Any]) -> None:
        """Every table's entries of ``keys``, read in one multi-get per table (a
        key without stable bytes is left to the loop, which names its record)."""
        coming = len(keys) * len(self._tables)
        if self._entries_held + coming > self._cache_bound:
            self._write_back_if_full(coming)
        self._entries_held += coming
        try:
            for t in self._tables.values():
                t.read_ahead(keys)
        except Exception:  # the loop raises it for the record at fault
            return

    def write_back(self) -> None:
        """The write-back cache into RocksDB, in one batch (only between records)."""
        changes = Changes()
        try:
            for t in self._tables.values():
                t.drain(changes)
        except Exception as exc:
            raise StateSerializationError(f"{self._operator} (RocksDB)", exc) from exc
        for q in self._timer_queues.values():
            q.drain(changes.keys, changes.values, changes.deletes)
        if changes.keys or changes.deletes:
            self._apply(changes)
        self._entries_held = 0

    def _apply(self, changes: Changes) -> None:
        """Write ``changes`` into the database, and into the change log while logging."""
        with self._local_disk():
            changes.write(self.db)
            if self._log is not None:
                data = changes.dumps()
                self._log.write(data)
                self._logged += len(data)
                if self._logged > self._config.write_buffer_bytes:  # the memtable is about full: materialize
                    self.stop_logging()

    def _local_disk(self) -> "contextlib.AbstractContextManager[None]":
        """Around what writes the folder (see :func:`_on_local_disk`)."""
        return _on_local_disk(self.folder, self._operator)

    def stop_logging(self) -> None:
        """The logs no longer hold every change since the materialization: the
        next checkpoint materializes."""
        if self._log is not None:
            self._log.close()
            os.remove(self._log_path)
            self._log = None

    def delete_state(self, sid: bytes) -> None:
        """Every stored entry of one state."""
        with self._local_disk():
            for group in self.key_groups:
                prefix = _group(group) + sid
                self.db.delete_range(prefix, prefix + _PAST)
            self.stop_logging()  # a range delete is not logged: the next checkpoint materializes

    def sweep(self, name: str, budget: int) -> list[tuple[Any, Any]]:
        """The next ``budget`` entries of state ``name`` for the TTL sweep (see
        :meth:`KeyedStateBackend.sweep`), read by a RocksDB iterator from the key
        after the last one the previous sweep read: nothing more is read, and
        nothing is listed. An entry changed since the last write-back is seen as
        the cache holds it."""
        table = self.table(name)
        groups = list(self.key_groups)
        group: int
        after: bytes | None
        group, after = self._sweeping.get(name, (0, None))
        out: list[tuple[Any, Any]] = []
        for _ in range(len(groups)):
            prefix = _group(groups[group]) + table._sid
            for raw_key, raw in _scan(self.db, prefix if after is None else after + b"\x00", prefix + _PAST):
                key, value = loads(raw)
                cached = table.cache.get(key, _MISSING)
                if cached is not _GONE:
                    out.append((key, value if cached is _MISSING else cached))
                after = raw_key
                if len(out) >= budget:
                    self._sweeping[name] = (group, after)
                    return out
            group, after = (group + 1) % len(groups), None
        self._sweeping[name] = (group, None)
        return out

    def forget(self, table: MutableMapping[Any, Any], key: Any) -> None:
        """Remove ``key``, which the sweep just read, without reading it again
        (a point read a swept entry, where the sweep's iterator read it already)."""
        assert isinstance(table, _Table)
        table.cache[key] = _GONE
        table._gone += 1

    def scan(self, sid: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The stored entries of one state, key group by key group."""
        for group in self.key_groups:
            prefix = _group(group) + sid
            yield from _scan(self.db, prefix, prefix + _PAST)

    # ---------------------------------------------------------------- snapshots
    def snapshot(self, checkpoint_id: int) -> "RocksDBSnapshot":  # type: ignore[override]
        """The synchronous part: write the cache, then close the change log or
        materialize, and hard-link the files into a folder of this checkpoint's;
        :meth:`take_uploads` hands over the upload."""
        with self._local_disk():
            return self._snapshot(checkpoint_id)

    def _snapshot(self, checkpoint_id: int) -> "RocksDBSnapshot":
        self.drop_expired()
        self.touched = set()  # the heap's delta bookkeeping: RocksDB's increments are its files
        self.write_back()
        if self._log is not None and self._logs < _MAX_LOGS:
            self._log.close()
            if os.path.getsize(self._log_path):
                os.rename(self._log_path, os.path.join(self._materialized, f"{_LOG}{checkpoint_id:012d}"))
                self._logs += 1
            else:
                os.remove(self._log_path)
        else:
            self._materialize(checkpoint_id)
        self._log = open(self._log_path, "wb")
        local = os.path.join(self.folder, f"chk-{checkpoint_id}")
        os.mkdir(local)
        for f in os.listdir(self._materialized):
            os.link(os.path.join(self._materialized, f), os.path.join(local, f))
        base = self.incremental_base
        reusable: dict[str, DbFile] = {}
        if base is not None and self._config.incremental:
            prior = self._uploads.since(base)
            reusable = dict(prior[0].uploaded) if prior else {}
        upload = RocksDBUpload(local, self._owner, sorted(os.listdir(local)), reusable, self._materialization)
        if self._config.incremental:
            self._uploads.add(checkpoint_id, upload)
        self._pending.append(upload)
        return RocksDBSnapshot(
            self._owner, tuple(upload.names), self._live_estimate(), ttl_states=tuple(sorted(self.ttl_states))
        )

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        self._uploads.completed(checkpoint_id)

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._uploads.aborted(checkpoint_id)

    def kept_bases(self) -> list[int]:
        return self._uploads.ids()

    def _materialize(self, checkpoint_id: int) -> None:
        """Flush the memtable and hard-link a RocksDB checkpoint, in place of the
        last materialization and its logs."""
        self.stop_logging()
        self.db.flush()
        folder = os.path.join(self.folder, f"materialized-{checkpoint_id}")
        Checkpoint(self.db).create_checkpoint(folder)
        if self._materialized:
            shutil.rmtree(self._materialized)
        self._materialized, self._materialization = folder, checkpoint_id
        self._logged = self._logs = 0

    def _live_estimate(self) -> int:
        return max(0, (self.db.property_int_value("rocksdb.estimate-num-keys") or 0) - len(self._names))

    def take_uploads(self) -> "list[RocksDBUpload]":  # type: ignore[override]
        pending, self._pending = self._pending, []
        return pending

    # ------------------------------------------------------------------ restore
    def restore(self, snapshots: Iterable[tuple[KeyGroupRange, Keyed]], checkpoint_id: int | None = None) -> None:
        """The same key groups from one RocksDB snapshot: its files become this
        subtask's database. Otherwise (a rescale, or a heap snapshot) the entries
        in this subtask's key groups are copied in. An old subtask's snapshot
        without any of them is not even downloaded."""
        with self._local_disk():
            self._restore(snapshots, checkpoint_id)

    def _restore(self, snapshots: Iterable[tuple[KeyGroupRange, Keyed]], checkpoint_id: int | None) -> None:
        snapshots = [(held, keyed) for held, keyed in snapshots if held.overlaps(self.key_groups)]
        if len(snapshots) == 1 and isinstance(snapshots[0][1], RocksDBSnapshot) and snapshots[0][0] == self.key_groups:
            self.db.close()
            shutil.rmtree(self._db_path)
            restored = snapshots[0][1]
            self.db = restored.rebuilt(self._db_path, self._options)
            self._names.update(_names(self.db))
            if checkpoint_id is not None and self._config.incremental:
                # As if uploaded: a checkpoint built on it names its SSTs again.
                ssts = {f.name.rsplit("/", 1)[1]: f for f in restored.files if f.name.endswith(".sst")}
                self._uploads.add(checkpoint_id, RocksDBUpload("", self._owner, [], {}, uploaded=ssts))
            return
        for held, keyed in snapshots:
            if isinstance(keyed, RocksDBSnapshot):
                self._copy_ranges(keyed)
            else:
                tables: dict[str, dict[Any, Any]] = {}
                restore_into(tables, keyed, self.key_groups, held, self.max_parallelism)
                for name, entries in tables.items():
                    if name.startswith(TIMERS):
                        queue = self.timers(name)
                        for key, timers in entries.items():
                            for ts, ns in timers:
                                queue.add(ts, key, ns)
                    else:
                        table = self.table(name)
                        for key, value in entries.items():
                            table[key] = value
                    self.write_back()

    def _copy_ranges(self, snapshot: "RocksDBSnapshot") -> None:
        """This subtask's key groups of another subtask's database, as they are stored."""
        with snapshot.opened() as old:
            for sid, name in _names(old).items():
                self._names[sid] = name
                self.db.put(_META + sid, name.encode("utf-8"))
            batch = WriteBatch(raw_mode=True)
            for key, value in _scan(old, _group(self.key_groups.start), _group(self.key_groups.end)):
                batch.put(key, value)
                if batch.len() >= _COPY_BATCH:
                    self.db.write(batch)
                    batch = WriteBatch(raw_mode=True)
            self.db.write(batch)

    def close(self) -> None:
        """Close the database and delete its folder (which this backend created),
        even when the disk is too full to close the change log; then sweep the
        parent again (a task killed since this one started, whose job ends now)."""
        try:
            self.stop_logging()
            self.db.close()
        finally:
            self._remove_folder()
            sweep(self._parent)


def _names(db: Rdict) -> dict[bytes, str]:
    return {key[len(_META) :]: value.decode("utf-8") for key, value in _scan(db, _META, _META + b"\xff" * 5)}


@dataclass
class RocksDBUpload:
    """One snapshot's RocksDB checkpoint folder, uploaded on the snapshot writer's
    thread (see ``weir.runtime.incremental.FileUpload``), then deleted.
    ``reusable``: SSTs the base checkpoint named, named again instead of uploaded
    (unless outside this run's shared folder: another run, one a job was restored
    from, may delete them). After a restore from a checkpoint, that checkpoint's
    SSTs are the ``uploaded`` of an upload with no files of its own.
    ``uploaded``: once a checkpoint's upload ran, the files it names, by
    :meth:`reuse_key` (read on the loop thread when a later barrier names this
    checkpoint as its base, which happens only after it completed)."""

    local: str
    owner: str
    files: list[str]
    reusable: dict[str, DbFile]
    materialization: int = 0  # the checkpoint id of the materialization the files are of
    uploaded: dict[str, DbFile] = field(default_factory=dict)

    def reuse_key(self, f: str) -> str:
        """SSTs and change logs are named once in a database's life; CURRENT,
        MANIFEST and OPTIONS once per materialization."""
        return f if f.endswith(".sst") or f.startswith(_LOG) else f"{self.materialization}/{f}"

    @property
    def names(self) -> list[str]:
        return [f"{self.owner}/{f}" for f in self.files]

    def run(self, folder: str, prefix: str, shared: bool) -> tuple[DbFile, ...]:
        """A failed upload deletes what this one uploaded before it: no checkpoint
        will name those files."""
        out, made = [], []
        try:
            for f in self.files:
                kept = self.reusable.get(self.reuse_key(f)) if shared else None
                if kept is None or not within(kept.handle.uri, folder):  # another run's may go
                    uri = join(folder, safe_name(f"{prefix}-{self.owner}-{f}"))
                    kept = DbFile(f"{self.owner}/{f}", upload_file(os.path.join(self.local, f), uri))
                    made.append(uri)
                out.append(kept)
        except BaseException:
            delete_files(made)
            raise
        finally:
            shutil.rmtree(self.local, ignore_errors=True)
        if shared:
            self.uploaded = {self.reuse_key(f.name.rsplit("/", 1)[1]): f for f in out}
        return tuple(out)


@dataclass(frozen=True)
class RocksDBSnapshot(FileKeyed):
    """An operator subtask's keyed state as RocksDB files: ``names`` (``owner/file``)
    are in the state handle's files; ``files``: those, once :meth:`located`."""

    owner: str
    names: tuple[str, ...]
    live_keys: int = 0
    files: tuple[DbFile, ...] = ()
    ttl_states: tuple[str, ...] = ()

    def located(self, files: tuple[DbFile, ...]) -> "RocksDBSnapshot":
        by_name = {f.name: f for f in files}
        missing = [n for n in self.names if n not in by_name]
        if missing:
            raise CorruptCheckpointError(
                missing[0], f"a RocksDB file of operator '{self.owner}' that its state handle does not name"
            )
        return replace(self, files=tuple(by_name[n] for n in self.names))

    def rebuilt(self, path: str, options: Options) -> Rdict:
        """Its database in a new folder ``path``, open: the materialization's files
        downloaded, its change logs replayed in order."""
        os.makedirs(path, 0o700)
        logs = []
        for f in self.files:
            name = f.name.rsplit("/", 1)[1]
            if name.startswith(_LOG):
                logs.append((name, read_file(f.handle)))
            else:
                download_file(f.handle, os.path.join(path, name))
        db = _open(path, options)
        for _, data in sorted(logs):
            for changes in Changes.loads_each(data):
                changes.write(db)
        return db

    @contextlib.contextmanager
    def opened(self) -> Iterator[Rdict]:
        """The database, rebuilt in a temporary folder (owned: a sweep deletes it
        if this process dies), open to read."""
        tmp = OwnedFolder(tempfile.gettempdir(), f"{ROCKSDB_PREFIX}restore-")
        try:
            db = self.rebuilt(os.path.join(tmp.path, "db"), Options(raw_mode=True))
            try:
                yield db
            finally:
                db.close()
        finally:
            tmp.remove()

    def tables_in(self, owned: KeyGroupRange) -> dict[str, dict[Any, Any]]:
        tables: dict[str, dict[Any, Any]] = {}
        with self.opened() as db:
            names = _names(db)
            for raw_key, raw in _scan(db, _group(owned.start), _group(owned.end)):
                name = names[raw_key[2:6]]
                if name.startswith(TIMERS):  # as the heap keeps them: key -> set of (timestamp, namespace)
                    ts, key, ns = timer_of(raw_key, raw)
                    tables.setdefault(name, {}).setdefault(key, set()).add((ts, ns))
                else:
                    key, value = loads(raw)
                    tables.setdefault(name, {})[key] = value
        return tables

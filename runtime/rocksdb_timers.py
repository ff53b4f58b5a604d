"""Timers in RocksDB (Flink's RocksDB timer service): one time domain's timers
of an operator subtask stored in its database, sorted by time within each key
group, with only each key group's earliest timer in memory.

A timer is the entry ``key group (2 bytes) + state id (4) + timestamp (8,
big-endian, offset by 2**63 so that negative times sort first as bytes) +
length of the key's stable bytes (4) + those bytes + the namespace's`` (none
for None, else its pickle: equal namespaces pickle alike, as Flink identifies
a namespace by its serializer's bytes), whose value is the pickled ``(key,
namespace)``. So a key group's timers are one contiguous range in time order
(ties: by key, then namespace), which checkpoints, restores and rescales
exactly as other keyed state does (``weir.runtime.rocksdb_backend``).

Registering a timer puts its entry, deleting one deletes it; both wait in
``pending`` and go to RocksDB with the backend's write-back (in the same
batch and change log as every other change). In memory: each key group's
head, the earliest of its timers, when known, all heads sorted
(:class:`SortedEntries`, at most one entry per key group). A timer added before
its group's head becomes the head; deleting or firing the head makes the
group's head unknown, with a lower bound: the old head, since nothing of the
group was before it. Before the next read, the pending changes are written and
each unknown group's head is read by one seek from its bound, which passes over
the deleted entries since then only (seeking from the group's start would pass
every timer deleted there since RocksDB last compacted). A restore reads no
timer until the first read, then one per key group.

Loop thread only, and reads (``peek``, ``pop``) only between records and timers,
where the write-back may run.
"""

from __future__ import annotations

from typing import Any, Protocol

from rocksdict import Rdict

from weir.runtime.keygroups import KeyGroupRange, prefixed_keys
from weir.runtime.serialization import dumps, loads
from weir.runtime.timer_queues import SortedEntries

_OFFSET = 1 << 63  # a timestamp's bytes are (timestamp + _OFFSET), big-endian: signed order as bytes


class _Backend(Protocol):
    db: Rdict
    key_groups: KeyGroupRange
    max_parallelism: int

    def write_back(self) -> None: ...

    def delete_state(self, sid: bytes) -> None: ...


def timer_of(db_key: bytes, value: bytes) -> tuple[int, Any, Any]:
    """``(timestamp, key, namespace)`` of a stored timer."""
    key, namespace = loads(value)
    return int.from_bytes(db_key[6:14], "big") - _OFFSET, key, namespace


class RocksDBTimers:
    """One time domain's timers in the backend's RocksDB (see the module's doc)."""

    def __init__(self, backend: _Backend, sid: bytes) -> None:
        self._backend = backend
        self._sid = sid
        self._groups = [g.to_bytes(2, "big") for g in range(backend.max_parallelism)]
        self.pending: dict[bytes, bytes | None] = {}  # db key -> value to put (None: to delete)
        self._heads: SortedEntries[tuple[bytes, int]] = SortedEntries()  # (db key past the state id, key group)
        self._head: dict[int, tuple[tuple[bytes, int], bytes, bytes]] = {}  # key group -> (entry, db key, value)
        self._unknown = {g: b"" for g in backend.key_groups}  # key group -> what its head is at or after

    def _db_key(self, timestamp: int, key: Any, namespace: Any) -> tuple[int, bytes]:
        grouped = prefixed_keys([key], self._groups)[0]
        encoded = grouped[2:]
        db_key = b"".join(
            (
                grouped[:2],
                self._sid,
                (timestamp + _OFFSET).to_bytes(8, "big"),
                len(encoded).to_bytes(4, "big"),
                encoded,
                b"" if namespace is None else dumps(namespace),
            )
        )
        return int.from_bytes(grouped[:2], "big"), db_key

    def add(self, timestamp: int, key: Any, namespace: Any) -> None:
        group, db_key = self._db_key(timestamp, key, namespace)
        value = self.pending[db_key] = dumps((key, namespace))
        since = db_key[6:]
        bound = self._unknown.get(group)
        if bound is not None:
            if since < bound:
                self._unknown[group] = since
            return
        head = self._head.get(group)
        if head is None or since < head[0][0]:
            if head is not None:
                self._heads.remove(head[0])
            self._set_head(group, db_key, value)

    def remove(self, timestamp: int, key: Any, namespace: Any) -> None:
        group, db_key = self._db_key(timestamp, key, namespace)
        self.pending[db_key] = None
        head = self._head.get(group)
        if head is not None and head[1] == db_key:
            self._heads.remove(head[0])
            self._forget_head(group)

    def peek(self) -> int | None:
        self._settle()
        first = self._heads.first()
        return None if first is None else int.from_bytes(first[0][:8], "big") - _OFFSET

    def pop(self) -> tuple[int, Any, Any]:
        self._settle()
        _, group = self._heads.pop_first()
        _, db_key, value = self._head[group]
        self.pending[db_key] = None
        self._forget_head(group)
        return timer_of(db_key, value)

    def clear(self) -> None:
        self.pending.clear()
        self._heads = SortedEntries()
        self._head.clear()
        self._unknown.clear()  # every group known empty
        self._backend.delete_state(self._sid)

    def drain(self, keys: list[bytes], values: list[bytes], deletes: list[bytes]) -> None:
        """The pending changes into a write-back's lists; none pending after."""
        for db_key, value in self.pending.items():
            if value is None:
                deletes.append(db_key)
            else:
                keys.append(db_key)
                values.append(value)
        self.pending.clear()

    def _set_head(self, group: int, db_key: bytes, value: bytes) -> None:
        entry = (db_key[6:], group)
        self._head[group] = (entry, db_key, value)
        self._heads.add(entry)

    def _forget_head(self, group: int) -> None:
        """The head of ``group`` is gone: the next is at or after it."""
        entry, _, _ = self._head.pop(group)
        self._unknown[group] = entry[0]

    def _settle(self) -> None:
        """Know every group's head: write what is pending, then seek each unknown one."""
        if not self._unknown:
            return
        self._backend.write_back()
        it = self._backend.db.iter()
        for group, bound in self._unknown.items():
            prefix = self._groups[group] + self._sid
            it.seek(prefix + bound)
            if it.valid():
                db_key = it.key()
                if db_key.startswith(prefix):
                    self._set_head(group, db_key, it.value())
        self._unknown.clear()

"""Incremental keyed snapshots: a checkpoint writes what changed since the last one.

A keyed state backend remembers which keys were touched (their state read for a
record or a timer, so maybe changed) between two snapshots. A checkpoint whose
barrier names a *base* (the job's latest completed checkpoint, which this task
wrote too) writes only those keys' entries, a key gone as :data:`REMOVED`: a
*delta*. A restore reads the chain of files, the full snapshot first and each
delta after it, in order. Once the deltas of a chain hold as many entries as
its full snapshot, the next checkpoint writes everything again, so a chain
never holds more than about twice the state, and a restore reads no more.

Entries are kept per state name, not per key group: grouping costs a hash per
key at every checkpoint. A restore that takes over a key-group range whole (the
same parallelism) takes the entries as they are; a rescale hashes each key once.

What a backend remembers for later deltas (:class:`PossibleBases`) is bounded by
the snapshots that may still become a base, however many checkpoints fail.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Protocol, TypeVar, Union

from weir.runtime.keygroups import KeyGroupRange, key_group_for
from weir.runtime.storage import DbFile


class _Removed:
    """The mark of a key removed since the base: pickled by reference, so it is
    this same object after any restore."""

    def __repr__(self) -> str:
        return "REMOVED"

    def __reduce__(self) -> str:
        return "REMOVED"


REMOVED = _Removed()


@dataclass(frozen=True)
class KeyedSnapshot:
    """One keyed backend's part of a snapshot: ``tables`` (state name -> key ->
    value) holds every entry, or with ``delta`` the entries of the keys touched
    since its base. ``live_keys``: the entries the backend held at the time;
    ``ttl_states``: the states whose entries are ``(value, last_access_ms)``."""

    tables: dict[str, dict[Any, Any]]
    delta: bool = False
    live_keys: int = 0
    ttl_states: tuple[str, ...] = ()


class FileKeyed(abc.ABC):
    """A keyed snapshot that a backend keeps in files of its own (RocksDB's): it is
    always whole (never a delta), and any backend can read it as plain entries,
    once :meth:`located` told it where its files are. ``ttl_states``: as
    :class:`KeyedSnapshot`'s."""

    ttl_states: tuple[str, ...]

    @abc.abstractmethod
    def located(self, files: tuple[DbFile, ...]) -> "FileKeyed":
        """This snapshot, with its files found among ``files`` (its state handle's)."""

    @abc.abstractmethod
    def tables_in(self, owned: KeyGroupRange) -> dict[str, dict[Any, Any]]:
        """Its entries in the key groups ``owned``: state name -> key -> value."""


class FileUpload(Protocol):
    """A backend's files for one snapshot, taken on the loop thread at the barrier,
    copied into storage on the writer's thread."""

    def run(self, folder: str, prefix: str, shared: bool) -> tuple[DbFile, ...]:
        """Upload into ``folder`` (file names start with ``prefix``); ``shared``:
        a checkpoint's files, which later checkpoints may name again."""


# What older snapshots hold instead: key group -> state name -> key -> value.
LegacyKeyed = dict[int, dict[str, dict[Any, Any]]]
Keyed = Union[KeyedSnapshot, LegacyKeyed, FileKeyed]


def located(keyed: Keyed, files: tuple[DbFile, ...]) -> Keyed:
    """``keyed`` as read from a state file whose handle names ``files``."""
    return keyed.located(files) if isinstance(keyed, FileKeyed) else keyed


@dataclass(frozen=True)
class ChainSize:
    """Entries in a chain: its full snapshot's, and all its deltas' together."""

    full: int
    deltas: int

    def with_delta(self, entries: int) -> "ChainSize | None":
        """The chain after a delta of ``entries``; None: time for a full snapshot,
        since the deltas would outweigh the full one (a restore reads them all)."""
        deltas = self.deltas + entries
        return ChainSize(self.full, deltas) if deltas <= self.full else None


T = TypeVar("T")

# Snapshots kept as possible bases besides the latest completed one: the newest, as
# many as a job usually has checkpoints in flight (more in flight: a snapshot whose
# base was dropped is written whole).
NEWEST_KEPT = 2


class PossibleBases(Generic[T]):
    """What a keyed backend keeps, per snapshot that a later one may still name as
    its base, for a snapshot on it (``T``), in snapshot order. A barrier names the
    job's latest completed checkpoint, so later ones name it or a newer one.

    Bounded by what a restore can need, whatever fails (a store that hangs for an
    hour fails every checkpoint): an entry goes once its snapshot cannot be a
    base. That is when it was aborted, when a newer one completed (a notification,
    or a barrier naming it), or, should no word come, when it is neither the latest
    completed one nor among the ``NEWEST_KEPT`` newest: so it never holds more than
    ``NEWEST_KEPT + 1`` entries, and two when every abort is told. An entry that goes
    from after another is merged into it (``merge(before, gone)``), since what it
    kept about the time after its own snapshot is about the time after that one's
    too; one with none before it goes whole. A snapshot whose base has no entry is
    written whole, which is always exact.

    Threads: the task's loop thread only."""

    def __init__(self, merge: Callable[[T, T], T] | None = None) -> None:
        self._entries: dict[int, T] = {}  # snapshot id -> its entry, in snapshot order
        self._completed: int | None = None
        self._merge = merge

    def ids(self) -> list[int]:
        """The snapshots kept, oldest first."""
        return list(self._entries)

    def get(self, checkpoint_id: int) -> T | None:
        return self._entries.get(checkpoint_id)

    def newest(self) -> T | None:
        return self._entries[next(reversed(self._entries))] if self._entries else None

    def since(self, base: int) -> list[T]:
        """For a snapshot whose barrier names ``base`` (so it completed): the entries
        from ``base`` on, oldest first; none when ``base`` is not kept."""
        self.completed(base)
        return list(self._entries.values()) if base in self._entries else []

    def add(self, checkpoint_id: int, entry: T) -> None:
        """A snapshot was taken: the newest entry."""
        self._entries[checkpoint_id] = entry
        for cid in list(self._entries)[:-NEWEST_KEPT]:
            if cid != self._completed:
                self._remove(cid)

    def completed(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` completed: no older one can be a base any more."""
        if self._completed is not None and checkpoint_id <= self._completed:
            return
        self._completed = checkpoint_id
        for cid in [c for c in self._entries if c < checkpoint_id]:
            del self._entries[cid]  # the oldest: none before them is left to merge into

    def aborted(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` will never complete, so never be a base."""
        self._remove(checkpoint_id)

    def _remove(self, checkpoint_id: int) -> None:
        gone = self._entries.pop(checkpoint_id, None)
        before = [c for c in self._entries if c < checkpoint_id]
        if gone is not None and before and self._merge is not None:
            self._entries[before[-1]] = self._merge(self._entries[before[-1]], gone)


def delta_of(tables: dict[str, dict[Any, Any]], keys: Iterable[Any]) -> dict[str, dict[Any, Any]]:
    """Each table's entries under ``keys``, a key it lacks as REMOVED."""
    keys = list(keys)
    out = {}
    for name, table in tables.items():
        get = table.get
        out[name] = {k: get(k, REMOVED) for k in keys}
    return out


def merged(chain: list[Keyed]) -> Keyed:
    """One subtask's keyed state from its chain of snapshots, oldest first: a full
    snapshot starts anew, a delta changes what came before it."""
    whole = [i for i, snap in enumerate(chain) if not (isinstance(snap, KeyedSnapshot) and snap.delta)]
    chain = chain[whole[-1] :] if whole else chain
    if len(chain) == 1 or not isinstance(chain[0], KeyedSnapshot):
        return chain[0]  # deltas follow only a heap backend's full snapshot
    tables: dict[str, dict[Any, Any]] = {}
    for snap in chain:
        assert isinstance(snap, KeyedSnapshot)
        if not snap.delta:
            tables = dict(snap.tables)  # freshly unpickled: changed in place by the deltas after it
            continue
        for name, entries in snap.tables.items():
            table = tables.setdefault(name, {})
            for key, value in entries.items():
                if value is REMOVED:
                    table.pop(key, None)
                else:
                    table[key] = value
    newest = chain[-1]
    assert isinstance(newest, KeyedSnapshot)
    return KeyedSnapshot(
        {n: t for n, t in tables.items() if t}, live_keys=newest.live_keys, ttl_states=newest.ttl_states
    )


def restore_into(
    tables: dict[str, dict[Any, Any]],
    keyed: Keyed,
    owned: KeyGroupRange,
    held: KeyGroupRange,
    max_parallelism: int,
) -> None:
    """Add to ``tables`` the entries of ``keyed`` (one old subtask's, which held the
    key groups ``held``) in the key groups this subtask ``owned``."""
    if not held.overlaps(owned):
        return  # nothing of it is this subtask's: not read at all
    if isinstance(keyed, FileKeyed):
        for name, entries in keyed.tables_in(owned).items():
            tables.setdefault(name, {}).update(entries)
        return
    if not isinstance(keyed, KeyedSnapshot):
        for kg, legacy in keyed.items():
            if kg in owned:
                for name, entries in legacy.items():
                    tables.setdefault(name, {}).update(entries)
        return
    whole = owned.start <= held.start and held.end <= owned.end
    for name, entries in keyed.tables.items():
        table = tables.setdefault(name, {})
        if whole:
            table.update(entries)
            continue
        for key, value in entries.items():
            if key_group_for(key, max_parallelism) in owned:
                table[key] = value

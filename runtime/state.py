"""Keyed state (per key group) and operator list state, with snapshot and restore.

Keyed state lives in plain dicts ``name -> {key: value}`` so the hot path is one
dict lookup; a snapshot groups the entries by key group, which is the unit a
restore (also with another parallelism) picks up. Operator list state is split
evenly on restore, or handed out whole to every subtask for union list state.

State values must be picklable: a snapshot pickles them.

Keyed state may have a time to live (:class:`StateTtlConfig`, processing time):
each entry (a value, a list element, a map entry) is kept as the plain tuple
``(value, last_access_ms)``, so its timestamp travels in snapshots and moves with
its key group on restore and rescale; a snapshot names its states with a time to
live (``ttl_states``), for readers. A plain tuple pickles and unpickles five times
as fast as a class of weir's (a class is looked up by name at each load).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Generic,
    Iterable,
    Iterator,
    MutableMapping,
    NamedTuple,
    TypeVar,
    overload,
)

from weir.runtime.broadcast_state import BroadcastState, ReadOnlyBroadcastState
from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.incremental import (
    ChainSize,
    FileUpload,
    Keyed,
    KeyedSnapshot,
    PossibleBases,
    delta_of,
    restore_into,
)
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.timer_queues import HeapTimers, TimerQueue
from weir.runtime.typeinfo import BasicTypeInfo, TypeInformation, type_arg

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")

_MISSING = object()


def processing_time_ms() -> int:
    """The clock of state TTL: wall-clock milliseconds (tests put their own clock here)."""
    return int(time.time() * 1000)


class StateTtlConfig:
    """How long keyed state lives after it was written (or read), PyFlink's
    ``StateTtlConfig``: ``StateTtlConfig.new_builder(Time.days(1)).build()``, then
    ``descriptor.enable_time_to_live(config)``. Time is processing time, the only
    kind Flink has for TTL.

    Cleanup: an expired entry is removed when it is read, and (unless
    ``disable_cleanup_in_background()`` without ``cleanup_full_snapshot()``) by a
    sweep at every checkpoint over the next ``TTL_SWEEP_BUDGET`` entries of the
    state (see :meth:`KeyedStateBackend.drop_expired`), which leaves it out of
    the snapshot and out of the state the job keeps. That sweep is weir's
    background cleanup: Flink's heap backend
    checks a few entries per access instead (``cleanup_incrementally``), which
    weir accepts and serves with the sweep; ``cleanup_in_rocksdb_compact_filter``
    has no effect (the sweep serves weir's RocksDB backend too)."""

    class UpdateType(enum.Enum):
        """When an entry's time to live starts again."""

        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(enum.Enum):
        """Whether a read may still see an expired entry not yet cleaned up (and then removes it)."""

        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(enum.Enum):
        ProcessingTime = 0

    def __init__(
        self,
        ttl_ms: int,
        update_type: "StateTtlConfig.UpdateType",
        state_visibility: "StateTtlConfig.StateVisibility",
        cleanup_at_snapshot: bool,
    ) -> None:
        self.ttl_ms = ttl_ms
        self.update_type = update_type
        self.state_visibility = state_visibility
        self.cleanup_at_snapshot = cleanup_at_snapshot

    @staticmethod
    def new_builder(ttl: int) -> "StateTtlConfig.Builder":
        """``ttl`` in milliseconds (``Time.seconds(1)`` is 1000)."""
        return StateTtlConfig.Builder(ttl)

    def get_ttl(self) -> int:
        return self.ttl_ms

    def get_update_type(self) -> "StateTtlConfig.UpdateType":
        return self.update_type

    def get_state_visibility(self) -> "StateTtlConfig.StateVisibility":
        return self.state_visibility

    def get_ttl_time_characteristic(self) -> "StateTtlConfig.TtlTimeCharacteristic":
        return StateTtlConfig.TtlTimeCharacteristic.ProcessingTime

    def is_enabled(self) -> bool:
        return self.update_type is not StateTtlConfig.UpdateType.Disabled

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig(ttl_ms={self.ttl_ms}, update_type={self.update_type.name}, "
            f"state_visibility={self.state_visibility.name}, cleanup_at_snapshot={self.cleanup_at_snapshot})"
        )

    class Builder:
        def __init__(self, ttl: int) -> None:
            self.set_ttl(ttl)
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._in_background = True
            self._at_snapshot = False

        def set_ttl(self, ttl: int) -> "StateTtlConfig.Builder":
            if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
                raise InvalidConfigurationError(
                    "state TTL", ttl, "must be a positive number of milliseconds, e.g. Time.seconds(1)"
                )
            self._ttl_ms = ttl
            return self

        def set_update_type(self, update_type: "StateTtlConfig.UpdateType") -> "StateTtlConfig.Builder":
            self._update_type = _member(StateTtlConfig.UpdateType, update_type, "state TTL update type")
            return self

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: "StateTtlConfig.StateVisibility") -> "StateTtlConfig.Builder":
            self._visibility = _member(StateTtlConfig.StateVisibility, state_visibility, "state TTL visibility")
            return self

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, characteristic: "StateTtlConfig.TtlTimeCharacteristic"
        ) -> "StateTtlConfig.Builder":
            _member(StateTtlConfig.TtlTimeCharacteristic, characteristic, "state TTL time characteristic")
            return self

        def use_processing_time(self) -> "StateTtlConfig.Builder":
            return self

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            """Leave expired entries out of checkpoints (weir: and out of the state kept)."""
            self._at_snapshot = True
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> "StateTtlConfig.Builder":
            """Flink's heap backend checks ``cleanup_size`` entries per access; weir
            checks a bounded number of entries at each checkpoint instead
            (``KeyedStateBackend.TTL_SWEEP_BUDGET``)."""
            self._at_snapshot = True
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int, periodic_compaction_time: int = 30 * 86_400_000
        ) -> "StateTtlConfig.Builder":
            """No effect: the sweep at each checkpoint removes expired entries on either backend."""
            return self

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            """Expired entries then go only when read, unless ``cleanup_full_snapshot()``."""
            self._in_background = False
            return self

        def build(self) -> "StateTtlConfig":
            return StateTtlConfig(
                self._ttl_ms, self._update_type, self._visibility, self._at_snapshot or self._in_background
            )


E = TypeVar("E", bound=enum.Enum)


def _member(kind: type[E], value: Any, setting: str) -> E:
    if not isinstance(value, kind):
        raise InvalidConfigurationError(
            setting, value, f"use one of {', '.join(f'StateTtlConfig.{kind.__name__}.{m.name}' for m in kind)}"
        )
    return value


@dataclass(frozen=True)
class StateDescriptor:
    """A keyed state's name, and the time to live of its entries (none by default)."""

    name: str
    ttl_config: StateTtlConfig | None = field(default=None, compare=False, repr=False, kw_only=True)

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Entries of this state expire ``ttl_config.get_ttl()`` ms after they were
        written (or read, with ``UpdateType.OnReadAndWrite``). Keyed state only.
        Keep one setting for a state across restores: a state checkpointed
        without TTL is not readable with it, nor the reverse (Flink refuses that change)."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise InvalidConfigurationError(
                f"time to live of state '{self.name}'",
                ttl_config,
                "use StateTtlConfig.new_builder(Time.seconds(n)).build()",
            )
        object.__setattr__(self, "ttl_config", ttl_config if ttl_config.is_enabled() else None)


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor, Generic[T]):
    """Keyed value state: PyFlink's ``ValueStateDescriptor(name, value_type_info)``;
    ``default`` (weir's, by keyword) is what ``value()`` gives before any update.
    The type is checked to be a type and not used: state keeps Python objects."""

    value_type_info: TypeInformation | None = field(default=None, compare=False)
    default: Any = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        type_arg(
            self.value_type_info,
            f"value_type_info of state '{self.name}'",
            "; a default value goes by keyword: default=...",
        )


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor, Generic[T]):
    """Keyed or operator list state: PyFlink's ``ListStateDescriptor(name, elem_type_info)``
    (the type is checked and not used)."""

    elem_type_info: TypeInformation | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        type_arg(self.elem_type_info, f"elem_type_info of state '{self.name}'")


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor, Generic[K, V]):
    """Keyed map state, or (given to ``stream.broadcast(...)``) broadcast state:
    PyFlink's ``MapStateDescriptor(name, key_type_info, value_type_info)`` (the
    types are checked and not used)."""

    key_type_info: TypeInformation | None = field(default=None, compare=False)
    value_type_info: TypeInformation | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        type_arg(self.key_type_info, f"key_type_info of state '{self.name}'")
        type_arg(self.value_type_info, f"value_type_info of state '{self.name}'")


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor, Generic[T]):
    """Keyed state that folds what is added into one value:
    PyFlink's ``ReducingStateDescriptor(name, reduce_function, type_info)``, the
    function a ``ReduceFunction`` or a callable ``(a, b) -> value``. A basic
    ``type_info`` converts the value as :class:`ValueState`'s does."""

    reduce_function: Any = None
    type_info: TypeInformation | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not callable(getattr(self.reduce_function, "reduce", self.reduce_function)):
            raise InvalidConfigurationError(
                f"reduce function of state '{self.name}'",
                self.reduce_function,
                "use a ReduceFunction or a callable (a, b) -> value",
            )
        type_arg(self.type_info, f"type_info of state '{self.name}'")


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor):
    """Keyed state that adds values into an accumulator of an ``AggregateFunction``
    and reads as its ``get_result``: PyFlink's
    ``AggregatingStateDescriptor(name, agg_function, state_type_info)`` (the
    accumulator's type, checked and not used)."""

    agg_function: Any = None
    state_type_info: TypeInformation | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not all(callable(getattr(self.agg_function, m, None)) for m in ("create_accumulator", "add", "get_result")):
            raise InvalidConfigurationError(
                f"aggregate function of state '{self.name}'", self.agg_function, "use an AggregateFunction"
            )
        type_arg(self.state_type_info, f"state_type_info of state '{self.name}'")


@dataclass
class OperatorSnapshot:
    """What one operator subtask hands to a checkpoint."""

    keyed: Keyed | None = None  # a keyed operator's state (older files: grouped by key group)
    lists: dict[str, list[Any]] = field(default_factory=dict)
    union_lists: dict[str, list[Any]] = field(default_factory=dict)
    broadcast: dict[str, dict[Any, Any]] = field(default_factory=dict)  # name -> entries
    finished: bool = False  # finish() ran: its input ended, but the task may still run (a drained stop)
    finished_on_restore: bool = False  # restored fully finished: never runs again, holds no state

    def summary(self) -> "SnapshotSummary":
        operator_state = any(self.lists.values()) or any(self.union_lists.values()) or any(self.broadcast.values())
        keyed = self.keyed.live_keys > 0 if isinstance(self.keyed, KeyedSnapshot) else bool(self.keyed)
        return SnapshotSummary(
            self.finished,
            keyed or operator_state,
            any(self.union_lists.values()),
            self.finished_on_restore,
            operator_state,
        )


@dataclass(frozen=True)
class SnapshotSummary:
    """What the checkpoint coordinator learns of an operator subtask's snapshot."""

    finished: bool
    has_state: bool
    has_union_state: bool
    finished_on_restore: bool = False
    has_operator_state: bool = False  # list, union list or broadcast state: every subtask's file is read on a restore


class KeyedStateBackend:
    """Holds every keyed state of one operator subtask on the heap (Flink's
    ``HashMapStateBackend``; ``weir.runtime.rocksdb_backend`` keeps them in
    RocksDB behind the same interface). The loop thread sets the current key
    before it calls a user function, and marks it touched (:meth:`touch`): a
    checkpoint may write only the touched keys (see ``weir.runtime.incremental``).
    ``clock`` is the processing time state TTL reads.

    State classes use a table (:meth:`table`) as a dict and change its values in
    place (a list appended to, a map entry put), within one call for one key."""

    def __init__(self, max_parallelism: int, key_groups: KeyGroupRange, clock: Callable[[], int] | None = None) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.tables: dict[str, dict[Any, Any]] = {}
        self.current_key: Any = None
        self.clock = clock or processing_time_ms
        self.ttl_states: set[str] = set()  # the names of the states with a time to live
        self._swept: dict[str, _Ttl] = {}  # TTL states whose expired entries go at each snapshot
        self._sweeping: dict[str, tuple[Any, Any]] = {}  # TTL state -> where its sweep stands (per backend)
        self.touched: set[Any] = set()  # keys whose state may have changed since the last snapshot
        self._bases: PossibleBases[_Since] = PossibleBases(_Since.merged)
        self.incremental_base: int | None = None  # the checkpoint the next snapshot may write changes against
        self._timers: dict[str, TimerQueue] = {}

    def touch(self, key: Any) -> None:
        """``key`` becomes current, and its state may change. Called between records
        (and timers), before the state of ``key`` is read."""
        self.current_key = key
        self.touched.add(key)

    def changed(self, keys: list[Any]) -> None:
        """What a hot loop that reads tables itself (a keyed reduce, after
        :meth:`read_ahead` of its batch) calls once with its batch's keys after
        the batch: :meth:`touch` of each, without setting the current key."""
        self.touched.update(keys)

    def read_ahead(self, keys: list[Any]) -> None:
        """Before a batch of records with these keys: an on-disk backend reads
        their state in one go (the heap's is in memory: nothing to do)."""

    def table(self, name: str) -> MutableMapping[Any, Any]:
        t = self.tables.get(name)
        if t is None:
            t = self.tables[name] = {}
        return t

    def timers(self, name: str) -> TimerQueue:
        """The timers of one time domain (see ``weir.runtime.timer_queues``), made
        once (after any restore) and shared: on the heap, a table and a heap of them."""
        queue = self._timers.get(name)
        if queue is None:
            queue = self._timers[name] = HeapTimers(self.table(name), lambda keys: self.touched.update(keys))
        return queue

    def take_uploads(self) -> list[FileUpload]:
        """The files the last snapshot left to upload (none: the heap's are in its snapshot)."""
        return []

    def close(self) -> None:
        """Release what the backend holds outside the heap (the heap's: nothing)."""

    def ttl(self, descriptor: StateDescriptor) -> "_Ttl | None":
        config = descriptor.ttl_config
        if config is None:
            return None
        ttl = _Ttl(config, self.clock)
        self.ttl_states.add(descriptor.name)
        if config.cleanup_at_snapshot:
            self._swept[descriptor.name] = ttl
        return ttl

    # Entries of each TTL state a snapshot checks for expiry (or as many as keys
    # changed since the last one, if more): a sweep goes on where the last one
    # stopped, so a snapshot's cleanup costs what changed or this budget, never a
    # pass over all state; a pass over a state of n keys takes n / budget snapshots.
    TTL_SWEEP_BUDGET = 10_000

    def drop_expired(self) -> None:
        """Remove expired entries of the TTL states that clean up at snapshots: a
        sweep of a bounded number of them (see ``TTL_SWEEP_BUDGET``)."""
        now = self.clock()
        budget = max(self.TTL_SWEEP_BUDGET, len(self.touched))
        for name, ttl in self._swept.items():
            table = self.table(name)
            for key, stored in self.sweep(name, budget):
                kept = ttl.unexpired(stored, now)
                if kept is stored:
                    continue
                self.touched.add(key)
                if kept is None:
                    self.forget(table, key)
                else:
                    table[key] = kept

    def forget(self, table: MutableMapping[Any, Any], key: Any) -> None:
        """Remove ``key``, which the sweep just read, from ``table``."""
        del table[key]

    def sweep(self, name: str, budget: int) -> list[tuple[Any, Any]]:
        """The next ``budget`` entries of state ``name`` in a pass over it that goes
        on where the last call stopped, and starts again after its end. The heap
        lists a state's keys once a pass (references only)."""
        table = self.table(name)
        keys, at = self._sweeping.get(name, ((), 0))
        if at >= len(keys):
            keys, at = list(table), 0
        batch = keys[at : at + budget]
        self._sweeping[name] = (keys, at + len(batch))
        return [(k, table[k]) for k in batch if k in table]

    def snapshot(self, checkpoint_id: int) -> KeyedSnapshot:
        """Every entry, or (when :attr:`incremental_base` names a checkpoint this
        backend snapshotted and still keeps as a base, and its chain is not due
        for a full one) the entries of the keys touched since it."""
        self.drop_expired()
        live = sum(len(t) for t in self.tables.values())
        base = self.incremental_base
        since = [] if base is None else self._bases.since(base)
        keys: set[Any] = set()
        grown = None
        if since:  # the newest entry's keys are self.touched: keys touched since base, up to now
            keys = set().union(*(s.keys for s in since))
            grown = since[0].chain.with_delta(len(keys))
        self.touched = set()
        self._bases.add(checkpoint_id, _Since(grown or ChainSize(live, 0), self.touched))
        ttl = tuple(sorted(self.ttl_states))
        if grown is not None:
            return KeyedSnapshot(delta_of(self.tables, keys), delta=True, live_keys=live, ttl_states=ttl)
        return KeyedSnapshot({name: t for name, t in self.tables.items() if t}, live_keys=live, ttl_states=ttl)

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """No snapshot older than ``checkpoint_id`` is a base any more."""
        self._bases.completed(checkpoint_id)

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` will never be a base: the keys touched after it count
        from the snapshot before it."""
        self._bases.aborted(checkpoint_id)
        newest = self._bases.newest()
        if newest is not None:
            self.touched = newest.keys  # the aborted one's, or the one its keys were merged into

    def kept_bases(self) -> list[int]:
        """The snapshots kept as possible bases of a delta, oldest first."""
        return self._bases.ids()

    def restore(self, snapshots: Iterable[tuple[KeyGroupRange, Keyed]], checkpoint_id: int | None = None) -> None:
        """Take the entries in this subtask's key groups from each old subtask's
        merged snapshot (with the key groups it held); ``checkpoint_id``: the
        checkpoint they come from (None: a savepoint)."""
        for held, keyed in snapshots:
            restore_into(self.tables, keyed, self.key_groups, held, self.max_parallelism)


@dataclass
class _Since:
    """A heap snapshot as a possible base: its chain's size, and the keys touched
    from it until the next snapshot kept (the newest's: until now, ``touched``)."""

    chain: ChainSize
    keys: set[Any]

    @staticmethod
    def merged(before: "_Since", gone: "_Since") -> "_Since":
        """``before``, now also standing for the time after ``gone`` (the smaller set
        goes into the larger: a hot key set is not copied per checkpoint)."""
        small, large = sorted((before.keys, gone.keys), key=len)
        large |= small
        return _Since(before.chain, large)


class TtlValue(NamedTuple):
    """A time-to-live entry as snapshots before 2026-11-29 hold it: restored as they
    are, a tuple like the ``(value, last_access_ms)`` entries of newer ones."""

    value: Any
    last_access_ms: int


class _Ttl:
    """The time to live of one keyed state, over its ``(value, last_access_ms)`` entries."""

    def __init__(self, config: StateTtlConfig, clock: Callable[[], int]) -> None:
        self.ttl_ms = config.ttl_ms
        self.renew_on_read = config.update_type is StateTtlConfig.UpdateType.OnReadAndWrite
        self.return_expired = config.state_visibility is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
        self.clock = clock

    def wrap(self, value: Any) -> tuple[Any, int]:
        return (value, self.clock())

    def get(self, store: MutableMapping[Any, tuple[Any, int]], key: Any, now: int) -> Any:
        """What a read of ``store[key]`` sees at ``now``: the value, or ``_MISSING``.
        An expired entry is removed, and seen only with ``ReturnExpiredIfNotCleanedUp``;
        another starts its time to live again with ``OnReadAndWrite``."""
        entry = store.get(key)
        if entry is None:
            return _MISSING
        if entry[1] + self.ttl_ms <= now:
            del store[key]
            return entry[0] if self.return_expired else _MISSING
        if self.renew_on_read:
            store[key] = (entry[0], now)
        return entry[0]

    def read(self, store: MutableMapping[Any, tuple[Any, int]], keys: Iterable[Any]) -> list[tuple[Any, Any]]:
        """:meth:`get` of each of ``keys``: the ``(key, value)`` pairs seen."""
        now = self.clock()
        seen = ((k, self.get(store, k, now)) for k in list(keys))
        return [(k, v) for k, v in seen if v is not _MISSING]

    def unexpired(self, stored: Any, now: int) -> Any:
        """What is left of a key's stored state (an entry, or a list or map of them)
        without its expired entries: ``stored`` itself when none expired; None: nothing."""
        ttl_ms = self.ttl_ms
        if isinstance(stored, tuple):
            return stored if stored[1] + ttl_ms > now else None
        if isinstance(stored, list):
            kept: Any = [e for e in stored if e[1] + ttl_ms > now]
        else:
            kept = {k: e for k, e in stored.items() if e[1] + ttl_ms > now}
        return stored if len(kept) == len(stored) else kept or None


class ValueState(Generic[T]):
    """A value per key. A basic type declared for it (``Types.FLOAT()``, ``INT()``,
    ...) converts what is stored as PyFlink's serializer does: a FLOAT reads back
    rounded through 4 bytes, an int declared DOUBLE as a float."""

    def __init__(self, backend: KeyedStateBackend, descriptor: ValueStateDescriptor[T]) -> None:
        self._backend = backend
        self._table = backend.table(descriptor.name)
        self._default = descriptor.default
        declared = descriptor.value_type_info
        self._declared = declared if isinstance(declared, BasicTypeInfo) else None
        self._name = descriptor.name

    def _stored(self, value: T) -> T:
        if self._declared is None:
            return value
        try:
            return self._declared.convert(value)  # type: ignore[no-any-return]
        except TypeError as exc:
            raise TypeError(f"value state '{self._name}' of {self._declared!r}: {exc}") from None

    def value(self) -> T:
        return self._table.get(self._backend.current_key, self._default)

    def update(self, value: T) -> None:
        self._table[self._backend.current_key] = self._stored(value)

    def clear(self) -> None:
        self._table.pop(self._backend.current_key, None)


class TtlValueState(ValueState[T]):
    def __init__(self, backend: KeyedStateBackend, descriptor: ValueStateDescriptor[T], ttl: _Ttl) -> None:
        super().__init__(backend, descriptor)
        self._ttl = ttl

    def value(self) -> T:
        ttl = self._ttl
        value = ttl.get(self._table, self._backend.current_key, ttl.clock())
        return self._default if value is _MISSING else value  # type: ignore[no-any-return]

    def update(self, value: T) -> None:
        self._table[self._backend.current_key] = self._ttl.wrap(self._stored(value))


class ListState(Generic[T]):
    """Keyed list state (within a keyed function) or operator list state."""

    def __init__(
        self, get: Callable[[], list[T] | None], put: Callable[[list[T]], None], drop: Callable[[], None]
    ) -> None:
        self._get, self._put, self._drop = get, put, drop

    def get(self) -> Iterable[T]:
        return list(self._get() or [])

    def add(self, value: T) -> None:
        items = self._get()
        if items is None:
            self._put([value])
        else:
            items.append(value)

    def add_all(self, values: Iterable[T]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[T]) -> None:
        self._put(list(values))

    def clear(self) -> None:
        self._drop()

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class TtlListState(ListState[T]):
    """Keyed list state whose elements each have a time to live."""

    def __init__(
        self, get: Callable[[], list[T] | None], put: Callable[[list[T]], None], drop: Callable[[], None], ttl: _Ttl
    ) -> None:
        super().__init__(get, put, drop)
        self._ttl = ttl

    def get(self) -> Iterable[T]:
        items: list[Any] = self._get() or []
        by_index = dict(enumerate(items))
        seen = self._ttl.read(by_index, range(len(items)))
        if len(by_index) < len(items) or self._ttl.renew_on_read:
            if by_index:
                self._put(list(by_index.values()))
            else:
                self._drop()
        return [value for _, value in seen]

    def add(self, value: T) -> None:
        super().add(self._ttl.wrap(value))  # type: ignore[arg-type]

    def update(self, values: Iterable[T]) -> None:
        self._put([self._ttl.wrap(v) for v in values])  # type: ignore[misc]


class ReducingState(Generic[T]):
    """A key's value folded from everything added (``get()`` is None before the first ``add``)."""

    def __init__(self, value: ValueState[Any], reduce: Callable[[T, T], T]) -> None:
        self._value, self._reduce = value, reduce

    def get(self) -> T | None:
        return self._value.value()  # type: ignore[no-any-return]

    def add(self, value: T) -> None:
        current = self._value.value()
        self._value.update(value if current is None else self._reduce(current, value))

    def clear(self) -> None:
        self._value.clear()


class AggregatingState(Generic[IN, OUT]):
    """A key's accumulator of what was added, read through ``get_result`` (``get()``
    is None before the first ``add``)."""

    def __init__(self, accumulator: ValueState[Any], agg: Any) -> None:
        self._accumulator, self._agg = accumulator, agg

    def get(self) -> OUT | None:
        accumulator = self._accumulator.value()
        return None if accumulator is None else self._agg.get_result(accumulator)  # type: ignore[no-any-return]

    def add(self, value: IN) -> None:
        accumulator = self._accumulator.value()
        if accumulator is None:
            accumulator = self._agg.create_accumulator()
        self._accumulator.update(self._agg.add(value, accumulator))

    def clear(self) -> None:
        self._accumulator.clear()


@overload
def keyed_state(backend: KeyedStateBackend, descriptor: ValueStateDescriptor[T]) -> "ValueState[T]": ...


@overload
def keyed_state(backend: KeyedStateBackend, descriptor: ListStateDescriptor[T]) -> "ListState[T]": ...


@overload
def keyed_state(backend: KeyedStateBackend, descriptor: MapStateDescriptor[K, V]) -> "MapState[K, V]": ...


@overload
def keyed_state(backend: KeyedStateBackend, descriptor: ReducingStateDescriptor[T]) -> "ReducingState[T]": ...


@overload
def keyed_state(backend: KeyedStateBackend, descriptor: AggregatingStateDescriptor) -> "AggregatingState[Any, Any]": ...


def keyed_state(backend: KeyedStateBackend, descriptor: Any) -> Any:
    """The state object a descriptor names, reading the backend's current key
    (with the descriptor's time to live, if it has one)."""
    if isinstance(descriptor, ReducingStateDescriptor):
        value: ValueStateDescriptor[Any] = ValueStateDescriptor(
            descriptor.name, descriptor.type_info, ttl_config=descriptor.ttl_config
        )
        return ReducingState(
            keyed_state(backend, value), getattr(descriptor.reduce_function, "reduce", descriptor.reduce_function)
        )
    if isinstance(descriptor, AggregatingStateDescriptor):
        accumulator: ValueStateDescriptor[Any] = ValueStateDescriptor(descriptor.name, ttl_config=descriptor.ttl_config)
        return AggregatingState(keyed_state(backend, accumulator), descriptor.agg_function)
    ttl = backend.ttl(descriptor) if isinstance(descriptor, StateDescriptor) else None
    if isinstance(descriptor, ValueStateDescriptor):
        return ValueState(backend, descriptor) if ttl is None else TtlValueState(backend, descriptor, ttl)
    if isinstance(descriptor, ListStateDescriptor):
        table = backend.table(descriptor.name)
        access = (
            lambda: table.get(backend.current_key),
            lambda items: table.__setitem__(backend.current_key, items),
            lambda: table.pop(backend.current_key, None),
        )
        return ListState(*access) if ttl is None else TtlListState(*access, ttl)
    if isinstance(descriptor, MapStateDescriptor):
        return MapState(backend, descriptor) if ttl is None else TtlMapState(backend, descriptor, ttl)
    raise TypeError(
        f"{descriptor!r} is not a ValueStateDescriptor, ListStateDescriptor, MapStateDescriptor, "
        "ReducingStateDescriptor or AggregatingStateDescriptor"
    )


class MapState(Generic[K, V]):
    def __init__(self, backend: KeyedStateBackend, descriptor: MapStateDescriptor[K, V]) -> None:
        self._backend = backend
        self._table = backend.table(descriptor.name)

    def _map(self, create: bool = False) -> dict[K, V] | None:
        m = self._table.get(self._backend.current_key)
        if m is None and create:
            m = self._table[self._backend.current_key] = {}
        return m

    def get(self, key: K, default: V | None = None) -> V | None:
        m = self._map()
        return default if m is None else m.get(key, default)

    def put(self, key: K, value: V) -> None:
        self._map(create=True)[key] = value  # type: ignore[index]

    def remove(self, key: K) -> None:
        m = self._map()
        if m is not None:
            m.pop(key, None)
            if not m:
                self._table.pop(self._backend.current_key, None)

    def contains(self, key: K) -> bool:
        m = self._map()
        return m is not None and key in m

    def items(self) -> list[tuple[K, V]]:
        return list((self._map() or {}).items())

    def keys(self) -> list[K]:
        return list((self._map() or {}).keys())

    def values(self) -> list[V]:
        return list((self._map() or {}).values())

    def is_empty(self) -> bool:
        return not self._map()

    def clear(self) -> None:
        self._table.pop(self._backend.current_key, None)

    def put_all(self, entries: dict[K, V]) -> None:
        for key, value in entries.items():
            self.put(key, value)

    # PyFlink's MapState reads as a dict: ``key in state``, ``state[key]`` (None when
    # absent, as its ``get``), ``state[key] = value``, ``del state[key]``, iteration over keys.
    def __contains__(self, key: K) -> bool:
        return self.contains(key)

    def __getitem__(self, key: K) -> V | None:
        return self.get(key)

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class TtlMapState(MapState[K, V]):
    """Keyed map state whose entries each have a time to live."""

    def __init__(self, backend: KeyedStateBackend, descriptor: MapStateDescriptor[K, V], ttl: _Ttl) -> None:
        super().__init__(backend, descriptor)
        self._ttl = ttl

    def _read(self, keys: Iterable[K] | None = None) -> list[tuple[K, V]]:
        m: Any = self._map()
        if m is None:
            return []
        seen = self._ttl.read(m, m if keys is None else keys)
        if not m:
            self._table.pop(self._backend.current_key, None)
        return seen

    def get(self, key: K, default: V | None = None) -> V | None:
        seen = self._read((key,))
        return seen[0][1] if seen else default

    def put(self, key: K, value: V) -> None:
        m: Any = self._map(create=True)
        m[key] = self._ttl.wrap(value)

    def contains(self, key: K) -> bool:
        return bool(self._read((key,)))

    def items(self) -> list[tuple[K, V]]:
        return self._read()

    def keys(self) -> list[K]:
        return [k for k, _ in self._read()]

    def values(self) -> list[V]:
        return [v for _, v in self._read()]

    def is_empty(self) -> bool:
        return not self._read()


class OperatorStateStore:
    """Operator (non-keyed) state of one subtask: list state, union list state,
    and the broadcast states (name -> entries) its operator declared."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = {}
        self.union_lists: dict[str, list[Any]] = {}
        self.broadcast: dict[str, dict[Any, Any]] = {}

    def get_broadcast_state(
        self, descriptor: MapStateDescriptor[Any, Any], writable: bool
    ) -> ReadOnlyBroadcastState[Any, Any]:
        entries = self.broadcast.get(descriptor.name)
        if entries is None:
            raise ValueError(
                f"no broadcast state named '{descriptor.name}': give its descriptor to stream.broadcast(...); "
                f"this operator has {sorted(self.broadcast) or 'none'}"
            )
        return (BroadcastState if writable else ReadOnlyBroadcastState)(descriptor.name, entries)

    def get_list_state(self, name: str) -> ListState[Any]:
        return self._state(self.lists, name)

    def get_union_list_state(self, name: str) -> ListState[Any]:
        return self._state(self.union_lists, name)

    @staticmethod
    def _state(store: dict[str, list[Any]], name: str) -> ListState[Any]:
        store.setdefault(name, [])
        return ListState(
            lambda: store[name], lambda items: store.__setitem__(name, items), lambda: store.__setitem__(name, [])
        )


def redistribute_lists(previous: list[dict[str, list[Any]]], subtask: int, parallelism: int) -> dict[str, list[Any]]:
    """Split operator list state of the previous subtasks evenly over ``parallelism``
    new subtasks; with unchanged parallelism each subtask gets its own back."""
    if len(previous) == parallelism:
        return {name: list(items) for name, items in previous[subtask].items()}
    merged: dict[str, list[Any]] = {}
    for lists in previous:
        for name, items in lists.items():
            merged.setdefault(name, []).extend(items)
    return {name: items[subtask::parallelism] for name, items in merged.items()}


def union_lists(previous: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {}
    for lists in previous:
        for name, items in lists.items():
            merged.setdefault(name, []).extend(items)
    return merged


def broadcast_copy(previous: list[OperatorSnapshot], subtask: int) -> dict[str, dict[Any, Any]]:
    """The broadcast state subtask ``subtask`` restores: every subtask held the
    same, so it takes one copy: subtask i the copy of old subtask i, round robin
    when there are more now (Flink's rule: no one copy is read by all). A subtask
    still running at the checkpoint is preferred to a finished one (FLIP-147)."""
    running = [s for s in previous if not s.finished] or previous
    if not running:
        return {}
    return {name: dict(entries) for name, entries in running[subtask % len(running)].broadcast.items()}

"""Keyed state (per key group) and operator list state, with snapshot and restore.

Keyed state lives in plain dicts ``name -> {key: value}`` so the hot path is one
dict lookup; a snapshot groups the entries by key group, which is the unit a
restore (also with another parallelism) picks up. Operator list state is split
evenly on restore, or handed out whole to every subtask for union list state.

State values must be picklable: a snapshot pickles them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from runtime.keygroups import KeyGroupRange, key_group_for

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

_MISSING = object()


@dataclass(frozen=True)
class ValueStateDescriptor(Generic[T]):
    name: str
    default: Any = None


@dataclass(frozen=True)
class ListStateDescriptor(Generic[T]):
    name: str


@dataclass(frozen=True)
class MapStateDescriptor(Generic[K, V]):
    name: str


@dataclass
class OperatorSnapshot:
    """What one operator subtask hands to a checkpoint."""

    keyed: dict[int, dict[str, dict[Any, Any]]] = field(default_factory=dict)  # key group -> name -> key -> value
    lists: dict[str, list[Any]] = field(default_factory=dict)
    union_lists: dict[str, list[Any]] = field(default_factory=dict)
    finished: bool = False

    def summary(self) -> "SnapshotSummary":
        return SnapshotSummary(
            self.finished,
            bool(self.keyed) or any(self.lists.values()) or any(self.union_lists.values()),
            any(self.union_lists.values()),
        )


@dataclass(frozen=True)
class SnapshotSummary:
    """What the checkpoint coordinator learns of an operator subtask's snapshot."""

    finished: bool
    has_state: bool
    has_union_state: bool


class KeyedStateBackend:
    """Holds every keyed state of one operator subtask. The loop thread sets the
    current key before it calls a user function; the state objects read it."""

    def __init__(self, max_parallelism: int, key_groups: KeyGroupRange) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.tables: dict[str, dict[Any, Any]] = {}
        self.current_key: Any = None

    def table(self, name: str) -> dict[Any, Any]:
        t = self.tables.get(name)
        if t is None:
            t = self.tables[name] = {}
        return t

    def snapshot(self) -> dict[int, dict[str, dict[Any, Any]]]:
        out: dict[int, dict[str, dict[Any, Any]]] = {}
        groups: dict[Any, int] = {}
        for name, table in self.tables.items():
            for key, value in table.items():
                kg = groups.get(key)
                if kg is None:
                    kg = groups[key] = key_group_for(key, self.max_parallelism)
                out.setdefault(kg, {}).setdefault(name, {})[key] = value
        return out

    def restore(self, snapshots: Iterable[dict[int, dict[str, dict[Any, Any]]]]) -> None:
        for keyed in snapshots:
            for kg, tables in keyed.items():
                if kg in self.key_groups:
                    for name, entries in tables.items():
                        self.table(name).update(entries)


class ValueState(Generic[T]):
    def __init__(self, backend: KeyedStateBackend, descriptor: ValueStateDescriptor[T]) -> None:
        self._backend = backend
        self._table = backend.table(descriptor.name)
        self._default = descriptor.default

    def value(self) -> T:
        return self._table.get(self._backend.current_key, self._default)

    def update(self, value: T) -> None:
        self._table[self._backend.current_key] = value

    def clear(self) -> None:
        self._table.pop(self._backend.current_key, None)


class ListState(Generic[T]):
    """Keyed list state (within a keyed function) or operator list state."""

    def __init__(self, get: Callable[[], list[T] | None], put: Callable[[list[T]], None], drop: Callable[[], None]) -> None:
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


def keyed_list_state(backend: KeyedStateBackend, name: str) -> ListState[Any]:
    table = backend.table(name)
    return ListState(
        lambda: table.get(backend.current_key),
        lambda items: table.__setitem__(backend.current_key, items),
        lambda: table.pop(backend.current_key, None),
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


class OperatorStateStore:
    """Operator (non-keyed) list state of one subtask."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = {}
        self.union_lists: dict[str, list[Any]] = {}

    def get_list_state(self, name: str) -> ListState[Any]:
        return self._state(self.lists, name)

    def get_union_list_state(self, name: str) -> ListState[Any]:
        return self._state(self.union_lists, name)

    @staticmethod
    def _state(store: dict[str, list[Any]], name: str) -> ListState[Any]:
        store.setdefault(name, [])
        return ListState(lambda: store[name], lambda items: store.__setitem__(name, items), lambda: store.__setitem__(name, []))


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

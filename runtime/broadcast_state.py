"""Broadcast state: what each subtask of a broadcast-connected operator holds of
a broadcast stream's state (a map, the same in every subtask), read-only on the
keyed or non-broadcast side and writable on the broadcast side (Flink's rule)."""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ReadOnlyBroadcastState(Generic[K, V]):
    """What ``process_element`` sees of a broadcast state: reads only, since only
    the broadcast side, which every subtask sees alike, may change it (Flink's
    rule: subtasks never talk to each other, so this keeps their copies equal).
    Values are not copied: do not change what ``get`` returns."""

    def __init__(self, name: str, entries: dict[K, V]) -> None:
        self._name = name
        self._entries = entries

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def contains(self, key: K) -> bool:
        return key in self._entries

    def items(self) -> list[tuple[K, V]]:
        return list(self._entries.items())

    def keys(self) -> list[K]:
        return list(self._entries)

    def values(self) -> list[V]:
        return list(self._entries.values())

    def is_empty(self) -> bool:
        return not self._entries

    def __getitem__(self, key: K) -> V | None:
        return self.get(key)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def put(self, key: K, value: V) -> None:
        raise self._read_only()

    def put_all(self, dict_value: dict[K, V]) -> None:
        raise self._read_only()

    def remove(self, key: K) -> None:
        raise self._read_only()

    def clear(self) -> None:
        raise self._read_only()

    def _read_only(self) -> TypeError:
        return TypeError(
            f"broadcast state '{self._name}' is read-only in process_element: change it in "
            "process_broadcast_element, which every subtask runs alike, so their copies stay equal"
        )


class BroadcastState(ReadOnlyBroadcastState[K, V]):
    """What ``process_broadcast_element`` sees of a broadcast state: a map it may
    change. Change it only from the broadcast element (and what every subtask
    holds alike), never from this subtask's own data: each subtask keeps a copy."""

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value

    def put_all(self, dict_value: dict[K, V]) -> None:
        self._entries.update(dict_value)

    def remove(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

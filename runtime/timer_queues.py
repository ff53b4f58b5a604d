"""Where a keyed backend keeps one time domain's timers: a queue of
``(timestamp, key, namespace)`` that fires in time order and forgets a deleted
timer at once (see ``weir.runtime.timers`` for the service operators use).

The heap backend's queue (:class:`HeapTimers`) keeps its timers as keyed state,
a table ``key -> set of (timestamp, namespace)`` (what snapshots carry, per key
group), plus every timer sorted (:class:`SortedEntries`): a delete takes the timer
out at once, where heapq's lazy deletion left it in the heap until its time. The RocksDB backend's (``weir.runtime.rocksdb_timers``) keeps them in the
database with a head per key group in memory.

A queue belongs to its backend (``KeyedStateBackend.timers``), made once per
name after a restore; every caller shares it. Loop thread only.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from typing import Any, Callable, Generic, Iterable, MutableMapping, Protocol, TypeVar

TIMERS = "_timers/"  # the name of a time domain's timer state starts with this


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


E = TypeVar("E", bound=_Ordered)


class TimerQueue(Protocol):
    """One time domain's timers of an operator subtask. ``add`` of a stored timer
    changes nothing; ``remove`` of one not stored neither."""

    def add(self, timestamp: int, key: Any, namespace: Any) -> None: ...

    def remove(self, timestamp: int, key: Any, namespace: Any) -> None: ...

    def peek(self) -> int | None:
        """The earliest timer's timestamp (None: no timer)."""

    def pop(self) -> tuple[int, Any, Any]:
        """Remove the earliest timer and give it back (ties: a deterministic order)."""

    def clear(self) -> None: ...


class SortedEntries(Generic[E]):
    """Distinct comparable entries kept sorted, in blocks of at most ``2 * LOAD``
    (the layout of ``sortedcontainers.SortedList``): adding or removing any
    entry is a bisection and a short list move, each in C, so nothing removed
    stays behind (as with heapq's lazy deletion) and no step walks a heap in Python."""

    LOAD = 500

    __slots__ = ("_blocks", "_lasts")

    def __init__(self, entries: Iterable[E] = ()) -> None:
        ordered = sorted(entries)
        self._blocks: list[list[E]] = [ordered[i : i + self.LOAD] for i in range(0, len(ordered), self.LOAD)]
        self._lasts: list[E] = [block[-1] for block in self._blocks]  # each block's greatest entry

    def first(self) -> E | None:
        return self._blocks[0][0] if self._blocks else None

    def add(self, entry: E) -> None:
        """``entry`` must not be here."""
        blocks, lasts = self._blocks, self._lasts
        at = bisect_left(lasts, entry)
        if at == len(lasts):  # past every entry: the commonest case for timers
            if not blocks:
                blocks.append([entry])
                lasts.append(entry)
                return
            at -= 1
            block = blocks[at]
            block.append(entry)
            lasts[at] = entry
        else:
            block = blocks[at]
            insort(block, entry)
        if len(block) > 2 * self.LOAD:
            blocks.insert(at + 1, block[self.LOAD :])
            del block[self.LOAD :]
            lasts.insert(at, block[-1])

    def remove(self, entry: E) -> None:
        """``entry`` must be here."""
        blocks, lasts = self._blocks, self._lasts
        at = bisect_left(lasts, entry)
        block = blocks[at]
        del block[bisect_left(block, entry)]
        if block:
            lasts[at] = block[-1]
        else:
            del blocks[at], lasts[at]

    def pop_first(self) -> E:
        block = self._blocks[0]
        entry = block.pop(0)
        if not block:
            del self._blocks[0], self._lasts[0]
        return entry


class HeapTimers:
    """The heap backend's timers of one time domain: the table (keyed state, see
    the module's doc), and every timer's place in firing order, one int
    ``timestamp << 64 | registration`` (:class:`SortedEntries` of ints: comparing
    two never reaches a key or namespace, and takes half the time of tuples),
    with a dict each way between timer and place. Ties fire in the order
    registered (after a restore: the table's order). ``changed`` hears of keys
    whose timers changed other than for the current key (a clear), for the
    heap's incremental snapshots."""

    def __init__(
        self, table: MutableMapping[Any, set[tuple[int, Any]]], changed: Callable[[Iterable[Any]], None]
    ) -> None:
        self._table = table
        self._changed = changed
        self._registered = itertools.count()
        registered = self._registered
        self._timers = {
            (ts << 64) + next(registered): (ts, key, ns) for key, timers in table.items() for ts, ns in timers
        }
        self._places = {timer: place for place, timer in self._timers.items()}
        self._sorted: SortedEntries[int] = SortedEntries(self._timers)

    def add(self, timestamp: int, key: Any, namespace: Any) -> None:
        timer = (timestamp, key, namespace)
        if timer in self._places:
            return
        place = self._places[timer] = (timestamp << 64) + next(self._registered)
        self._timers[place] = timer
        self._sorted.add(place)
        timers = self._table.get(key)
        if timers is None:
            self._table[key] = {(timestamp, namespace)}
        else:
            timers.add((timestamp, namespace))

    def remove(self, timestamp: int, key: Any, namespace: Any) -> None:
        place = self._places.pop((timestamp, key, namespace), None)
        if place is not None:
            del self._timers[place]
            self._sorted.remove(place)
            self._forget(timestamp, key, namespace)

    def peek(self) -> int | None:
        first = self._sorted.first()
        return None if first is None else first >> 64

    def pop(self) -> tuple[int, Any, Any]:
        timer = self._timers.pop(self._sorted.pop_first())
        del self._places[timer]
        self._forget(*timer)
        return timer

    def _forget(self, timestamp: int, key: Any, namespace: Any) -> None:
        timers = self._table[key]
        timers.discard((timestamp, namespace))
        if not timers:
            del self._table[key]

    def clear(self) -> None:
        self._changed(self._table)
        self._table.clear()
        self._timers.clear()
        self._places.clear()
        self._sorted = SortedEntries()

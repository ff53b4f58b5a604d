"""Tumbling and sliding windows built for batches of records.

The general :class:`~weir.runtime.windows.WindowOperator` handles any assigner
and trigger one record and one window at a time: a record of a 10 s window
sliding by 2 s lands in 5 windows, and each window entry registers timers. For
the windows most jobs use (tumbling or sliding, by event or processing time,
with the default trigger and no allowed lateness), :class:`AlignedWindowOperator`
does what Flink SQL's window slicing does (FLIP-145):

- Time is cut into *slices* of ``slide`` ms (``size`` must be a multiple of it);
  a window is ``size / slide`` consecutive slices. A key's state is one
  accumulator per slice it has records in: ``{slice end: accumulator}``. A record
  is added once, to its slice. When a window fires, its slices' accumulators are
  merged (``AggregateFunction.merge``), and the oldest slice, which no later
  window needs, is dropped. An aggregate without ``merge()``, a reduce (whose
  order Flink's DataStream windows keep) and a window function over all records
  use *panes* instead: one accumulator per window, the record added to each of
  its windows, no merging. For tumbling windows the two are the same.
- Timers are per window end, shared by every key, not per key and window: an
  in-memory index says which keys have a slice ending at each time, rebuilt from
  the keyed state on a restore (state and index move by key group, so a rescale
  works as for any keyed state). When the watermark (or the clock) passes a
  window's end, every key with a slice in that window fires.
- A record whose windows have all fired is late: dropped, or sent to the late
  side output. With slices, a record whose earliest windows fired but later
  ones did not goes into its slice, which only the later windows read, as in the
  general operator.

Results are the general operator's; only the work differs. Sans-IO, and the
task's loop thread is its only caller.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

from weir.runtime.events import MAX_WATERMARK
from weir.runtime.functions import OutputTag
from weir.runtime.operators import Emitted, TimerOperator, now_ms
from weir.runtime.timers import TimeDomain
from weir.runtime.window_contents import _EMPTY, AggregateContents, _Contents
from weir.runtime.windows import (
    AggregateFunction,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
    WindowCall,
    _no_timestamps,
)


def aligned(assigner: WindowAssigner, trigger: Trigger | None, lateness_ms: int, contents: _Contents) -> bool:
    """Whether :class:`AlignedWindowOperator` runs these windows: tumbling or
    sliding windows (by event or processing time, the size a multiple of the
    slide) with their default trigger and no allowed lateness."""
    kinds = (TumblingEventTimeWindows, SlidingEventTimeWindows)  # and their processing-time subclasses
    if type(assigner) not in (*kinds, TumblingProcessingTimeWindows, SlidingProcessingTimeWindows):
        return False
    slide = getattr(assigner, "slide", assigner.size)  # type: ignore[attr-defined]
    return trigger is None and lateness_ms == 0 and assigner.size % slide == 0  # type: ignore[attr-defined]


def slices(contents: _Contents) -> bool:
    """Whether windows may be built from slices: the contents merge, in any order."""
    return isinstance(contents, AggregateContents) and type(contents.fn).merge is not AggregateFunction.merge


class AlignedWindowOperator(TimerOperator):
    """Keyed tumbling and sliding windows (see the module's doc). State per key:
    ``{slice or window end: accumulator}``."""

    PANES = "_panes"

    def __init__(
        self,
        name: str,
        uid: str,
        contents: _Contents,
        window_function: WindowCall,
        key_selector: Callable[[Any], Any],
        assigner: WindowAssigner,
        late_tag: OutputTag | None,
    ) -> None:
        super().__init__(name, uid, contents.fn, contents.add, key_selector)
        self.contents = contents
        self.window_function = window_function
        self.assigner = assigner
        self.late_tag = late_tag
        self.size: int = assigner.size  # type: ignore[attr-defined]
        self.slide: int = getattr(assigner, "slide", self.size)
        self.offset: int = assigner.offset  # type: ignore[attr-defined]
        # Slices when there is more than one window a record and the contents merge; else panes.
        self.slicing = self.slide != self.size and slices(contents)
        self._domain = TimeDomain.EVENT_TIME if assigner.event_time else TimeDomain.PROCESSING_TIME

    def user_functions(self) -> tuple[Any, ...]:
        return (self.function, self.window_function.fn)

    def open(self) -> None:
        super().open()
        assert self.keyed_backend is not None
        self._panes = self.keyed_backend.table(self.PANES)
        self._index: dict[int, set[Any]] = {}  # slice (or window) end -> keys with one
        self._ends: list[int] = []  # window ends to fire, a heap, each once (see _pending)
        self._pending: set[int] = set()
        self._fired_until: int | None = None  # the latest window end fired
        for key, panes in list(self._panes.items()):  # after a restore
            for end in panes:
                if end != _FIRED:
                    self._indexed(end, key)

    def _indexed(self, end: int, key: Any) -> None:
        """``key`` has a new slice (or pane) ending at ``end``: index it, and have
        the window ends it feeds that have not fired yet fire."""
        keys = self._index.get(end)
        if keys is None:
            keys = self._index[end] = set()
            fired = self._fired_until
            for e in range(end, end + (self.size if self.slicing else self.slide), self.slide):
                if e not in self._pending and (fired is None or e > fired):
                    self._pending.add(e)
                    heapq.heappush(self._ends, e)
        keys.add(key)

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        backend = self.keyed_backend
        assert backend is not None
        keys = self._keys(records, self.key_selector)
        backend.read_ahead(keys)
        panes_of, add, indexed = self._panes, self.contents.add, self._indexed
        size, slide, offset = self.size, self.slide, self.offset
        event_time = self._domain is TimeDomain.EVENT_TIME
        if event_time and timestamps is None:
            raise _no_timestamps()
        watermark = self.timers.watermark if event_time else MAX_WATERMARK
        stamps = timestamps if event_time else [now_ms()] * len(records)
        several = not self.slicing and size != slide  # panes: a record lands in every window it belongs to
        late: list[int] = []
        for i, r in enumerate(records):
            t = stamps[i]  # type: ignore[index]
            try:
                first = t - (t - offset) % slide + slide  # the end of the record's slice: its first window's end
            except TypeError:
                raise _no_timestamps() from None
            if event_time and first + size - slide - 1 <= watermark:
                late.append(i)  # every window it belongs to has fired
                continue
            k = keys[i]
            try:
                panes = panes_of.get(k)
            except Exception as exc:  # an unhashable key
                raise self._key_failed(exc, r) from exc
            if panes is None:
                panes = panes_of[k] = {}
            try:
                if several:
                    for end in range(first, first + size, slide):
                        if not event_time or end - 1 > watermark:  # else that window fired: a record of later ones
                            acc = panes.get(end, _EMPTY)
                            panes[end] = add(acc, r)
                            if acc is _EMPTY:
                                indexed(end, k)
                else:
                    acc = panes.get(first, _EMPTY)
                    panes[first] = add(acc, r)
                    if acc is _EMPTY:
                        indexed(first, k)
            except Exception as exc:
                raise self.fail(self.contents.role, exc, r, True) from exc
        backend.changed(keys)  # a late record's key too: the next delta writes its entry as it is
        if late and self.late_tag is not None:
            emitted = Emitted(timed=True)
            for i in late:
                emitted.to_side(self.late_tag.tag_id, records[i], stamps[i])  # type: ignore[index]
            emitted.flush(self.output)

    def next_processing_timer(self) -> int | None:
        if self.ctx.batch or self._domain is not TimeDomain.PROCESSING_TIME or not self._ends:
            return None
        return self._ends[0] - 1

    def quiesce_timers(self) -> None:
        """The end of input: processing-time windows that have not fired never do (as in Flink)."""
        super().quiesce_timers()
        if self._domain is TimeDomain.PROCESSING_TIME and not self.ctx.batch:
            self._ends.clear()
            self._pending.clear()

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        """Fire every window whose end has passed ``time_ms``, oldest first."""
        if domain is not self._domain:
            return
        emitted = Emitted(timed=True)
        ends = self._ends
        while ends and ends[0] - 1 <= time_ms:
            end = heapq.heappop(ends)
            self._pending.discard(end)
            self._fired_until = end
            self._fire_window(end, emitted)
        emitted.flush(self.output)

    def _fire_window(self, end: int, emitted: Emitted) -> None:
        """Every key's window ``[end - size, end)``; then drop what no later window reads."""
        backend = self.keyed_backend
        assert backend is not None
        touch, panes_of, contents = backend.touch, self._panes, self.contents
        window = TimeWindow(end - self.size, end)
        stamp = window.max_timestamp()
        emit = self.window_function.emitter(window, self.timers.watermark)
        clears = self.window_function.clears
        if self.slicing:
            agg = contents.fn
            parts = range(end - self.size + self.slide, end + 1, self.slide)
            keys: set[Any] = set().union(*(self._index.get(s, ()) for s in parts))
            gone = parts[0]  # the oldest slice: no later window reads it
        else:
            keys = self._index.get(end, set())
            gone = end
        for k in keys:
            touch(k)
            panes = panes_of[k]
            try:
                if not self.slicing:
                    result = contents.result(panes[end])
                elif panes.get(_FIRED, end - 1) >= end:
                    continue  # fired before a restore: a key remembers how far its windows fired
                else:
                    # Into a fresh accumulator: merge() may reuse its first argument, and
                    # a slice's accumulator is read again by the windows after this one.
                    acc = agg.create_accumulator()
                    for s in parts:
                        part = panes.get(s, _EMPTY)
                        if part is not _EMPTY:
                            acc = agg.merge(acc, part)
                    panes[_FIRED] = end
                    result = [agg.get_result(acc)]
            except Exception as exc:
                raise self.fail(contents.role, exc) from exc
            try:
                emitted.add(emit(k, result), stamp)
            except Exception as exc:
                raise self.fail(self.window_function.role, exc) from exc
            if clears:
                self._clear(window)
        for k in self._index.pop(gone, ()):
            touch(k)
            panes = panes_of[k]
            del panes[gone]
            if len(panes) == (_FIRED in panes):
                del panes_of[k]

    def _clear(self, window: TimeWindow) -> None:
        """A process window function's ``clear()``: a key's window is gone, as the general operator calls it."""
        try:
            self.window_function.clear(window, self.timers.watermark)
        except Exception as exc:
            raise self.fail("clear()", exc) from exc


# A key's entry in its panes that says how far its sliced windows have fired:
# after a restore, a window end a slice feeds is pending again, and a key whose
# window at that end fired before the snapshot must not fire it twice.
_FIRED = "fired"


__all__ = ["AlignedWindowOperator", "aligned"]

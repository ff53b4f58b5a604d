"""Sources (FLIP-27): a split enumerator hands out splits of the input, and source
readers read them and remember where they are.

The enumerator is the source operator's coordinator: it runs on the job master
and its state (the splits nobody has yet) is in every checkpoint. A reader asks
for a split whenever it has none; the enumerator assigns one, or says there are
no more, and then a reader with nothing left finishes (``EndOfData``). A reader
checkpoints its splits with their positions (operator list state), so a restore
rewinds every split, also with another parallelism; splits assigned after the
restored checkpoint are back with the restored enumerator, or, when one subtask
restarts alone (region failover), given back to the running enumerator
(``add_splits_back``). The event valve of
:mod:`runtime.coordination` keeps the two snapshots consistent. Readers are
polled by the task's loop thread in batches.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, Sequence, TypeVar

from runtime.coordination import CoordinatorContext, OperatorCoordinator
from runtime.eventtime import WatermarkGenerator, WatermarkStrategy
from runtime.events import MAX_WATERMARK, MIN_WATERMARK, Watermark, WatermarkStatus
from runtime.operators import RestoredState, StreamOperator

T = TypeVar("T")


@dataclass(frozen=True)
class Poll:
    """What a reader has now: records, and if none, how long until it may have some
    (``wait_s``) or that it has no split left (``end``)."""

    records: list[Any]
    end: bool = False
    wait_s: float = 0.0
    split_id: Any = None  # the split the records come from


class SourceReader(ABC):
    @abstractmethod
    def add_splits(self, splits: list[Any]) -> None: ...

    @abstractmethod
    def poll(self, max_records: int) -> Poll: ...

    @abstractmethod
    def snapshot_splits(self) -> list[Any]:
        """The reader's unfinished splits with their current positions."""

    def close(self) -> None:
        pass


# Events between a source's readers and its enumerator.
@dataclass(frozen=True)
class RequestSplit:
    pass


@dataclass(frozen=True)
class AddSplits:
    splits: list[Any]


@dataclass(frozen=True)
class NoMoreSplits:
    pass


class SplitEnumeratorContext(Protocol):
    @property
    def parallelism(self) -> int: ...

    def assign_splits(self, subtask: int, splits: list[Any]) -> None: ...

    def signal_no_more_splits(self, subtask: int) -> None: ...


class SplitEnumerator(ABC):
    """Hands out a source's splits; runs on the job master."""

    @abstractmethod
    def handle_split_request(self, subtask: int, context: SplitEnumeratorContext) -> None: ...

    @abstractmethod
    def snapshot_state(self) -> Any:
        """The splits not assigned yet (picklable); ``Source.create_enumerator`` gets it back."""

    @abstractmethod
    def add_splits_back(self, splits: list[Any], subtask: int) -> None:
        """Splits assigned to ``subtask`` after the checkpoint it restarts from
        (region failover): they are unassigned again."""


class StaticSplitEnumerator(SplitEnumerator):
    """Splits made once. Each subtask gets its own (``index % parallelism ==
    subtask``): all at its first request, so each subtask reads the same data on
    every run; or, ``dynamic``, one split per request, its own first, then any
    left, so a fast reader takes work off a slow one. When a subtask's request
    finds nothing for it: no more splits."""

    def __init__(self, splits: list[tuple[int, Any]], dynamic: bool = False) -> None:
        self.remaining = list(splits)  # (index, split)
        self.dynamic = dynamic

    def handle_split_request(self, subtask: int, context: SplitEnumeratorContext) -> None:
        own = [n for n, (index, _) in enumerate(self.remaining) if index % context.parallelism == subtask]
        picks = (own[:1] or ([0] if self.remaining else [])) if self.dynamic else own
        if not picks:
            context.signal_no_more_splits(subtask)
            return
        splits = [self.remaining[n][1] for n in picks]
        self.remaining = [entry for n, entry in enumerate(self.remaining) if n not in picks]
        context.assign_splits(subtask, splits)

    def snapshot_state(self) -> Any:
        return list(self.remaining)

    def add_splits_back(self, splits: list[Any], subtask: int) -> None:
        # In front, in their order, and owned by the subtask that had them.
        self.remaining = [(subtask, split) for split in splits] + self.remaining


class Source(ABC, Generic[T]):
    bounded = True
    dynamic_splits = False  # the default enumerator's policy (see StaticSplitEnumerator)

    @abstractmethod
    def create_reader(self, subtask: int, parallelism: int) -> SourceReader: ...

    def create_splits(self, parallelism: int) -> list[Any]:
        """All splits, for the default enumerator."""
        raise NotImplementedError(f"{type(self).__name__} makes no splits: override create_splits or create_enumerator")

    def create_enumerator(self, parallelism: int, restored: Any | None) -> SplitEnumerator:
        """The enumerator; ``restored`` is its ``snapshot_state()`` from a checkpoint."""
        splits = restored if restored is not None else list(enumerate(self.create_splits(parallelism)))
        return StaticSplitEnumerator(splits, self.dynamic_splits)


class SourceCoordinator(OperatorCoordinator):
    """The coordinator of a source operator: its split enumerator."""

    def __init__(self, source: Source[Any]) -> None:
        self.source = source
        self._context: CoordinatorContext
        self._enumerator: SplitEnumerator
        self._last_snapshot: int | None = None  # this coordinator's latest snapshot
        # (last snapshot before, subtask, splits) for every assignment no completed
        # checkpoint covers yet: what a subtask restarted alone must give back.
        self._assigned: list[tuple[int | None, int, list[Any]]] = []

    def start(self, context: CoordinatorContext, restored: Any | None) -> None:
        self._context = context
        self._enumerator = self.source.create_enumerator(context.parallelism, restored)

    def handle_event(self, subtask: int, event: Any) -> None:
        if isinstance(event, RequestSplit):
            self._enumerator.handle_split_request(subtask, self)
        else:
            raise TypeError(f"source coordinator got an unknown event {event!r}")

    def snapshot_state(self, checkpoint_id: int) -> Any:
        self._last_snapshot = checkpoint_id
        return self._enumerator.snapshot_state()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        # Splits assigned before its snapshot are in its readers' state.
        self._assigned = [a for a in self._assigned if a[0] is not None and a[0] >= checkpoint_id]

    def subtask_reset(self, subtask: int) -> bool:
        # What no completed checkpoint covers: assigned after the restored one's snapshot.
        back = [split for _, i, splits in self._assigned if i == subtask for split in splits]
        self._assigned = [a for a in self._assigned if a[1] != subtask]
        if back:
            self._enumerator.add_splits_back(back, subtask)
        return True

    # SplitEnumeratorContext
    @property
    def parallelism(self) -> int:
        return self._context.parallelism

    def assign_splits(self, subtask: int, splits: list[Any]) -> None:
        self._assigned.append((self._last_snapshot, subtask, list(splits)))
        self._context.send_event(subtask, AddSplits(list(splits)))

    def signal_no_more_splits(self, subtask: int) -> None:
        self._context.send_event(subtask, NoMoreSplits())


@dataclass(frozen=True)
class IndexSplit:
    """Indexes ``next, next+stride, ...`` below ``end`` (``None``: unbounded)."""

    split_id: int
    next: int
    end: int | None
    stride: int = 1


def _ranges(count: int, parts: int) -> list[IndexSplit]:
    return [IndexSplit(i, count * i // parts, count * (i + 1) // parts) for i in range(parts)]


class IndexedReader(SourceReader):
    """Reads index splits; ``value_of(i)`` turns an index into a record. Optional
    rate limit in records per second for this reader."""

    def __init__(self, value_of: Callable[[int], Any] | None, rate_per_s: float | None = None, batch_values: Callable[[int, int], list[Any]] | None = None) -> None:
        self._value_of = value_of
        self._batch_values = batch_values
        self._splits: list[IndexSplit] = []
        self._rate = rate_per_s
        self._started: float | None = None
        self._emitted = 0

    def add_splits(self, splits: list[Any]) -> None:
        self._splits.extend(splits)

    def snapshot_splits(self) -> list[Any]:
        return list(self._splits)

    def poll(self, max_records: int) -> Poll:
        self._splits = [s for s in self._splits if s.end is None or s.next < s.end]
        if not self._splits:
            return Poll([], end=True)
        if self._rate is not None:
            now = time.monotonic()
            if self._started is None:
                self._started = now
            allowed = int((now - self._started) * self._rate) - self._emitted
            if allowed <= 0:
                return Poll([], wait_s=(self._emitted + 1) / self._rate - (now - self._started))
            max_records = min(max_records, allowed)
        s = self._splits.pop(0)
        stop = s.next + max_records * s.stride
        if s.end is not None:
            stop = min(stop, s.end)
        if s.stride == 1 and self._batch_values is not None:
            records = self._batch_values(s.next, stop)
        else:
            records = [self._value_of(i) for i in range(s.next, stop, s.stride)]  # type: ignore[misc]
        # Round robin over the splits: an endless split must not starve the others.
        self._splits.append(IndexSplit(s.split_id, s.next + len(records) * s.stride, s.end, s.stride))
        self._emitted += len(records)
        return Poll(records, split_id=s.split_id)


class SequenceSource(Source[int]):
    """The integers ``start..end`` inclusive, split into contiguous ranges."""

    def __init__(self, start: int, end: int) -> None:
        if end < start:
            raise ValueError(f"from_sequence: end {end} is below start {start}")
        self.start, self.end = start, end

    def create_splits(self, parallelism: int) -> list[Any]:
        return _ranges(self.end - self.start + 1, parallelism)

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        base = self.start
        return IndexedReader(lambda i: base + i, batch_values=lambda a, b: list(range(base + a, base + b)))


class CollectionSource(Source[T]):
    """The elements of a list, shipped with the job; split into contiguous ranges."""

    def __init__(self, elements: Sequence[T]) -> None:
        self.elements = list(elements)

    def create_splits(self, parallelism: int) -> list[Any]:
        return _ranges(len(self.elements), parallelism)

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        els = self.elements
        return IndexedReader(els.__getitem__, batch_values=lambda a, b: els[a:b])


class GeneratorSource(Source[T]):
    """``generator(i)`` for ``i`` in ``0..count-1``, or forever when ``count`` is None,
    optionally limited to ``records_per_second`` over all subtasks."""

    def __init__(self, generator: Callable[[int], T], count: int | None, records_per_second: float | None) -> None:
        if count is not None and count < 0:
            raise ValueError(f"from_generator: count must be zero or more, got {count}")
        if records_per_second is not None and records_per_second <= 0:
            raise ValueError(f"from_generator: records_per_second must be positive, got {records_per_second}")
        self.generator = generator
        self.count = count
        self.records_per_second = records_per_second
        self.bounded = count is not None

    def create_splits(self, parallelism: int) -> list[Any]:
        if self.count is None:
            return [IndexSplit(i, i, None, parallelism) for i in range(parallelism)]
        return _ranges(self.count, parallelism)

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        rate = None if self.records_per_second is None else self.records_per_second / parallelism
        return IndexedReader(self.generator, rate)


class SourceOperator(StreamOperator):
    """Head of a source task. The task polls it; it asks the enumerator for a split
    whenever its reader has none, and checkpoints its splits, each with the state
    of its watermark generator.

    With a :class:`WatermarkStrategy` it stamps records with the assigner, feeds a
    watermark generator per split, and every ``watermark_interval_ms`` emits the
    minimum watermark over its splits that are not idle; when every split is idle
    it tells downstream so (``WatermarkStatus``), and the channel stops holding
    back the watermark there."""

    SPLITS = "splits"
    WAIT_FOR_SPLITS_S = 0.05  # an arriving split wakes the task's loop sooner

    def __init__(self, name: str, uid: str, source: Source[Any], strategy: WatermarkStrategy | None = None, watermark_interval_ms: int = 200) -> None:
        super().__init__(name, uid)
        self.source = source
        self.reader: SourceReader
        self._strategy = strategy
        self._interval_s = watermark_interval_ms / 1000
        self._generators: dict[Any, WatermarkGenerator] = {}
        self._last_active: dict[Any, float] = {}
        self._last_check = 0.0
        self._emitted = MIN_WATERMARK
        self._idle = False
        self._asked = False          # a split request is on its way
        self._no_more_splits = False

    def initialize_state(self, restored: RestoredState) -> None:
        super().initialize_state(restored)
        self.reader = self.source.create_reader(self.ctx.subtask, self.ctx.parallelism)
        entries = restored.lists.get(self.SPLITS, [])
        for split, generator_state in entries:
            if generator_state is not None:
                self._generator(_split_id(split)).restore(generator_state)
        self.reader.add_splits([split for split, _ in entries])

    def open(self) -> None:
        if not self.reader.snapshot_splits():
            self._request_split()

    def _request_split(self) -> None:
        if not self._asked:
            self._asked = True
            self.ctx.send_operator_event(self.uid, RequestSplit())

    def handle_operator_event(self, event: Any) -> None:
        if isinstance(event, AddSplits):
            self.reader.add_splits(event.splits)
            self._asked = False
        elif isinstance(event, NoMoreSplits):
            self._no_more_splits = True
            self._asked = False
        else:
            super().handle_operator_event(event)

    def _generator(self, split_id: Any) -> WatermarkGenerator:
        gen = self._generators.get(split_id)
        if gen is None:
            assert self._strategy is not None and self._strategy.generator_factory is not None
            gen = self._generators[split_id] = self._strategy.generator_factory()
        return gen

    def poll(self, max_records: int) -> Poll:
        try:
            result = self.reader.poll(max_records)
        except Exception as exc:
            raise self.fail("source reader", exc) from exc
        if result.end and not self._no_more_splits:
            # Out of splits: ask for one, unless asked already; the answer is an event.
            self._request_split()
            result = Poll([], wait_s=self.WAIT_FOR_SPLITS_S)
        strategy = self._strategy
        if strategy is None or strategy.timestamp_assigner is None:
            if result.records:
                self.output.collect(result.records)
            return result
        now = time.monotonic()
        if result.records:
            assign = strategy.timestamp_assigner
            timestamps: list[int] = []
            append = timestamps.append
            r = None
            try:
                for r in result.records:
                    append(assign(r))
            except Exception as exc:
                raise self.fail("timestamp assigner", exc, r, True) from exc
            if strategy.generator_factory is not None:
                self._generator(result.split_id).on_batch(timestamps)
                self._last_active[result.split_id] = now
            self.output.collect(result.records, timestamps)
        if strategy.generator_factory is not None and now - self._last_check >= self._interval_s:
            self._last_check = now
            self._emit_watermark(now)
        return result

    def _emit_watermark(self, now: float) -> None:
        idleness = self._strategy.idleness_ms if self._strategy is not None else None
        splits = self.reader.snapshot_splits()
        if not splits:
            return  # waiting for a split: no watermark, and not idle (its records may be early)
        watermarks = []
        for split in splits:
            sid = _split_id(split)
            last = self._last_active.setdefault(sid, now)
            if idleness is None or (now - last) * 1000 < idleness:
                watermarks.append(self._generator(sid).current_watermark())
        if not watermarks:
            if not self._idle:
                self._idle = True
                self.output.emit_watermark_status(WatermarkStatus(idle=True))
            return
        if self._idle:
            self._idle = False
            self.output.emit_watermark_status(WatermarkStatus(idle=False))
        wm = min(watermarks)
        if wm > self._emitted:
            self._emitted = wm
            self.output.emit_watermark(Watermark(wm))

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        raise RuntimeError("a source has no input")

    def end_of_input(self) -> None:
        self.output.emit_watermark(Watermark(MAX_WATERMARK))

    def snapshot_state(self, checkpoint_id: int):  # type: ignore[no-untyped-def]
        self.operator_state.lists[self.SPLITS] = [
            (split, self._generators[_split_id(split)].snapshot() if _split_id(split) in self._generators else None)
            for split in self.reader.snapshot_splits()
        ]
        return super().snapshot_state(checkpoint_id)

    def close(self) -> None:
        reader = getattr(self, "reader", None)
        if reader is not None:
            reader.close()


def _split_id(split: Any) -> Any:
    return getattr(split, "split_id", split)


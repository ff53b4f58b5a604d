"""Sources (FLIP-27): a split enumerator hands out splits of the input, and source
readers read them and remember where they are.

The enumerator is the source operator's coordinator: it runs on the job master
and its state (the splits nobody has yet) is in every checkpoint. A reader asks
for a split whenever it has none, or, if it says it is running low
(``SourceReader.running_low``), while it reads its last (the answer waits in
the source operator until the reader runs out); the enumerator assigns one, or
says there are no more, and then a reader with nothing left finishes (``EndOfData``). A reader
checkpoints its splits with their positions (operator list state), so a restore
rewinds every split, also with another parallelism; splits assigned after the
restored checkpoint are back with the restored enumerator, or, when one subtask
restarts alone (region failover), given back to the running enumerator
(``add_splits_back``). The event valve of
:mod:`weir.runtime.coordination` keeps the two snapshots consistent. Readers are
polled by the task's loop thread in batches.
"""

from __future__ import annotations

import pickle
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, Sequence, TypeVar

import cloudpickle

from weir.runtime.clock import SYSTEM_CLOCK, Clock
from weir.runtime.coordination import CoordinatorContext, OperatorCoordinator
from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError, describe_record
from weir.runtime.events import MAX_WATERMARK, Watermark
from weir.runtime.eventtime import WatermarkEmitter, WatermarkStrategy
from weir.runtime.operators import RestoredState, StreamOperator

T = TypeVar("T")


@dataclass(frozen=True)
class Poll:
    """What a reader has now: records, and if none, how long until it may have some
    (``wait_s``) or that it has no split left (``end``)."""

    records: list[Any]
    end: bool = False
    wait_s: float = 0.0
    split_id: Any = None  # the split the records come from
    timestamps: list[int] | None = None  # the records' own event times (Kafka's), if they have them
    side: dict[str, list[Any]] | None = None  # side output tag id -> records (a dead-letter output)


class SourceReader(ABC):
    @abstractmethod
    def add_splits(self, splits: list[Any]) -> None: ...

    @abstractmethod
    def poll(self, max_records: int) -> Poll: ...

    @abstractmethod
    def snapshot_splits(self) -> list[Any]:
        """The reader's unfinished splits with their current positions."""

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        """The splits to checkpoint for ``checkpoint_id`` (a reader that acts when
        that checkpoint completes remembers them here)."""
        return self.snapshot_splits()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The checkpoint that holds this reader's snapshot completed (a Kafka
        reader commits its offsets back to the consumer group here)."""

    def running_low(self) -> bool:
        """Whether the reader is on its last split and wants the next one now, so
        that it comes while this one is read: the request's round trip to the
        enumerator (milliseconds, more on a busy machine) is then not a pause per
        split. The default, False: ask only when out of splits."""
        return False

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

    def call_async(
        self,
        call: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        period_s: float | None = None,
    ) -> None:
        """See :meth:`weir.runtime.coordination.CoordinatorContext.call_async`."""


class SplitEnumerator(ABC):
    """Hands out a source's splits; runs on the job master."""

    def start(self, context: SplitEnumeratorContext) -> None:
        """Called once before any request: an enumerator that discovers splits
        while the job runs (new Kafka partitions, new files) schedules it here
        with ``context.call_async(..., period_s=...)``."""

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
    has_timestamps = False  # its reader's polls carry each record's event time

    @abstractmethod
    def create_reader(self, subtask: int, parallelism: int) -> SourceReader: ...

    def size_hint(self) -> int | None:
        """How many records this source reads in all, when it knows (a progress
        bar's total); None when unbounded or unknown."""
        return None

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
        self._enumerator.start(self)

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

    def call_async(
        self,
        call: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        period_s: float | None = None,
    ) -> None:
        self._context.call_async(call, handler, period_s)


@dataclass(frozen=True)
class IndexSplit:
    """Indexes ``next, next+stride, ...`` below ``end`` (``None``: unbounded)."""

    split_id: int
    next: int
    end: int | None
    stride: int = 1


def _ranges(count: int, parts: int) -> list[IndexSplit]:
    return [IndexSplit(i, count * i // parts, count * (i + 1) // parts) for i in range(parts)]


class RateLimit:
    """At most ``per_second`` records per second, counted from the first poll: the
    allowance grows with the time since then (a slow stretch is made up after)."""

    def __init__(self, per_second: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.per_second = per_second
        self._clock = clock
        self._started: float | None = None
        self._spent = 0

    def allowance(self, wanted: int) -> tuple[int, float]:
        """How many of ``wanted`` records may go now; when none, the seconds until one may."""
        now = self._clock.now()
        if self._started is None:
            self._started = now
        allowed = int((now - self._started) * self.per_second) - self._spent
        if allowed <= 0:
            return 0, (self._spent + 1) / self.per_second - (now - self._started)
        return min(wanted, allowed), 0.0

    def spend(self, records: int) -> None:
        self._spent += records


def check_rate(api: str, records_per_second: float | None) -> None:
    if records_per_second is not None and not records_per_second > 0:
        raise InvalidConfigurationError(
            f"{api}: records_per_second", records_per_second, "must be positive (or None: no limit)"
        )


class IndexedReader(SourceReader):
    """Reads index splits; ``value_of(i)`` turns an index into a record. Optional
    rate limit in records per second for this reader."""

    def __init__(
        self,
        value_of: Callable[[int], Any] | None,
        rate_per_s: float | None = None,
        batch_values: Callable[[int, int], list[Any]] | None = None,
    ) -> None:
        self._value_of = value_of
        self._batch_values = batch_values
        self._splits: list[IndexSplit] = []
        self._limit = None if rate_per_s is None else RateLimit(rate_per_s)

    def add_splits(self, splits: list[Any]) -> None:
        self._splits.extend(splits)

    def snapshot_splits(self) -> list[Any]:
        return list(self._splits)

    def poll(self, max_records: int) -> Poll:
        self._splits = [s for s in self._splits if s.end is None or s.next < s.end]
        if not self._splits:
            return Poll([], end=True)
        if self._limit is not None:
            max_records, wait_s = self._limit.allowance(max_records)
            if not max_records:
                return Poll([], wait_s=wait_s)
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
        if self._limit is not None:
            self._limit.spend(len(records))
        return Poll(records, split_id=s.split_id)


class SequenceSource(Source[int]):
    """The integers ``start..end`` inclusive, split into contiguous ranges."""

    def __init__(self, start: int, end: int) -> None:
        if end < start:
            raise ValueError(f"from_sequence: end {end} is below start {start}")
        self.start, self.end = start, end

    def size_hint(self) -> int | None:
        return self.end - self.start + 1

    def create_splits(self, parallelism: int) -> list[Any]:
        return _ranges(self.end - self.start + 1, parallelism)

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        base = self.start
        return IndexedReader(lambda i: base + i, batch_values=lambda a, b: list(range(base + a, base + b)))


class CollectionSource(Source[T]):
    """The elements of a list, read by one subtask in their order. They are pickled
    once, here (a snapshot: Flink's ``from_collection`` serializes its elements
    when called, too), and every copy of the job carries that one pickle: the
    shipping check, the job master and each task do not pickle a million rows
    again, and only readers unpickle them. An element that cannot be pickled is
    refused here, naming it."""

    def __init__(self, elements: Sequence[T]) -> None:
        self._count = len(elements)
        try:
            self._pickled = cloudpickle.dumps(list(elements), protocol=5)
        except Exception as exc:
            i, element = _first_unpicklable(elements)
            raise InvalidJobGraphError(
                f"from_collection(): element {i}, {describe_record(element)}, cannot be pickled "
                f"({type(exc).__name__}: {exc}); the collection travels with the job to the tasks that read it"
            ) from exc

    def size_hint(self) -> int | None:
        return self._count

    def create_splits(self, parallelism: int) -> list[Any]:
        """One split, as PyFlink reads a collection: the elements come in their
        order, so what depends on order per key (a reduce, a count window) is the
        same in every run and at every parallelism."""
        return _ranges(self._count, 1)

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        els: list[T] = pickle.loads(self._pickled)  # pickled above, from the user's own objects
        return IndexedReader(els.__getitem__, batch_values=lambda a, b: els[a:b])


def _first_unpicklable(elements: Sequence[Any]) -> tuple[int, Any]:
    for i, element in enumerate(elements):
        try:
            cloudpickle.dumps(element)
        except Exception:
            return i, element
    return -1, elements  # only the list as a whole fails (e.g. too deep)


class GeneratorSource(Source[T]):
    """``generator(i)`` for ``i`` in ``0..count-1``, or forever when ``count`` is None,
    optionally limited to ``records_per_second`` over all subtasks."""

    def __init__(self, generator: Callable[[int], T], count: int | None, records_per_second: float | None) -> None:
        if count is not None and count < 0:
            raise ValueError(f"from_generator: count must be zero or more, got {count}")
        check_rate("from_generator", records_per_second)
        self.generator = generator
        self.count = count
        self.records_per_second = records_per_second
        self.bounded = count is not None

    def size_hint(self) -> int | None:
        return self.count

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
    back the watermark there. In BATCH mode it only stamps: no watermark until
    ``MAX_WATERMARK`` at the end of input."""

    SPLITS = "splits"
    WAIT_FOR_SPLITS_S = 0.05  # an arriving split wakes the task's loop sooner

    def __init__(
        self,
        name: str,
        uid: str,
        source: Source[Any],
        strategy: WatermarkStrategy | None = None,
        watermark_interval_ms: int = 200,
    ) -> None:
        super().__init__(name, uid)
        self.source = source
        self.reader: SourceReader
        # Without a timestamp assigner, and records with no time of their own, the source emits plain records.
        stamps = strategy is not None and (strategy.timestamp_assigner is not None or source.has_timestamps)
        self._watermarks = WatermarkEmitter(strategy, watermark_interval_ms) if stamps else None  # type: ignore[arg-type]
        self._last_check_ms = 0.0
        self._asked = False  # a split request is on its way
        self._asked_ahead = False  # ... asked by a reader running low (see SourceReader.running_low)
        # The answer to that: the reader gets it when it runs out. Until then it is
        # in this subtask's checkpoint but not the reader's, so it does not hold
        # back the watermark, as a split not handed out yet does not.
        self._ahead: list[Any] = []
        self._no_more_splits = False

    def initialize_state(self, restored: RestoredState) -> None:
        super().initialize_state(restored)
        self.reader = self.source.create_reader(self.ctx.subtask, self.ctx.parallelism)
        entries = restored.lists.get(self.SPLITS, [])
        for split, generator_state in entries:
            if generator_state is not None:
                assert self._watermarks is not None
                self._watermarks.generator(_split_id(split)).restore(generator_state)
        self.reader.add_splits([split for split, _ in entries])

    def open(self) -> None:
        if self.ctx.batch and self._watermarks is not None:
            self._watermarks.for_batch()
        if not self.reader.snapshot_splits():
            self._request_split()

    def _request_split(self, ahead: bool = False) -> None:
        if not self._asked:
            self._asked, self._asked_ahead = True, ahead
            self.ctx.send_operator_event(self.uid, RequestSplit())

    def handle_operator_event(self, event: Any) -> None:
        if isinstance(event, AddSplits):
            if self._asked_ahead:
                self._ahead.extend(event.splits)
            else:
                self.reader.add_splits(event.splits)
            self._asked = self._asked_ahead = False
        elif isinstance(event, NoMoreSplits):
            self._no_more_splits = True
            self._asked = self._asked_ahead = False
        else:
            super().handle_operator_event(event)

    def poll(self, max_records: int) -> Poll:
        try:
            low = self._running_low()  # before the poll: a file read in one poll counts
            result = self.reader.poll(max_records)
            if result.end and self._ahead:
                self.reader.add_splits(self._ahead)
                self._ahead = []
                low = self._running_low()
                result = self.reader.poll(max_records)
        except Exception as exc:
            raise self.fail("source reader", exc) from exc
        if result.end and not self._no_more_splits:
            # Out of splits: ask for one, unless asked already; the answer is an event.
            self._request_split()
            result = Poll([], wait_s=self.WAIT_FOR_SPLITS_S)
        elif result.records and low:
            self._request_split(ahead=True)
        if result.side:
            for tag_id, records in result.side.items():
                self.output.collect_side(tag_id, records)
        wm = self._watermarks
        if wm is None:
            if result.records:
                self.output.collect(result.records, result.timestamps)
            return result
        if result.records:
            timestamps = wm.stamp(result.records, result.timestamps, self.name, self.fail)
            wm.on_batch(result.split_id, timestamps)
            self.output.collect(result.records, timestamps)
        now_ms = time.monotonic() * 1000
        if wm.generates and now_ms - self._last_check_ms >= wm.interval_ms:
            self._last_check_ms = now_ms
            splits = self.reader.snapshot_splits()
            # Waiting for a split: no watermark. Not idle at once (its records may be
            # early), but after the strategy's idle timeout, as any split would be: a
            # subtask with no Kafka partition must not hold event time back for ever.
            wm.emit(now_ms, [_split_id(split) for split in splits] or [_NO_SPLIT], self.output)
        return result

    def _running_low(self) -> bool:
        return not (self._asked or self._ahead or self._no_more_splits) and self.reader.running_low()

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        raise RuntimeError("a source has no input")

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)
        try:
            self.reader.notify_checkpoint_complete(checkpoint_id)
        except Exception as exc:
            raise self.fail("source reader", exc) from exc

    def end_of_input(self) -> None:
        self.output.emit_watermark(Watermark(MAX_WATERMARK))

    def snapshot_state(self, checkpoint_id: int):  # type: ignore[no-untyped-def]
        generators = {} if self._watermarks is None else self._watermarks.generators
        self.operator_state.lists[self.SPLITS] = [
            (split, generators[_split_id(split)].snapshot() if _split_id(split) in generators else None)
            for split in self.reader.snapshot_state(checkpoint_id)
        ] + [(split, None) for split in self._ahead]
        return super().snapshot_state(checkpoint_id)

    def close(self) -> None:
        reader = getattr(self, "reader", None)
        if reader is not None:
            reader.close()


_NO_SPLIT = ("no split",)  # stands for a reader's empty hands in the idleness check


def _split_id(split: Any) -> Any:
    return getattr(split, "split_id", split)

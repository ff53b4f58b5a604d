"""The sending side of channels: partitioners, batching, and the wire format.

A delivery is one ``bytes`` object: a pickled list of messages, where a message
is a list of records, a :class:`Timestamped` batch, or an event (see
:mod:`weir.runtime.events`). Records go out in
batches, flushed when a buffer is full, when the buffer timeout passed, when the
task is about to idle, and always before an event. Plain pickle is used for
speed; cloudpickle only for what plain pickle refuses.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import cloudpickle

from weir.runtime.errors import KeySelectionError, RecordSerializationError
from weir.runtime.keygroups import key_group_for, key_groups_for, operator_index_for_key_group
from weir.runtime.serialization import dumps, loads

Send = Callable[[int, int, bytes], None]  # (channel, seq, payload)


def encode(messages: list[Any], operator: str) -> bytes:
    try:
        return dumps(messages)
    except Exception as exc:
        raise RecordSerializationError(operator, _first_unpicklable(messages), exc) from exc


def _first_unpicklable(messages: list[Any]) -> Any:
    for m in messages:
        for r in m if isinstance(m, list) else m.records if isinstance(m, Timestamped) else [m]:
            try:
                cloudpickle.dumps(r)
            except Exception:
                return r
    return messages


def decode(payload: bytes) -> list[Any]:
    """Only ever called on deliveries from weir's own tasks, never on source input."""
    return loads(payload)


class Timestamped:
    """A batch whose records carry event timestamps (a parallel list)."""

    __slots__ = ("records", "timestamps")

    def __init__(self, records: list[Any], timestamps: list[int]) -> None:
        self.records = records
        self.timestamps = timestamps

    def __reduce__(self) -> Any:
        return (Timestamped, (self.records, self.timestamps))


Parts = list[list[Any]]


class Partitioner:
    """Decides the channel(s) of each record. Subclasses work on whole batches and
    split the timestamps (when there are any) the same way as the records."""

    name = "partitioner"

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        raise NotImplementedError


class ForwardPartitioner(Partitioner):
    name = "forward"

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        return [records], None if timestamps is None else [timestamps]


class RebalancePartitioner(Partitioner):
    """Round-robin in slices, so a batch costs a few list slices, not a loop."""

    name = "rebalance"

    def __init__(self) -> None:
        self._next = 0

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        order = [(self._next + i) % channels for i in range(channels)]
        self._next = (self._next + len(records)) % channels
        out: Parts = [[] for _ in range(channels)]
        ts: Parts | None = None if timestamps is None else [[] for _ in range(channels)]
        for i, ch in enumerate(order):
            out[ch] = records[i::channels]
            if ts is not None:
                ts[ch] = timestamps[i::channels]  # type: ignore[index]
        return out, ts


class BroadcastPartitioner(Partitioner):
    name = "broadcast"

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        return [records] * channels, None if timestamps is None else [timestamps] * channels


class KeyGroupPartitioner(Partitioner):
    """Routes a record to the subtask that owns its key's key group. Remembers the
    channel of recent keys, since hashing costs more than a dict lookup; when a
    batch finds almost none of its keys there (keys seen once), the next
    ``_UNCACHED_BATCHES`` batches hash every key without asking or filling it."""

    name = "hash"
    _CACHE_LIMIT = 65536
    _UNCACHED_BATCHES = 32

    def __init__(self, key_selector: Callable[[Any], Any], max_parallelism: int, operator: str) -> None:
        self._key_selector = key_selector
        self._max_parallelism = max_parallelism
        self._operator = operator
        self._cache: dict[Any, int] = {}
        self._cache_channels = 0
        self._owners: list[int] = []  # key group -> channel, for the cache's channel count
        self._uncached = 0  # batches still to route without the cache

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        if channels != self._cache_channels:
            self._cache.clear()
            self._cache_channels = channels
            maxp = self._max_parallelism
            self._owners = [operator_index_for_key_group(maxp, channels, g) for g in range(maxp)]
        # The per-record steps run in C (map), the slow path only for new keys.
        keys: list[Any] = []
        try:
            keys.extend(map(self._key_selector, records))
        except Exception as exc:  # extend kept the keys before the failing record
            raise KeySelectionError(self._operator, "key selector", exc, records[len(keys)], True) from exc
        if self._uncached:
            self._uncached -= 1
            return _split(records, timestamps, self._channels_of(keys, records.__getitem__), channels)
        try:
            chans: list[Any] = list(map(self._cache.get, keys))
        except TypeError:  # an unhashable key: the stable hash below says which
            chans = [None] * len(keys)
        if None in chans:
            self._route_new_keys(records, keys, chans)
        return _split(records, timestamps, chans, channels)

    def _channels_of(self, keys: list[Any], record_of: Callable[[int], Any]) -> list[int]:
        """The channel of each key, hashed in one go; ``record_of(i)`` is the record
        of ``keys[i]``, for the error that names the first key without a stable hash."""
        try:
            groups = key_groups_for(keys, self._max_parallelism)
        except TypeError:
            for i, key in enumerate(keys):
                try:
                    key_group_for(key, self._max_parallelism)
                except TypeError as exc:
                    raise KeySelectionError(self._operator, "key selector", exc, record_of(i), True) from exc
            raise
        owners = self._owners
        return [owners[g] for g in groups]

    def _route_new_keys(self, records: list[Any], keys: list[Any], chans: list[Any]) -> None:
        """Fill in ``chans`` where it is None, hashing those keys in one go, and cache them."""
        new = [i for i, ch in enumerate(chans) if ch is None]
        new_keys = [keys[i] for i in new]
        routed = self._channels_of(new_keys, lambda j: records[new[j]])  # records only for an error
        for i, ch in zip(new, routed):
            chans[i] = ch
        if len(self._cache) + len(new) > self._CACHE_LIMIT:
            self._cache.clear()
        cached = len(self._cache)
        self._cache.update(zip(new_keys, routed))  # even when all are new: the next batch may repeat them
        if (len(self._cache) - cached) * 10 > len(keys) * 9:  # nine in ten records had a key never seen
            self._uncached = self._UNCACHED_BATCHES


def _split(
    records: list[Any], timestamps: list[int] | None, chans: list[int], channels: int
) -> tuple[Parts, Parts | None]:
    """``records`` (and their timestamps) by channel, record ``i`` to channel ``chans[i]``."""
    if channels == 1:
        return [records], None if timestamps is None else [timestamps]
    out: Parts = [[] for _ in range(channels)]
    appends = [o.append for o in out]
    for record, ch in zip(records, chans):
        appends[ch](record)
    if timestamps is None:
        return out, None
    ts: Parts = [[] for _ in range(channels)]
    for t, ch in zip(timestamps, chans):
        ts[ch].append(t)
    return out, ts


class ShufflePartitioner(Partitioner):
    """Each record to a channel drawn at random (Flink's ``shuffle()``)."""

    name = "shuffle"

    def __init__(self) -> None:
        self._random = random.Random()

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        return _split(records, timestamps, [self._random.randrange(channels) for _ in records], channels)


class CustomPartitioner(Partitioner):
    """Each record to the channel ``partitioner(key, channels)`` names for its key
    (``partition_custom``); a failure, or a channel out of range, fails the task
    naming the operator and the record."""

    name = "custom"

    def __init__(
        self, partitioner: Callable[[Any, int], int], key_selector: Callable[[Any], Any], operator: str
    ) -> None:
        self._partitioner = partitioner
        self._key_selector = key_selector
        self._operator = operator

    def partition(self, records: list[Any], timestamps: list[int] | None, channels: int) -> tuple[Parts, Parts | None]:
        chans = []
        for record in records:
            try:
                ch = self._partitioner(self._key_selector(record), channels)
                if not isinstance(ch, int) or not 0 <= ch < channels:
                    raise ValueError(f"the partitioner chose channel {ch!r}, not one of 0..{channels - 1}")
            except Exception as exc:
                raise KeySelectionError(self._operator, "custom partitioner", exc, record, True) from exc
            chans.append(ch)
        return _split(records, timestamps, chans, channels)


class RecordWriter:
    """One output edge of a task: a buffer (records, and their timestamps when they
    have them) and a sequence counter per channel."""

    def __init__(
        self,
        operator: str,
        partitioner: Partitioner,
        channels: int,
        send: Send,
        batch_size: int,
        buffer_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._operator = operator
        self._partitioner = partitioner
        self._channels = channels
        self._send = send
        self._batch_size = batch_size
        self._timeout_s = buffer_timeout_s
        self._clock = clock
        self._buffers: list[list[Any]] = [[] for _ in range(channels)]
        self._ts: list[list[int] | None] = [None] * channels
        self._seq = [0] * channels
        self._oldest: float | None = None
        self.records_out = 0

    @property
    def batches_out(self) -> int:
        """Deliveries sent (events included): records_out / batches_out is the mean batch."""
        return sum(self._seq)

    def emit(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        if not records:
            return
        self.records_out += len(records)
        parts, ts_parts = self._partitioner.partition(records, timestamps, self._channels)
        for ch, part in enumerate(parts):
            if not part:
                continue
            buf = self._buffers[ch]
            if buf and (self._ts[ch] is None) != (ts_parts is None):
                self._flush_channel(ch)  # timestamped and plain records do not share a batch
                buf = self._buffers[ch]
            if buf:
                buf.extend(part)
            else:
                self._buffers[ch] = buf = list(part) if part is records else part
            if ts_parts is not None:
                tsb = self._ts[ch]
                if tsb:
                    tsb.extend(ts_parts[ch])
                else:
                    self._ts[ch] = list(ts_parts[ch])
            if len(buf) >= self._batch_size:
                self._flush_channel(ch)
        if self._oldest is None:
            self._oldest = self._clock()

    def _batch(self, ch: int) -> list[Any]:
        """The channel's buffered batch as messages (none when empty), emptied."""
        buf, ts = self._buffers[ch], self._ts[ch]
        self._buffers[ch], self._ts[ch] = [], None
        if not buf:
            return []
        return [buf] if ts is None else [Timestamped(buf, ts)]

    def _flush_channel(self, ch: int) -> None:
        batch = self._batch(ch)
        if batch:
            self._deliver(ch, batch)

    def broadcast_event(self, event: Any) -> None:
        """Flush every buffer, then the event, in one delivery per channel."""
        for ch in range(self._channels):
            self._deliver(ch, self._batch(ch) + [event])
        self._oldest = None

    def flush(self) -> None:
        for ch in range(self._channels):
            self._flush_channel(ch)
        self._oldest = None

    def flush_if_due(self) -> float | None:
        """Send the buffers if the oldest record in them waited the buffer timeout;
        returns the seconds until they are due (None: nothing buffered)."""
        if self._oldest is None:
            return None
        due_in = self._oldest + self._timeout_s - self._clock()
        if due_in > 0:
            return due_in
        self.flush()
        return None

    def _deliver(self, ch: int, messages: list[Any]) -> None:
        seq = self._seq[ch]
        self._seq[ch] = seq + 1
        self._send(ch, seq, encode(messages, self._operator))

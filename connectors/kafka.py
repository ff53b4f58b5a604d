"""Apache Kafka: an exactly-once source and sink with PyFlink's names, on the
confluent-kafka client (librdkafka).

**Source.** Topic partitions are splits. The split enumerator (on the job master)
finds the partitions of the topics (or of a topic pattern), resolves each one's
starting offset (``KafkaOffsetsInitializer``) when it first sees it, and hands it
to the subtask that owns it (Flink's rule: by topic and partition, so a partition
stays with its subtask); partitions found later, by a discovery every
``partition.discovery.interval.ms`` (30 s; bounded sources discover once), start
at the earliest offset. A reader keeps each partition's next offset in its
checkpointed state, so a restore, also with another parallelism, reads on from
exactly there; when a checkpoint completes the reader commits those offsets to
the consumer group, for monitoring only. Records carry their Kafka timestamps;
with a watermark strategy, watermarks are per partition, idle partitions excluded.
Consumers read ``read_committed`` unless ``isolation.level`` is set.

**Sink.** ``DeliveryGuarantee.EXACTLY_ONCE`` writes each checkpoint's records in
one Kafka transaction when the checkpoint completes (and at a bounded job's final
checkpoint). Flink's KafkaSink opens the transaction at once and, after a crash,
resumes it in a new process by its producer id and epoch; librdkafka cannot
resume another process's transaction, so weir keeps a checkpoint's records in
the checkpoint instead (in the sink's state, as serialized bytes) and publishes
them from there. Each transaction also commits the checkpoint id as the offset of
a marker consumer group named after the transactional id
(``<prefix>-<subtask>-<attempt>``, on partition 0 of the writer's first topic, with a token naming the
transaction as the offset's metadata), atomically with the records: a restore
publishes what the restored checkpoint holds but for what its marker says was
published already, so nothing is lost or written twice. A
``read_committed`` consumer sees each record once; records become visible when
their checkpoint completes, as with Flink. ``AT_LEAST_ONCE`` produces at once
and flushes at every checkpoint; ``NONE`` only produces.
"""

from __future__ import annotations

import enum
import logging
import re
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

try:
    from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("weir.connectors.kafka needs the kafka extra: pip install 'weir[kafka]'") from exc

from weir.connectors.serialization import (
    DeserializationSchema,
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
    SerializationSchema,
    SimpleStringSchema,
)
from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.functions import OutputTag
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import Sink, SinkWriter
from weir.runtime.sources import Poll, Source, SourceReader, SplitEnumerator, SplitEnumeratorContext

__all__ = [
    "DeliveryGuarantee",
    "KafkaMessage",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecordSerializationSchema",
    "KafkaSink",
    "KafkaSource",
    "KafkaTopicPartition",
    "SimpleStringSchema",
    "JsonRowDeserializationSchema",
    "JsonRowSerializationSchema",
]

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 10.0  # an unreachable broker fails the call (and the job, under its restart strategy) after this
DISCOVERY_INTERVAL_MS = 30_000


# ------------------------------------------------------------------ offsets
class KafkaOffsetResetStrategy(enum.Enum):
    LATEST = "latest"
    EARLIEST = "earliest"
    NONE = "none"


@dataclass(frozen=True, order=True)
class KafkaTopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class KafkaOffsetsInitializer:
    """Where a partition starts (or, bounded, stops): PyFlink's factories."""

    kind: str
    timestamp_ms: int | None = None
    specific: dict[KafkaTopicPartition, int] | None = None
    reset: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE

    @staticmethod
    def earliest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("latest")

    @staticmethod
    def committed_offsets(
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE,
    ) -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("committed", reset=offset_reset_strategy)

    @staticmethod
    def timestamp(timestamp: int) -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("timestamp", timestamp_ms=timestamp)

    @staticmethod
    def offsets(
        offsets: dict[KafkaTopicPartition, int],
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST,
    ) -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("offsets", specific=dict(offsets), reset=offset_reset_strategy)

    def resolve(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition], group_id: str | None
    ) -> dict[KafkaTopicPartition, int]:
        """Each partition's offset; runs on the enumerator's async call (it asks the broker)."""
        ranges = {
            p: consumer.get_watermark_offsets(TopicPartition(p.topic, p.partition), timeout=METADATA_TIMEOUT_S)
            for p in partitions
        }
        if self.kind == "earliest":
            return {p: lo for p, (lo, _) in ranges.items()}
        if self.kind == "latest":
            return {p: hi for p, (_, hi) in ranges.items()}
        if self.kind == "timestamp":
            found = consumer.offsets_for_times(
                [TopicPartition(p.topic, p.partition, self.timestamp_ms or 0) for p in partitions],
                timeout=METADATA_TIMEOUT_S,
            )
            return {p: (tp.offset if tp.offset >= 0 else ranges[p][1]) for p, tp in zip(partitions, found)}
        if self.kind == "committed":
            if group_id is None:
                raise InvalidConfigurationError(
                    "KafkaSource starting offsets", "committed_offsets()", "it needs set_group_id(...)"
                )
            got = consumer.committed(
                [TopicPartition(p.topic, p.partition) for p in partitions], timeout=METADATA_TIMEOUT_S
            )
            known = {p: tp.offset for p, tp in zip(partitions, got) if tp.offset != OFFSET_INVALID}
        else:
            known = {p: o for p, o in (self.specific or {}).items() if p in ranges}
        out = {}
        for p in partitions:
            if p in known:
                out[p] = known[p]
            elif self.reset is KafkaOffsetResetStrategy.NONE:
                raise InvalidConfigurationError(
                    "KafkaSource starting offsets",
                    self.kind,
                    f"partition {p.topic}-{p.partition} has no committed offset in group '{group_id}': give committed_offsets() a KafkaOffsetResetStrategy",
                )
            else:
                out[p] = ranges[p][0] if self.reset is KafkaOffsetResetStrategy.EARLIEST else ranges[p][1]
        return out


# ------------------------------------------------------------------ source
@dataclass(frozen=True)
class KafkaMessage:
    """What a deserializer given to ``set_deserializer`` gets."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)

    @staticmethod
    def of(m: Any) -> "KafkaMessage":
        """From a confluent-kafka ``Message``."""
        kind, ts = m.timestamp()
        return KafkaMessage(
            m.topic(), m.partition(), m.offset(), ts if kind else None, m.key(), m.value(), list(m.headers() or [])
        )


class _ValueOnly:
    """A deserializer of the value alone, straight from the client's message (no
    :class:`KafkaMessage` per record: this is the hot path)."""

    def __init__(self, schema: DeserializationSchema) -> None:
        self._deserialize = schema.deserialize

    def __call__(self, m: Any) -> Any:
        value = m.value()
        return None if value is None else self._deserialize(value)


class _WholeMessage:
    def __init__(self, fn: Callable[[KafkaMessage], Any]) -> None:
        self._fn = fn

    def __call__(self, m: Any) -> Any:
        return self._fn(KafkaMessage.of(m))


@dataclass(frozen=True)
class KafkaPartitionSplit:
    topic: str
    partition: int
    offset: int  # the next record to read
    stop: int | None = None  # bounded: read below this offset

    @property
    def split_id(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def done(self) -> bool:
        return self.stop is not None and self.offset >= self.stop


def _owner(topic: str, partition: int, parallelism: int) -> int:
    """Flink's KafkaSourceEnumerator rule: a topic's partitions go round robin from a
    start that depends on the topic (a stable hash: Python's is salted per process)."""
    start = ((zlib.crc32(topic.encode()) * 31) & 0x7FFFFFFF) % parallelism
    return (start + partition) % parallelism


@dataclass
class _Config:
    bootstrap: str
    topics: list[str]
    pattern: str | None
    partitions: list[KafkaTopicPartition] | None
    group_id: str | None
    starting: KafkaOffsetsInitializer
    stopping: KafkaOffsetsInitializer | None
    deserializer: Callable[[Any], Any]  # from a confluent-kafka Message
    properties: dict[str, str]
    dead_letter: OutputTag | None
    client_id_prefix: str | None

    def client(self, **extra: Any) -> dict[str, Any]:
        props = {k: v for k, v in self.properties.items() if k != "partition.discovery.interval.ms"}
        return {"bootstrap.servers": self.bootstrap, "logger": log, **props, **extra}

    def consumer(self, purpose: str) -> Consumer:
        # librdkafka wants a group id even for a consumer that never joins a group.
        return Consumer(
            self.client(
                **{
                    "group.id": self.group_id or f"weir-{purpose}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": self.properties.get("isolation.level", "read_committed"),
                    **({"client.id": f"{self.client_id_prefix}-{purpose}"} if self.client_id_prefix else {}),
                }
            )
        )


class KafkaSource(Source[Any]):
    """Build with ``KafkaSource.builder()``; use with ``env.from_source(source,
    watermark_strategy, name)``. See the module docstring for the guarantees."""

    has_timestamps = True

    def __init__(self, config: _Config) -> None:
        self.config = config
        self.bounded = config.stopping is not None

    @staticmethod
    def builder() -> "KafkaSourceBuilder":
        return KafkaSourceBuilder()

    def create_enumerator(self, parallelism: int, restored: Any | None) -> SplitEnumerator:
        return _KafkaEnumerator(self.config, self.bounded, parallelism, restored)

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        return _KafkaReader(self.config, subtask)


class KafkaSourceBuilder:
    def __init__(self) -> None:
        self._bootstrap: str | None = None
        self._topics: list[str] = []
        self._pattern: str | None = None
        self._partitions: list[KafkaTopicPartition] | None = None
        self._group_id: str | None = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: KafkaOffsetsInitializer | None = None
        self._deserializer: Callable[[Any], Any] | None = None
        self._properties: dict[str, str] = {}
        self._dead_letter: OutputTag | None = None
        self._client_id_prefix: str | None = None

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSourceBuilder":
        self._bootstrap = bootstrap_servers
        return self

    def set_topics(self, *topics: str) -> "KafkaSourceBuilder":
        self._topics = [t for ts in topics for t in ([ts] if isinstance(ts, str) else ts)]
        return self

    def set_topic_pattern(self, topic_pattern: str) -> "KafkaSourceBuilder":
        re.compile(topic_pattern)
        self._pattern = topic_pattern
        return self

    def set_partitions(self, partitions: set[KafkaTopicPartition]) -> "KafkaSourceBuilder":
        self._partitions = sorted(partitions)
        return self

    def set_group_id(self, group_id: str) -> "KafkaSourceBuilder":
        self._group_id = group_id
        return self

    def set_client_id_prefix(self, prefix: str) -> "KafkaSourceBuilder":
        self._client_id_prefix = prefix
        return self

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        self._starting = starting_offsets_initializer
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """Read up to these offsets (``latest()``: what the topic holds at the
        start), then end: a bounded job, finished with a final checkpoint."""
        self._stopping = stopping_offsets_initializer
        return self

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        raise InvalidConfigurationError(
            "KafkaSource",
            "set_unbounded()",
            "weir does not stop an unbounded Kafka source at offsets; use set_bounded()",
        )

    def set_value_only_deserializer(self, deserialization_schema: DeserializationSchema) -> "KafkaSourceBuilder":
        self._deserializer = _ValueOnly(deserialization_schema)
        return self

    def set_deserializer(self, deserializer: Callable[[KafkaMessage], Any]) -> "KafkaSourceBuilder":
        """weir's: a callable from a :class:`KafkaMessage` (key, value, topic,
        partition, offset, timestamp, headers) to a record (None: no record)."""
        self._deserializer = _WholeMessage(deserializer)
        return self

    def set_dead_letter_output(self, output_tag: OutputTag) -> "KafkaSourceBuilder":
        """weir's: a message the deserializer refuses goes to this side output
        (``source_stream.get_side_output(tag)``) as a :class:`KafkaMessage`, rather
        than failing the job."""
        self._dead_letter = output_tag
        return self

    def set_property(self, key: str, value: str) -> "KafkaSourceBuilder":
        self._properties[key] = str(value)
        return self

    def set_properties(self, props: dict[str, str]) -> "KafkaSourceBuilder":
        for k, v in props.items():
            self.set_property(k, v)
        return self

    def build(self) -> KafkaSource:
        if not self._bootstrap:
            raise InvalidConfigurationError(
                "KafkaSource", "bootstrap servers", "call set_bootstrap_servers('host:9092')"
            )
        if sum(x is not None and x != [] for x in (self._topics, self._pattern, self._partitions)) != 1:
            raise InvalidConfigurationError(
                "KafkaSource", "topics", "call exactly one of set_topics, set_topic_pattern or set_partitions"
            )
        if self._deserializer is None:
            raise InvalidConfigurationError(
                "KafkaSource",
                "deserializer",
                "call set_value_only_deserializer(SimpleStringSchema()) or set_deserializer(fn)",
            )
        interval = self._properties.get("partition.discovery.interval.ms", str(DISCOVERY_INTERVAL_MS))
        if not interval.lstrip("-").isdigit():
            raise InvalidConfigurationError(
                "KafkaSource property",
                "partition.discovery.interval.ms",
                f"{interval!r} is not a number of milliseconds",
            )
        return KafkaSource(
            _Config(
                self._bootstrap,
                self._topics,
                self._pattern,
                self._partitions,
                self._group_id,
                self._starting,
                self._stopping,
                self._deserializer,
                dict(self._properties),
                self._dead_letter,
                self._client_id_prefix,
            )
        )


class _KafkaEnumerator(SplitEnumerator):
    """Finds partitions (on the context's async call, never on the loop) and
    pushes each new one to its owner. Checkpointed: the partitions seen, and
    the splits not handed out yet."""

    def __init__(self, config: _Config, bounded: bool, parallelism: int, restored: Any | None) -> None:
        self._config = config
        self._bounded = bounded
        self._parallelism = parallelism
        seen, unassigned = restored if restored is not None else ([], [])
        self._seen: set[KafkaTopicPartition] = set(seen)
        self._unassigned: list[KafkaPartitionSplit] = list(unassigned)
        self._discovered = bounded and bool(self._seen)  # a bounded source finds its partitions once
        self._context: SplitEnumeratorContext | None = None

    def start(self, context: SplitEnumeratorContext) -> None:
        self._context = context
        if self._discovered:
            return
        interval_ms = int(self._config.properties.get("partition.discovery.interval.ms", DISCOVERY_INTERVAL_MS))
        period = None if self._bounded or interval_ms <= 0 else interval_ms / 1000
        first = not self._seen
        context.call_async(lambda: self._discover(first), self._on_discovered, period)

    def _discover(self, first: bool) -> list[KafkaPartitionSplit]:
        """Off the loop: the partitions not seen before, with resolved offsets.
        The first discovery uses the starting offsets; later ones start new
        partitions at the earliest offset, as Flink does."""
        c = self._config
        try:
            if c.partitions is not None:
                found = list(c.partitions)
            else:
                meta = AdminClient(c.client()).list_topics(timeout=METADATA_TIMEOUT_S)
                names = [t for t in meta.topics if (re.fullmatch(c.pattern, t) if c.pattern else t in c.topics)]
                missing = [] if c.pattern else sorted(set(c.topics) - set(names))
                if missing:
                    raise InvalidConfigurationError(
                        "KafkaSource topics", ", ".join(missing), f"no such topic on the brokers at {c.bootstrap}"
                    )
                found = [KafkaTopicPartition(t, p) for t in names for p in meta.topics[t].partitions]
            new = sorted(p for p in found if p not in self._seen)
            if not new:
                return []
            consumer = c.consumer("enumerator")
            try:
                start = (c.starting if first else KafkaOffsetsInitializer.earliest()).resolve(consumer, new, c.group_id)
                stop = c.stopping.resolve(consumer, new, c.group_id) if c.stopping is not None else {}
            finally:
                consumer.close()
        except KafkaException as exc:
            raise ConnectionError(
                f"KafkaSource could not reach the brokers at {c.bootstrap} within {METADATA_TIMEOUT_S:g} s: {exc}"
            ) from None
        return [KafkaPartitionSplit(p.topic, p.partition, start[p], stop.get(p)) for p in new]

    def _on_discovered(self, splits: list[KafkaPartitionSplit] | None, error: BaseException | None) -> None:
        if error is not None:
            raise error
        assert splits is not None and self._context is not None
        fresh = [s for s in splits if KafkaTopicPartition(s.topic, s.partition) not in self._seen]
        self._seen.update(KafkaTopicPartition(s.topic, s.partition) for s in fresh)
        self._unassigned.extend(fresh)
        self._discovered = True
        for subtask in range(self._parallelism):
            self._assign(subtask, self._context)

    def _assign(self, subtask: int, context: SplitEnumeratorContext) -> None:
        own = [s for s in self._unassigned if _owner(s.topic, s.partition, self._parallelism) == subtask]
        if own:
            self._unassigned = [s for s in self._unassigned if s not in own]
            context.assign_splits(subtask, own)
        elif self._bounded and self._discovered:
            context.signal_no_more_splits(subtask)

    def handle_split_request(self, subtask: int, context: SplitEnumeratorContext) -> None:
        # Unbounded: a reader with nothing waits for a discovery to push it a partition.
        if self._discovered:
            self._assign(subtask, context)

    def add_splits_back(self, splits: list[Any], subtask: int) -> None:
        self._unassigned = list(splits) + self._unassigned
        if self._context is not None:
            self._assign(subtask, self._context)  # waits in the valve until the subtask runs again

    def snapshot_state(self) -> Any:
        return (sorted(self._seen), list(self._unassigned))


class _KafkaReader(SourceReader):
    """One consumer per subtask, assigned its partitions (no group membership:
    the enumerator decides who reads what). ``consume`` returns what librdkafka
    has fetched in the background; a poll hands out one partition's records at a
    time (watermarks are per partition) and keeps the rest, in order."""

    IDLE_WAIT_S = 0.005

    def __init__(self, config: _Config, subtask: int) -> None:
        self._config = config
        self._subtask = subtask
        self._consumer: Consumer | None = None
        self._splits: dict[str, KafkaPartitionSplit] = {}
        self._buffered: dict[str, deque[Any]] = {}
        self._read_to: dict[str, TopicPartition] = {}  # every partition's next offset, ended ones too
        self._checkpoints: dict[int, list[TopicPartition]] = {}  # offsets to commit to the group once complete

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self._config.consumer(f"reader-{self._subtask}")
        return self._consumer

    def add_splits(self, splits: list[Any]) -> None:
        live = [s for s in splits if not s.done]
        for s in live:
            self._splits[s.split_id] = s
            self._buffered.setdefault(s.split_id, deque())
        if live:
            self._client().incremental_assign([TopicPartition(s.topic, s.partition, s.offset) for s in live])

    def snapshot_splits(self) -> list[Any]:
        return list(self._splits.values())

    def poll(self, max_records: int) -> Poll:
        if not self._splits:
            return Poll([], end=True)
        if not any(self._buffered.values()):
            for m in self._client().consume(max_records, timeout=0):
                if m.error() is not None:
                    raise KafkaException(m.error())
                sid = f"{m.topic()}-{m.partition()}"
                if sid in self._buffered:
                    self._buffered[sid].append(m)
        for sid, queue in self._buffered.items():
            if queue:
                return self._hand_out(self._splits[sid], queue, max_records)
        self._finish_drained()
        return Poll([], end=not self._splits, wait_s=self.IDLE_WAIT_S)

    def _hand_out(self, split: KafkaPartitionSplit, queue: deque[Any], max_records: int) -> Poll:
        records: list[Any] = []
        timestamps: list[int] = []
        dead: list[KafkaMessage] = []
        decode, tag = self._config.deserializer, self._config.dead_letter
        stop = split.stop
        last = split.offset - 1
        while queue and len(records) < max_records:
            m = queue.popleft()
            offset = m.offset()
            if stop is not None and offset >= stop:
                queue.clear()
                break
            last = offset
            try:
                record = decode(m)
            except Exception as exc:
                if tag is None:
                    raise ValueError(
                        f"the deserializer refused the record at {m.topic()}-{m.partition()} offset {offset} ({type(exc).__name__}: {exc})"
                    ) from exc
                dead.append(KafkaMessage.of(m))
                continue
            if record is not None:
                records.append(record)
                timestamps.append(m.timestamp()[1])
        self._splits[split.split_id] = replace(split, offset=last + 1)
        if not queue:
            self._finish_drained()
        return Poll(
            records,
            split_id=split.split_id,
            timestamps=timestamps,
            side={tag.tag_id: dead} if tag is not None and dead else None,
        )

    def _finish_drained(self) -> None:
        """Bounded: a partition whose next offset passed its stop ends. The
        consumer's position skips transaction markers, which are never records."""
        bounded = [s for s in self._splits.values() if s.stop is not None and not self._buffered[s.split_id]]
        if not bounded:
            return
        positions = self._client().position([TopicPartition(s.topic, s.partition) for s in bounded])
        ended = []
        for s, tp in zip(bounded, positions):
            if tp.offset >= 0 and tp.offset > s.offset:
                s = self._splits[s.split_id] = replace(s, offset=tp.offset)
            if s.done:
                ended.append(s)
        for s in ended:
            del self._splits[s.split_id], self._buffered[s.split_id]
            self._read_to[s.split_id] = TopicPartition(s.topic, s.partition, s.offset)
        if ended:
            self._client().incremental_unassign([TopicPartition(s.topic, s.partition) for s in ended])

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        for s in self._splits.values():
            self._read_to[s.split_id] = TopicPartition(s.topic, s.partition, s.offset)
        if self._config.group_id is not None:
            self._checkpoints[checkpoint_id] = list(self._read_to.values())
        return list(self._splits.values())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit the offsets of that checkpoint to the consumer group (monitoring
        and ``committed_offsets()`` starts; weir restores from its own state): a
        failed commit is logged, never a failure."""
        done = [cid for cid in self._checkpoints if cid <= checkpoint_id]
        offsets = self._checkpoints[max(done)] if done else []
        self._checkpoints = {cid: o for cid, o in self._checkpoints.items() if cid > checkpoint_id}
        if offsets:
            try:
                self._client().commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                log.warning(
                    "committing offsets of checkpoint %d to group %s failed: %s",
                    checkpoint_id,
                    self._config.group_id,
                    exc,
                )

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


# ------------------------------------------------------------------ sink
class DeliveryGuarantee(enum.Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    NONE = "none"


@dataclass(frozen=True)
class KafkaRecordSerializationSchema:
    """Build with ``KafkaRecordSerializationSchema.builder()``: the topic (or a
    selector from record to topic), the value's schema and optionally the key's."""

    topic: str | None
    topic_selector: Callable[[Any], str] | None
    value_schema: SerializationSchema
    key_schema: SerializationSchema | None

    @staticmethod
    def builder() -> "KafkaRecordSerializationSchemaBuilder":
        return KafkaRecordSerializationSchemaBuilder()

    def serialize(self, record: Any) -> tuple[str, bytes | None, bytes]:
        topic = self.topic if self.topic is not None else self.topic_selector(record)  # type: ignore[misc]
        key = self.key_schema.serialize(record) if self.key_schema is not None else None
        return topic, key, self.value_schema.serialize(record)


class KafkaRecordSerializationSchemaBuilder:
    def __init__(self) -> None:
        self._topic: str | None = None
        self._selector: Callable[[Any], str] | None = None
        self._value: SerializationSchema | None = None
        self._key: SerializationSchema | None = None

    def set_topic(self, topic: str) -> "KafkaRecordSerializationSchemaBuilder":
        self._topic = topic
        return self

    def set_topic_selector(self, topic_selector: Callable[[Any], str]) -> "KafkaRecordSerializationSchemaBuilder":
        self._selector = topic_selector
        return self

    def set_value_serialization_schema(
        self, value_serialization_schema: SerializationSchema
    ) -> "KafkaRecordSerializationSchemaBuilder":
        self._value = value_serialization_schema
        return self

    def set_key_serialization_schema(
        self, key_serialization_schema: SerializationSchema
    ) -> "KafkaRecordSerializationSchemaBuilder":
        self._key = key_serialization_schema
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if (self._topic is None) == (self._selector is None):
            raise InvalidConfigurationError(
                "KafkaRecordSerializationSchema", "topic", "call exactly one of set_topic or set_topic_selector"
            )
        if self._value is None:
            raise InvalidConfigurationError(
                "KafkaRecordSerializationSchema",
                "value schema",
                "call set_value_serialization_schema(SimpleStringSchema())",
            )
        return KafkaRecordSerializationSchema(self._topic, self._selector, self._value, self._key)


class KafkaSink(Sink):
    """Build with ``KafkaSink.builder()``; use with ``stream.sink_to(sink)``. See
    the module docstring for what each delivery guarantee does."""

    def __init__(
        self,
        bootstrap: str,
        serializer: KafkaRecordSerializationSchema,
        guarantee: DeliveryGuarantee,
        prefix: str | None,
        properties: dict[str, str],
    ) -> None:
        self.bootstrap = bootstrap
        self.serializer = serializer
        self.guarantee = guarantee
        self.prefix = prefix
        self.properties = properties

    @staticmethod
    def builder() -> "KafkaSinkBuilder":
        return KafkaSinkBuilder()

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        config = {"bootstrap.servers": self.bootstrap, "logger": log, **self.properties}
        if self.guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            # An id per subtask and attempt: after a rescale a restored writer's
            # committables may go to another subtask, which publishes them under
            # their own id while the subtask of that number writes under a new one.
            return _TransactionalWriter(config, self.serializer, f"{self.prefix}-{ctx.subtask}-{ctx.attempt_id}")
        return _StreamingWriter(config, self.serializer, self.guarantee is DeliveryGuarantee.AT_LEAST_ONCE)

    def exclusive_location(self) -> str | None:
        """With EXACTLY_ONCE, the transactional-id prefix: two running writers under
        one prefix would abort or fence each other's transactions."""
        if self.guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return None
        return f"Kafka transactional-id prefix '{self.prefix}' at {self.bootstrap}"


class KafkaSinkBuilder:
    def __init__(self) -> None:
        self._bootstrap: str | None = None
        self._serializer: KafkaRecordSerializationSchema | None = None
        self._guarantee = DeliveryGuarantee.NONE
        self._prefix: str | None = None
        self._properties: dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSinkBuilder":
        self._bootstrap = bootstrap_servers
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> "KafkaSinkBuilder":
        self._serializer = record_serializer
        return self

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> "KafkaSinkBuilder":
        self._guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> "KafkaSinkBuilder":
        self._prefix = transactional_id_prefix
        return self

    def set_property(self, key: str, value: str) -> "KafkaSinkBuilder":
        self._properties[key] = str(value)
        return self

    def build(self) -> KafkaSink:
        if not self._bootstrap:
            raise InvalidConfigurationError("KafkaSink", "bootstrap servers", "call set_bootstrap_servers('host:9092')")
        if self._serializer is None:
            raise InvalidConfigurationError(
                "KafkaSink",
                "record serializer",
                "call set_record_serializer(KafkaRecordSerializationSchema.builder()...build())",
            )
        if self._guarantee is DeliveryGuarantee.EXACTLY_ONCE and not self._prefix:
            raise InvalidConfigurationError(
                "KafkaSink",
                "transactional id prefix",
                "EXACTLY_ONCE needs set_transactional_id_prefix(...), unique to this sink among all jobs writing to the cluster",
            )
        return KafkaSink(self._bootstrap, self._serializer, self._guarantee, self._prefix, dict(self._properties))


@dataclass(frozen=True)
class KafkaCommittable:
    """A checkpoint's records of one subtask, published in one transaction whose
    marker carries ``token``."""

    transactional_id: str
    checkpoint_id: int
    token: str
    marker_topic: str  # the writer's first topic: its marker is on partition 0 there
    messages: list[tuple[str, bytes | None, bytes]]  # (topic, key, value)


class _TransactionalWriter(SinkWriter):
    """Publishing is serial per transactional id, in checkpoint order, so the
    marker (the token of the last transaction committed under an id) tells
    exactly which of a restored checkpoint's committables were published."""

    TIMEOUT_S = 60.0

    def __init__(
        self, config: dict[str, Any], serializer: KafkaRecordSerializationSchema, transactional_id: str
    ) -> None:
        self._config = config
        self._serializer = serializer
        self._id = transactional_id
        self._batch: list[tuple[str, bytes | None, bytes]] = []
        self._marker_topic: str | None = None
        self._clients: dict[str, tuple[Producer, Consumer]] = {}

    def write(self, records: list[Any]) -> None:
        serialize = self._serializer.serialize
        self._batch.extend(serialize(r) for r in records)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        batch, self._batch = self._batch, []
        if not batch:
            return []
        self._marker_topic = self._marker_topic or batch[0][0]
        return [KafkaCommittable(self._id, checkpoint_id, uuid.uuid4().hex, self._marker_topic, batch)]

    def commit(self, committables: list[Any]) -> None:
        for c in sorted(committables, key=lambda c: c.checkpoint_id):
            self._publish(c)

    def recover(self, committables: list[Any]) -> None:
        """Publish what the restored checkpoint holds, but not twice: under each
        transactional id, only what comes after the committable its marker names."""
        by_id: dict[str, list[KafkaCommittable]] = {}
        for c in sorted(committables, key=lambda c: c.checkpoint_id):
            by_id.setdefault(c.transactional_id, []).append(c)
        for cs in by_id.values():
            (tp,) = self._client(cs[0].transactional_id)[1].committed(
                [TopicPartition(cs[0].marker_topic, 0)], timeout=self.TIMEOUT_S
            )
            tokens = [c.token for c in cs]
            for c in cs[tokens.index(tp.metadata) + 1 if tp.metadata in tokens else 0 :]:
                self._publish(c)

    def _client(self, transactional_id: str) -> tuple[Producer, Consumer]:
        client = self._clients.get(transactional_id)
        if client is None:
            # A new producer with this id fences an older one and aborts its open transaction.
            producer = Producer(
                {
                    "linger.ms": 5,
                    "queue.buffering.max.messages": 1_000_000,
                    **self._config,
                    "transactional.id": transactional_id,
                }
            )
            producer.init_transactions(self.TIMEOUT_S)
            # The marker's group: never joined, only committed to within transactions and read.
            marker = Consumer(
                {
                    **self._config,
                    "group.id": transactional_id,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
            client = self._clients[transactional_id] = (producer, marker)
        return client

    def _publish(self, c: KafkaCommittable) -> None:
        producer, marker = self._client(c.transactional_id)
        producer.begin_transaction()
        produce = producer.produce
        for topic, key, value in c.messages:
            try:
                produce(topic, value, key)
            except BufferError:
                _produce(producer, topic, key, value)
        mark = TopicPartition(c.marker_topic, 0, c.checkpoint_id, metadata=c.token)
        producer.send_offsets_to_transaction([mark], marker.consumer_group_metadata(), self.TIMEOUT_S)
        producer.commit_transaction(self.TIMEOUT_S)

    def close(self) -> None:
        for _, marker in self._clients.values():
            marker.close()
        self._clients.clear()


class _StreamingWriter(SinkWriter):
    def __init__(
        self, config: dict[str, Any], serializer: KafkaRecordSerializationSchema, flush_at_checkpoints: bool
    ) -> None:
        self._producer = Producer({"linger.ms": 5, **config, "enable.idempotence": flush_at_checkpoints})
        self._serializer = serializer
        self._flush = flush_at_checkpoints
        self._bootstrap = config["bootstrap.servers"]
        self._error: Any = None

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None and self._error is None:
            self._error = err

    def write(self, records: list[Any]) -> None:
        self._raise_delivery_error()
        for r in records:
            topic, key, value = self._serializer.serialize(r)
            _produce(self._producer, topic, key, value, self._on_delivery)
        self._producer.poll(0)  # serve delivery reports, or they pile up

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if self._flush:
            self._producer.flush()
            self._raise_delivery_error()
        return []

    def _raise_delivery_error(self) -> None:
        """A record the client gave up on (after librdkafka's ``delivery.timeout.ms``,
        5 minutes unless set: brokers down, a topic missing) fails the task."""
        if self._error is not None:
            raise ConnectionError(
                f"KafkaSink could not deliver to the brokers at {self._bootstrap}: {self._error.str()}"
            )

    def close(self) -> None:
        self._producer.flush(10)


def _produce(
    producer: Producer, topic: str, key: bytes | None, value: bytes, on_delivery: Callable[..., None] | None = None
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=on_delivery)
            return
        except BufferError:  # the client's queue is full: let it send
            producer.poll(0.05)

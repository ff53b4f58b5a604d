"""Kafka → map → Kafka: weir at parallelism 1 and 2 next to the floor, a plain
Python consumer-to-producer loop on the same client (confluent-kafka), on a
topic of 4 partitions. For weir, "whole run" is the whole ``execute()`` on a warm
cluster; "steady" is the records over the span from the first output record to
the last (their Kafka timestamps, set when the sink produced them: with
EXACTLY_ONCE, when each checkpoint's transaction was published).

    python3 -m bench.kafka [--records 500000] [--bootstrap host:9092]

Without ``--bootstrap`` it starts the tests' local broker (Java 17 and Maven).
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

from weir import StreamExecutionEnvironment
from weir.connectors.kafka import (
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    SimpleStringSchema,
)

PARTITIONS = 4


def _fill(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        while True:
            try:
                p.produce(topic, f"record number {i:09d}".encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def _output_span(bootstrap: str, topic: str, n: int) -> tuple[int, float]:
    """(records, seconds from the first to the last record's timestamp) of ``topic``, read_committed."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
        }
    )
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    count, first, last = 0, float("inf"), 0.0
    deadline = time.monotonic() + 120
    while count < n and time.monotonic() < deadline:
        for m in c.consume(10_000, timeout=0.5):
            if m.error() is None:
                count += 1
                ts = m.timestamp()[1] / 1000
                first, last = min(first, ts), max(last, ts)
    c.close()
    return count, max(last - first, 1e-3)


def plain_loop(bootstrap: str, source: str, sink: str, n: int) -> float:
    """The floor: one process consuming, mapping and producing."""
    started = time.perf_counter()
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"floor-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    c.assign([TopicPartition(source, p, 0) for p in range(PARTITIONS)])
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    seen = 0
    while seen < n:
        for m in c.consume(10_000, timeout=0.5):
            if m.error() is None:
                seen += 1
                value = m.value().decode().upper().encode()
                while True:
                    try:
                        p.produce(sink, value)
                        break
                    except BufferError:
                        p.poll(0.05)
    p.flush(60)
    c.close()
    return time.perf_counter() - started


def weir_job(
    bootstrap: str, source: str, sink: str, parallelism: int, guarantee: DeliveryGuarantee, executor: str
) -> float:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(1000)
    env.set_progress_bar(False)
    (
        env.from_source(
            KafkaSource.builder()
            .set_bootstrap_servers(bootstrap)
            .set_topics(source)
            .set_value_only_deserializer(SimpleStringSchema())
            .set_bounded(KafkaOffsetsInitializer.latest())
            .build(),
            source_name="kafka",
        )
        .map(lambda s: s.upper())
        .sink_to(
            KafkaSink.builder()
            .set_bootstrap_servers(bootstrap)
            .set_record_serializer(
                KafkaRecordSerializationSchema.builder()
                .set_topic(sink)
                .set_value_serialization_schema(SimpleStringSchema())
                .build()
            )
            .set_delivery_guarantee(guarantee)
            .set_transactional_id_prefix(f"bench-{sink}")
            .build()
        )
    )
    started = time.perf_counter()
    env.execute(f"bench-kafka-{parallelism}", executor=executor)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--bootstrap")
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--executor", default="ray", choices=["ray", "local"])
    args = ap.parse_args()
    broker: Any = None
    if args.bootstrap is None:
        from tests.kafka_broker import KafkaBroker

        broker = KafkaBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap
    n = args.records
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})

        def topic(partitions: int) -> str:
            name = f"bench-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
            return name

        source = topic(PARTITIONS)
        _fill(bootstrap, source, n)
        if args.executor == "ray":
            from weir.actors.cluster import ensure_ray

            ensure_ray()
            weir_job(
                bootstrap, source, topic(PARTITIONS), 1, DeliveryGuarantee.NONE, args.executor
            )  # warm the cluster's pool
        rows = []
        sink = topic(PARTITIONS)
        whole = plain_loop(bootstrap, source, sink, n)
        rows.append(("plain consumer→producer loop (the floor)", whole, _output_span(bootstrap, sink, n)))
        for p in args.parallelism:
            for guarantee in (DeliveryGuarantee.EXACTLY_ONCE, DeliveryGuarantee.AT_LEAST_ONCE):
                sink = topic(PARTITIONS)
                whole = weir_job(bootstrap, source, sink, p, guarantee, args.executor)
                rows.append((f"weir p={p}, {guarantee.name}", whole, _output_span(bootstrap, sink, n)))
    finally:
        if broker is not None:
            broker.stop()
    table = Table(title=f"Kafka → map → Kafka, {n:,} records, {PARTITIONS} partitions ({args.executor} executor)")
    for col in ("run", "whole run s", "whole rec/s", "steady rec/s", "records out"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for name, whole, (count, span) in rows:
        table.add_row(name, f"{whole:.2f}", f"{n / whole:,.0f}", f"{count / span:,.0f}", f"{count:,}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()

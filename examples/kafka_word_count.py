"""Kafka in, Kafka out, exactly once: running word counts of the lines of a topic.

    python -m tests.kafka_broker 9092 &        # a local broker (Java 17 and Maven), or use yours
    python examples/kafka_word_count.py --bootstrap localhost:9092 --demo

``--demo`` first writes a few lines into the input topic. The job reads what the
topic holds now (a bounded read; drop ``set_bounded`` for a job that runs on),
counts words, and writes ``{"word": ..., "count": ...}`` updates to the output
topic in Kafka transactions, one per checkpoint. It then reads the output as a
``read_committed`` consumer would and prints the final counts.
"""

from __future__ import annotations

import argparse
import json
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from weir import StreamExecutionEnvironment, WatermarkStrategy
from weir.connectors.kafka import (
    DeliveryGuarantee,
    JsonRowSerializationSchema,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    SimpleStringSchema,
)

LINES = ["to be or not to be", "that is the question", "to stream or to batch"]


def word_count(bootstrap: str, input_topic: str, output_topic: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(1000)

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(input_topic)
        .set_group_id("word-count")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(output_topic)
            .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"word-count-{output_topic}")
        .build()
    )

    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .flat_map(lambda line: [(word, 1) for word in line.split()])
        .key_by(lambda wc: wc[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda wc: {"word": wc[0], "count": wc[1]})
        .sink_to(sink)
    )
    env.execute("kafka-word-count")


def final_counts(bootstrap: str, topic: str) -> dict[str, int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    counts: dict[str, int] = {}
    while any(
        tp.offset < ends[tp.partition] for tp in consumer.position([TopicPartition(topic, p) for p in partitions])
    ):
        for message in consumer.consume(1000, timeout=1):
            if message.error() is None:
                update = json.loads(message.value())
                counts[update["word"]] = max(counts.get(update["word"], 0), update["count"])
    consumer.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--input-topic", default="lines")
    ap.add_argument("--output-topic", default="word-counts")
    ap.add_argument("--demo", action="store_true", help="write a few lines into the input topic first")
    args = ap.parse_args()
    if args.demo:
        producer = Producer({"bootstrap.servers": args.bootstrap})
        for line in LINES:
            producer.produce(args.input_topic, line.encode())
        producer.flush(30)
    word_count(args.bootstrap, args.input_topic, args.output_topic)
    print("final counts:", json.dumps(dict(sorted(final_counts(args.bootstrap, args.output_topic).items()))))


if __name__ == "__main__":
    main()

"""PyFlink's ``pyflink.datastream.connectors.kafka``, on weir: the Kafka source
and sink of :mod:`weir.connectors.kafka`. Needs the kafka extra: without it,
importing this module raises an ImportError that says how to install it."""

from weir.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaSource,
    KafkaSourceBuilder,
    KafkaTopicPartition,
)

__all__ = [
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaTopicPartition",
    "KafkaOffsetsInitializer",
    "KafkaOffsetResetStrategy",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
]

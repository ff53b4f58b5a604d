"""Kafka in and out, on a real broker (tests/kafka_broker.py): exactly-once
end to end under task kills, counted by a read_committed consumer; partition
discovery; offsets committed to the group; bad records; an unreachable broker."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import weir.connectors.kafka
from tests.checker import check_running_sums
from tests.kills import kill_one_at_random
from weir import (
    InvalidJobGraphError,
    JobExecutionError,
    MapFunction,
    OutputTag,
    ProcessFunction,
    RestartStrategy,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from weir.connectors.kafka import (
    DeliveryGuarantee,
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    SimpleStringSchema,
    _TransactionalWriter,
)


def _topic(broker: Any, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions)
    return name


def _fill(broker: Any, topic: str, values: list[Any], partitions: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, json.dumps(v).encode(), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(30)


def _read_committed(broker: Any, topic: str) -> list[Any]:
    """Every committed record of ``topic``, as a read_committed consumer sees it."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    meta = c.list_topics(topic, timeout=10).topics[topic].partitions
    tps = [TopicPartition(topic, p, 0) for p in meta]
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    c.assign(tps)
    out: list[Any] = []
    deadline = time.monotonic() + 60
    while True:
        positions = {tp.partition: tp.offset for tp in c.position(tps)}
        if all(positions[p] >= ends[p] or ends[p] == 0 for p in ends):
            break
        assert time.monotonic() < deadline, f"could not read {topic} to its end: {positions} of {ends}"
        for m in c.consume(10_000, timeout=0.5):
            if m.error() is None:
                out.append(json.loads(m.value()))
    c.close()
    return out


def _env(checkpoint_dir: str, p: int = 2, interval_ms: int = 100) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(20, 0.1))
    return env


def _source(broker: Any, topic: str, bounded: bool = True, **props: str) -> KafkaSource:
    b = (
        KafkaSource.builder()
        .set_bootstrap_servers(broker.bootstrap)
        .set_topics(topic)
        .set_group_id(f"g-{topic}")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(JsonRowDeserializationSchema.builder().build())
    )
    for k, v in props.items():
        b.set_property(k.replace("_", "."), v)
    return (b.set_bounded(KafkaOffsetsInitializer.latest()) if bounded else b).build()


def _sink(broker: Any, topic: str, guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE) -> KafkaSink:
    return (
        KafkaSink.builder()
        .set_bootstrap_servers(broker.bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
            .build()
        )
        .set_delivery_guarantee(guarantee)
        .set_transactional_id_prefix(f"weir-{topic}")
        .build()
    )


class _Paced(MapFunction):
    """About 5,000 records/s per subtask, so that an in-process job outlasts the
    kills aimed at it instead of finishing before the first one lands."""

    def __init__(self) -> None:
        self.seen = 0

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.seen % 50 == 0:
            time.sleep(0.01)
        return value[0], value[1]


def _running_sum_job(
    env: StreamExecutionEnvironment,
    broker: Any,
    source_topic: str,
    sink_topic: str,
    guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE,
    paced: bool = False,
) -> None:
    (
        env.from_source(_source(broker, source_topic), source_name="kafka")
        .map(_Paced() if paced else lambda kv: (kv[0], kv[1]))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .name("sums")
        .sink_to(_sink(broker, sink_topic, guarantee))
    )


def _kill_randomly(client: Any, seed: int, kills: int) -> None:
    """After a first completed checkpoint, ``kills`` task kills 0.2-0.6 s apart
    while the job runs (a moment with no task deployed does not count)."""
    rng = random.Random(seed)
    while not client.status().is_terminal and not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        time.sleep(0.02)
    landed = 0
    while landed < kills and not client.status().is_terminal:
        time.sleep(rng.uniform(0.2, 0.6))
        if kill_one_at_random(client, rng):
            landed += 1


def _kill_while_running(client: Any, seed: int, kills: int) -> None:
    killer = threading.Thread(target=_kill_randomly, args=(client, seed, kills))
    killer.start()
    client.wait()
    killer.join()


@pytest.mark.parametrize("seed", [1, 2])
def test_kafka_to_kafka_is_exactly_once_under_task_kills(kafka_broker, checkpoint_dir, seed):
    n = 40_000
    inputs = [(i % 37, i) for i in range(n)]
    source, sink = _topic(kafka_broker, 4), _topic(kafka_broker, 2)
    _fill(kafka_broker, source, inputs, 4)
    env = _env(checkpoint_dir)
    _running_sum_job(env, kafka_broker, source, sink, paced=True)
    client = env.execute_async(f"kafka-eo-{seed}", executor="local")
    _kill_while_running(client, seed, kills=4)
    assert client.restarts() >= 1
    verdict = check_running_sums([tuple(r) for r in _read_committed(kafka_broker, sink)], inputs)
    assert (verdict.lost, verdict.duplicated, verdict.keys_wrong, verdict.outputs) == (0, 0, 0, n), f"seed {seed}"


def _stop_and_resume(broker: Any, checkpoint_dir: str, tmp_path: Any) -> Any:
    """A keyed running sum over a topic that fills while it runs, stopped with a
    savepoint once it published something (the stop publishes what it holds)
    and resumed from it with another parallelism until every key reached its
    total: the verdict. Checkpoints are 400 ms apart while 100 records come
    every 50 ms, so the savepoint surely holds records no checkpoint published."""
    n = 6_000
    inputs = [(i % 11, i) for i in range(n)]
    totals = {k: sum(v for kk, v in inputs if kk == k) for k in range(11)}
    source, sink = _topic(broker, 2), _topic(broker, 1)
    filler = threading.Thread(
        target=lambda: [(_fill(broker, source, inputs[i : i + 100], 2), time.sleep(0.05)) for i in range(0, n, 100)]
    )
    filler.start()

    def job(p: int) -> StreamExecutionEnvironment:
        env = _env(checkpoint_dir, p=p, interval_ms=400)
        (
            env.from_source(_source(broker, source, bounded=False), source_name="kafka")
            .uid("kafka")
            .key_by(lambda kv: kv[0])
            .reduce(lambda a, b: (a[0], a[1] + b[1]))
            .uid("sums")
            .sink_to(_sink(broker, sink))
            .uid("sink")
        )
        return env

    def wait_for(done: Any) -> list[Any]:
        deadline = time.monotonic() + 60
        while not done(out := [tuple(r) for r in _read_committed(broker, sink)]):
            assert time.monotonic() < deadline, f"{len(out)} outputs"
            time.sleep(0.05)
        return out

    client = job(2).execute_async("kafka-stop", executor="local")
    wait_for(lambda out: out)
    savepoint = client.stop(str(tmp_path / "savepoints"))
    assert filler.is_alive()  # input was left for the resumed job
    resumed = job(3)
    resumed.restore_from_savepoint(savepoint)
    client = resumed.execute_async("kafka-resumed", executor="local")
    out = wait_for(lambda out: {k: max(t for kk, t in out if kk == k) for k, _ in out} == totals)
    client.cancel()
    filler.join()
    return check_running_sums(out, inputs)


def test_a_job_stopped_with_a_savepoint_and_resumed_writes_each_record_once(kafka_broker, checkpoint_dir, tmp_path):
    verdict = _stop_and_resume(kafka_broker, checkpoint_dir, tmp_path)
    assert (verdict.lost, verdict.duplicated, verdict.keys_wrong) == (0, 0, 0)


def test_without_the_marker_check_a_resume_publishes_twice(kafka_broker, checkpoint_dir, tmp_path, monkeypatch):
    """The check can fail: a restore that publishes every restored committable,
    asking no marker, writes again what the stop's savepoint published."""
    monkeypatch.setattr(_TransactionalWriter, "recover", _TransactionalWriter.commit)
    verdict = _stop_and_resume(kafka_broker, checkpoint_dir, tmp_path)
    assert verdict.duplicated > 0 and verdict.lost == 0


def test_at_least_once_writes_every_update_through_kills(kafka_broker, checkpoint_dir):
    n = 20_000
    inputs = [(i % 13, i) for i in range(n)]
    source, sink = _topic(kafka_broker, 2), _topic(kafka_broker, 2)
    _fill(kafka_broker, source, inputs, 2)
    env = _env(checkpoint_dir)
    _running_sum_job(env, kafka_broker, source, sink, DeliveryGuarantee.AT_LEAST_ONCE, paced=True)
    client = env.execute_async("kafka-alo", executor="local")
    _kill_while_running(client, 7, kills=3)
    # Replayed updates may interleave differently: only the final totals are sure.
    verdict = check_running_sums([tuple(r) for r in _read_committed(kafka_broker, sink)], inputs)
    assert verdict.keys_wrong == 0 and verdict.outputs >= n and client.restarts() >= 1


def test_new_partitions_are_discovered_while_the_job_runs(kafka_broker, checkpoint_dir):
    from confluent_kafka.admin import AdminClient, NewPartitions

    source = _topic(kafka_broker, 1)
    _fill(kafka_broker, source, [("a", i) for i in range(100)], 1)
    env = _env(checkpoint_dir, p=2)
    stream = env.from_source(
        _source(kafka_broker, source, bounded=False, partition_discovery_interval_ms="200"), source_name="kafka"
    )
    with stream.map(lambda kv: kv[1]).execute_and_collect("kafka-discovery", executor="local") as results:
        got = []
        for value in results:
            got.append(value)
            if len(got) == 100:
                admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})  # kept: its futures need it alive
                admin.create_partitions([NewPartitions(source, 3)])[source].result(30)
                p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
                for i in range(100, 160):
                    p.produce(source, json.dumps(("a", i)).encode(), partition=1 + i % 2)
                p.flush(10)
            if len(got) == 160:
                break
    assert sorted(got) == list(range(160))


def test_offsets_are_committed_to_the_group_and_records_keep_kafka_timestamps(kafka_broker, checkpoint_dir):
    source = _topic(kafka_broker, 2)
    _fill(kafka_broker, source, list(range(1_000)), 2)
    env = _env(checkpoint_dir)
    ws = WatermarkStrategy.for_monotonous_timestamps()  # no assigner: Kafka's record timestamps
    stamped = env.from_source(_source(kafka_broker, source), ws, "kafka").process(_Stamp())
    now_ms = time.time() * 1000
    assert all(
        now_ms - 120_000 < t <= now_ms + 1_000
        for _, t in stamped.execute_and_collect("kafka-offsets", executor="local")
    )
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"g-{source}"})
    committed = c.committed([TopicPartition(source, 0), TopicPartition(source, 1)], timeout=10)
    assert [tp.offset for tp in committed] == [500, 500]
    c.close()


class _Stamp(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value, ctx.timestamp()


def test_a_record_the_deserializer_refuses_fails_the_job_or_goes_to_the_dead_letter_output(
    kafka_broker, checkpoint_dir
):
    source = _topic(kafka_broker, 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for v in [b"1", b"2", b"not json", b"4"]:
        p.produce(source, v, partition=0)
    p.flush(10)
    env = _env(checkpoint_dir, p=1)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_source(_source(kafka_broker, source), source_name="orders").print()
    with pytest.raises(
        JobExecutionError,
        match=rf"operator 'Source: orders'.*the deserializer refused the record at {source}-0 offset 2",
    ):
        env.execute("kafka-bad-record", executor="local")

    dead = OutputTag("dead")
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(kafka_broker.bootstrap)
        .set_topics(source)
        .set_value_only_deserializer(JsonRowDeserializationSchema.builder().build())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_dead_letter_output(dead)
    )
    env = _env(checkpoint_dir, p=1)
    good = env.from_source(builder.build(), source_name="orders")
    bad = good.get_side_output(dead).map(lambda m: (m.topic, m.partition, m.offset, m.value))
    with good.union(bad).execute_and_collect("kafka-dead-letters", executor="local") as results:
        assert sorted(map(str, results)) == sorted(map(str, [1, 2, 4, (source, 0, 2, b"not json")]))


def test_an_unreachable_broker_fails_the_job_with_a_clear_error_in_bounded_time(checkpoint_dir, monkeypatch):
    monkeypatch.setattr(weir.connectors.kafka, "METADATA_TIMEOUT_S", 2.0)  # 10 s by default
    env = _env(checkpoint_dir, p=1)
    env.set_restart_strategy(RestartStrategy.no_restart())
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers("127.0.0.1:1")
        .set_topics("orders")
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    env.from_source(source, source_name="orders").print()
    started = time.monotonic()
    with pytest.raises(JobExecutionError, match=r"KafkaSource could not reach the brokers at 127.0.0.1:1 within 2 s"):
        env.execute("kafka-unreachable", executor="local")
    assert time.monotonic() - started < 15


def test_builders_name_what_is_missing():
    with pytest.raises(Exception, match="set_bootstrap_servers"):
        KafkaSource.builder().set_topics("t").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(Exception, match="exactly one of set_topics, set_topic_pattern or set_partitions"):
        KafkaSource.builder().set_bootstrap_servers("b:9092").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(Exception, match="set_transactional_id_prefix"):
        (
            KafkaSink.builder()
            .set_bootstrap_servers("b:9092")
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_record_serializer(
                KafkaRecordSerializationSchema.builder()
                .set_topic("t")
                .set_value_serialization_schema(SimpleStringSchema())
                .build()
            )
            .build()
        )


def test_an_exactly_once_sinks_transactional_id_prefix_belongs_to_one_running_job():
    """The prefix is the job's output, as a FileSink's folder is: the pool refuses
    a second running job with it (tests/integration/test_many_jobs.py tries the
    folder on Ray), and one job may not use it twice."""

    def sink(prefix: str, guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE) -> KafkaSink:
        schema = (
            KafkaRecordSerializationSchema.builder()
            .set_topic("t")
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        return (
            KafkaSink.builder()
            .set_bootstrap_servers("b:9092")
            .set_delivery_guarantee(guarantee)
            .set_transactional_id_prefix(prefix)
            .set_record_serializer(schema)
            .build()
        )

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_collection(["1", "2"])
    numbers.sink_to(sink("orders"))
    numbers.sink_to(sink("orders", DeliveryGuarantee.AT_LEAST_ONCE))  # no transactions: nothing to own
    assert env.get_job_graph("owner").outputs == {"Kafka transactional-id prefix 'orders' at b:9092": "Sink: KafkaSink"}
    with pytest.raises(
        InvalidJobGraphError, match="two sinks of this job write to Kafka transactional-id prefix 'orders' at b:9092"
    ):
        numbers.sink_to(sink("orders"))


def test_a_sink_whose_brokers_do_not_answer_fails_the_job_naming_them(checkpoint_dir):
    env = _env(checkpoint_dir, p=1)
    env.set_restart_strategy(RestartStrategy.no_restart())
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers("127.0.0.1:1")
        .set_property("delivery.timeout.ms", "1500")
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic("out")
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
        .build()
    )
    env.from_collection(["a", "b"]).sink_to(sink)
    with pytest.raises(
        JobExecutionError, match=r"KafkaSink could not deliver to the brokers at 127.0.0.1:1: Local: Message timed out"
    ):
        env.execute("kafka-sink-unreachable", executor="local")

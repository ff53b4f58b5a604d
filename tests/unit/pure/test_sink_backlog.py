"""A two-phase-commit sink keeps what it pre-committed until a checkpoint
completes, and re-pickles all of it into each snapshot. While checkpoints keep
failing that grew without limit (237 KB to 1.8 MB in 8 s, up to the OOM killer:
issue row 2); past ``Sink.max_pending_bytes`` the snapshot now fails the task,
saying why, so the job goes back to its latest completed checkpoint."""

from __future__ import annotations

import pickle

import pytest

from weir.runtime.collect import CollectSink
from weir.runtime.errors import SinkBacklogError
from weir.runtime.testing import OperatorHarness


class _Published:
    def __init__(self) -> None:
        self.records: list = []

    def publish(self, committed) -> None:
        for _, records in committed:
            self.records.extend(records)


def _collect_sink(bound: int) -> tuple[OperatorHarness, _Published]:
    published = _Published()
    sink = CollectSink(published)
    sink.max_pending_bytes = bound
    return OperatorHarness.sink(sink), published


def test_a_collect_sink_whose_checkpoints_keep_failing_fails_past_its_bound_naming_it():
    h, published = _collect_sink(bound=2_000)
    h.process(*range(100))
    h.snapshot(1)
    h.operator.notify_checkpoint_aborted(1)
    h.process(*range(100, 200))
    h.snapshot(2)  # two checkpoints' records, below the bound
    h.operator.notify_checkpoint_aborted(2)
    h.process(*range(200, 1_000))
    with pytest.raises(SinkBacklogError) as info:
        h.snapshot(3)
    held = sum(len(pickle.dumps(cs, protocol=5)) for cs in h.operator._pending.values())
    assert held > 2_000
    assert str(info.value) == (
        f"sink 'Sink' holds {held} bytes of output that no completed checkpoint has committed, past its bound of "
        "2000 bytes (Sink.max_pending_bytes): 2 checkpoint(s) failed in a row, and its records wait for a completed "
        "checkpoint; the task fails so that the job restarts from the latest completed checkpoint instead of growing "
        "until it runs out of memory"
    )
    assert (info.value.operator, info.value.bound_bytes) == ("Sink", 2_000)
    assert published.records == []  # nothing was committed: the restart replays it all


def test_a_completed_checkpoint_commits_the_backlog_and_starts_the_count_again():
    h, published = _collect_sink(bound=2_000)
    h.process(*range(100))
    h.snapshot(1)
    h.operator.notify_checkpoint_aborted(1)
    h.process(*range(100, 200))
    h.snapshot(2)
    h.notify_complete(2)
    assert published.records == list(range(200))
    h.process(*range(200, 1_000))
    h.snapshot(3)  # more than the bound, but no checkpoint failed since the last completed one
    h.notify_complete(3)
    assert published.records == list(range(1_000))


def test_without_a_failed_checkpoint_one_large_final_checkpoint_is_not_refused():
    """A bounded job without periodic checkpoints delivers everything at its final
    checkpoint: that is one transaction, not a backlog."""
    h, published = _collect_sink(bound=100)
    h.process(*range(10_000))
    h.finish()
    h.snapshot(1)
    h.notify_complete(1)
    assert published.records == list(range(10_000))


def test_an_exactly_once_kafka_sink_is_bounded_the_same_way():
    from weir.connectors.kafka import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink
    from weir.connectors.serialization import SimpleStringSchema

    serializer = (
        KafkaRecordSerializationSchema.builder()
        .set_topic("out")
        .set_value_serialization_schema(SimpleStringSchema())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers("nowhere:9092")
        .set_record_serializer(serializer)
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix("backlog")
        .build()
    )
    sink.max_pending_bytes = 2_000
    h = OperatorHarness.sink(sink)  # no broker is reached before a commit
    h.process(*(f"record {i}" for i in range(50)))
    h.snapshot(1)
    h.operator.notify_checkpoint_aborted(1)
    h.process(*(f"record {i}" for i in range(50, 200)))
    with pytest.raises(
        SinkBacklogError,
        match=r"^sink 'Sink' holds \d+ bytes .* past its bound of 2000 bytes .*: 1 checkpoint\(s\) failed",
    ):
        h.snapshot(2)

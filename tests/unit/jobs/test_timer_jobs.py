"""Timers in running jobs on both backends: a keyed process function that moves
an inactivity timeout with every record (delete and register) and registers
its window's end (the same timer for many records) fires each exactly once
through a live rescale 2 -> 3 -> 1 (timers restored into other subtasks, also
from RocksDB key-group ranges), and a BATCH job fires every timer at the end
of its input."""

from __future__ import annotations

import pytest

from tests.unit.jobs.test_local_rescale import _wait_for_checkpoint
from tests.unit.jobs.test_rocksdb_jobs import rocks
from weir import (
    HashMapStateBackend,
    JobStatus,
    KeyedProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed

N, KEYS, GAP, WINDOW = 30_000, 50, 1_000, 500
BACKENDS = {"heap": HashMapStateBackend, "rocksdb": rocks}


class Timeouts(KeyedProcessFunction):
    """Record ``(key, t)``: the key's timeout moves from its previous record's
    ``t + GAP`` to this one's (the next record of a key comes ``KEYS`` ms later, so
    only each key's last timeout may fire); its window's end is registered again."""

    def open(self, runtime_context):
        self.last = runtime_context.get_state(ValueStateDescriptor("last"))

    def process_element(self, value, ctx):
        _, t = value
        timers = ctx.timer_service()
        previous = self.last.value()
        if previous is not None:
            timers.delete_event_time_timer(previous + GAP)
        timers.register_event_time_timer(t + GAP)
        timers.register_event_time_timer(t // WINDOW * WINDOW + WINDOW - 1)
        self.last.update(t)
        return ()

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp


def _expected(n: int) -> list[tuple[int, int]]:
    fired = {(i % KEYS, i // WINDOW * WINDOW + WINDOW - 1) for i in range(n)}
    fired |= {(k, n - KEYS + k + GAP) for k in range(KEYS)}
    return sorted(fired)


def _job(backend, checkpoint_dir, out_dir, n=N, rate=15_000, batch=False):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_parallelism(8)
    env.set_state_backend(BACKENDS[backend]())
    if batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    else:
        env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    watermarks = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda kv: kv[1])
    (
        env.from_generator(lambda i: (i % KEYS, i), count=n, records_per_second=rate, watermark_strategy=watermarks)
        .set_parallelism(1)
        .key_by(lambda kv: kv[0])
        .process(Timeouts())
        .name("timeouts")
        .sink_to(FileSink(out_dir))
    )
    return env


@pytest.mark.parametrize("backend", BACKENDS)
def test_timers_fire_exactly_once_through_a_rescale_2_3_1(backend, checkpoint_dir, out_dir):
    client = _job(backend, checkpoint_dir, out_dir).execute_async(f"timers-{backend}", executor="local")
    for parallelism in (3, 1):
        _wait_for_checkpoint(client, max([c["checkpoint_id"] for c in client.checkpoints()], default=0))
        client.rescale({"timeouts": parallelism})
        assert sum(t.startswith("timeouts/") for t in client.tasks()) == parallelism
    result = client.wait(60)
    assert result.status is JobStatus.FINISHED and result.restarts == 0
    assert sorted(map(tuple, read_committed(out_dir))) == _expected(N)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_job_fires_every_timer_at_the_end_of_input(backend, checkpoint_dir, out_dir):
    result = _job(backend, checkpoint_dir, out_dir, n=5_000, rate=None, batch=True).execute("timers", executor="local")
    assert result.status is JobStatus.FINISHED
    assert sorted(map(tuple, read_committed(out_dir))) == _expected(5_000)

"""Slow and stuck consumers (in-process executor): a slow sink holds its sources
back instead of growing queues, checkpoints still complete, and a user function
that blocks forever is named when its checkpoint times out; cancel still ends the job."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from weir import StreamExecutionEnvironment
from weir.runtime.errors import JobCancelledError
from weir.runtime.executor import JobStatus
from weir.runtime.jobmaster import JobMaster
from weir.runtime.sinks import Sink, SinkWriter


class _Sleepy(SinkWriter):
    def write(self, records: list[Any]) -> None:
        time.sleep(0.0002 * len(records))  # 5,000 records/s at most


class SleepySink(Sink):
    def create_writer(self, ctx: Any) -> SinkWriter:
        return _Sleepy()


def test_a_slow_sink_holds_the_sources_back_with_bounded_queues(checkpoint_dir):
    batch, capacity = 256, 4
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_batch_size(batch)
    env.config.transport.mailbox_capacity = capacity
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_generator(lambda i: (i % 100, i)).key_by(lambda r: r[0]).sink_to(SleepySink()).set_parallelism(1)
    client = env.execute_async("slow-sink", executor="local")
    gaps = []
    for _ in range(20):
        time.sleep(0.1)
        m = client.metrics()
        sent = sum(t["records_out"] for t in m if t["task"].startswith("source"))
        done = sum(t["records_in"] for t in m if not t["task"].startswith("source"))
        gaps.append(sent - done)
    completed = [c for c in client.checkpoints() if c["status"] == "COMPLETED"]
    client.cancel()
    # In flight at most: per channel, the mailbox's batches plus one being handled.
    bound = 2 * (capacity + 1) * batch
    assert max(gaps) <= bound, f"records in flight grew to {max(gaps)} (bound {bound}): {gaps}"
    assert sum(t["records_out"] for t in m if t["task"].startswith("source")) < 20_000  # held back, not racing ahead
    assert completed, "no checkpoint completed behind the slow sink"


RELEASE = threading.Event()  # module level: the function is pickled by reference, in-process


def stuck(i: int) -> int:
    if i == 100:
        RELEASE.wait()
    return i


def test_a_function_blocked_forever_is_named_at_checkpoint_timeout_and_cancel_ends_the_job(checkpoint_dir, monkeypatch):
    monkeypatch.setattr(JobMaster, "CANCEL_TIMEOUT_S", 1.0)  # the blocked task is killed after it (10 s by default)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(checkpoint_dir)
    cc.set_checkpoint_timeout(500)
    env.from_generator(lambda i: i, records_per_second=1_000).rebalance().map(stuck).name("stuck").sink_to(SleepySink())
    client = env.execute_async("blocked", executor="local")
    try:
        deadline = time.monotonic() + 30
        while not any(c["status"] == "ABORTED" for c in client.checkpoints()):
            assert time.monotonic() < deadline, client.checkpoints()
            time.sleep(0.05)
        reason = next(c["reason"] for c in client.checkpoints() if c["status"] == "ABORTED")
        assert "the checkpoint expired before it completed (not acknowledged by" in reason and "stuck" in reason, reason
        started = time.monotonic()
        client.cancel(timeout_s=30)
        assert client.status() is JobStatus.CANCELED and time.monotonic() - started < 10
        with pytest.raises(JobCancelledError):
            client.wait(1)
    finally:
        RELEASE.set()

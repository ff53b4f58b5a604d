"""Slow and stuck consumers (in-process executor): a slow sink holds its sources
back instead of growing queues, checkpoints still complete, and a user function
that blocks forever is named when its checkpoint times out; cancel still ends the job.
The sink takes batches as the test lets it, and the job master's time is a
ManualClock: nothing here waits on the wall clock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.errors import JobCancelledError
from weir.runtime.executor import JobStatus
from weir.runtime.jobmaster import JobMaster
from weir.runtime.local import LocalExecutor, LocalJobClient
from weir.runtime.sinks import Sink, SinkWriter
from weir.runtime.testing import ManualClock

# Module level: the functions are pickled by reference, in-process.
PERMITS, WRITTEN = threading.Semaphore(0), threading.Semaphore(0)


class _Gated(SinkWriter):
    def write(self, records: list[Any]) -> None:
        PERMITS.acquire()  # one batch per permit the test gives
        WRITTEN.release()


class GatedSink(Sink):
    def create_writer(self, ctx: Any) -> SinkWriter:
        return _Gated()


def _let_one_batch_through() -> None:
    PERMITS.release()
    assert WRITTEN.acquire(timeout=30), "the sink took no batch"


def _with_status(client: LocalJobClient, status: str) -> list[dict[str, Any]]:
    return [c for c in client.checkpoints() if c["status"] == status]


def test_a_slow_sink_holds_the_sources_back_with_bounded_queues(checkpoint_dir):
    batch, capacity = 256, 4
    clock = ManualClock()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_batch_size(batch)
    env.config.transport.mailbox_capacity = capacity
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_generator(lambda i: (i % 100, i)).key_by(lambda r: r[0]).sink_to(GatedSink()).set_parallelism(1)
    client = LocalExecutor(clock).submit(env.get_job_graph("slow-sink"))
    gaps = []
    try:
        for _ in range(20):
            _let_one_batch_through()
            m = client.metrics()
            sent = sum(t["records_out"] for t in m if t["task"].startswith("source"))
            done = sum(t["records_in"] for t in m if not t["task"].startswith("source"))
            gaps.append(sent - done)
        clock.advance(0.2)  # a checkpoint is due: its barriers queue behind the batches in flight
        for _ in range(10_000):
            if _with_status(client, "COMPLETED"):
                break
            _let_one_batch_through()
        completed = _with_status(client, "COMPLETED")
    finally:
        PERMITS.release(1_000_000)  # the sink runs free: the cancel finds no task stuck
        client.cancel()
    # In flight at most: per channel, the mailbox's batches plus one being handled.
    bound = 2 * (capacity + 1) * batch
    assert max(gaps) <= bound, f"records in flight grew to {max(gaps)} (bound {bound}): {gaps}"
    assert sent < 20_000  # held back, not racing ahead
    assert completed, "no checkpoint completed behind the slow sink"


REACHED, RELEASE = threading.Event(), threading.Event()


def stuck(i: int) -> int:
    if i == 100:
        REACHED.set()
        RELEASE.wait()
    return i


def test_a_function_blocked_forever_is_named_at_checkpoint_timeout_and_cancel_ends_the_job(checkpoint_dir):
    clock = ManualClock()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(checkpoint_dir)
    cc.set_checkpoint_timeout(500)
    env.from_generator(lambda i: i).rebalance().map(stuck).name("stuck").sink_to(DiscardingSink())
    client = LocalExecutor(clock).submit(env.get_job_graph("blocked"))
    try:
        assert REACHED.wait(30)
        clock.advance(0.1)  # a checkpoint is due; the blocked task cannot take it
        client.wait_until(lambda c: bool(_with_status(c, "PENDING")))
        clock.advance(1.0)  # its timeout (0.5 s) passes
        client.wait_until(lambda c: bool(_with_status(c, "ABORTED")))
        reason = _with_status(client, "ABORTED")[0]["reason"]
        assert "the checkpoint expired before it completed (not acknowledged by" in reason and "stuck" in reason, reason
        cancel = threading.Thread(target=client.cancel)
        cancel.start()
        client.wait_until(lambda c: c.status() is JobStatus.CANCELLING)
        clock.advance(JobMaster.CANCEL_TIMEOUT_S + 1)  # the blocked task did not close in time: it is killed
        cancel.join(30)
        assert client.status() is JobStatus.CANCELED
        with pytest.raises(JobCancelledError):
            client.wait(1)
    finally:
        RELEASE.set()

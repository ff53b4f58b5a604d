"""Figures the runtime keeps for whoever watches a job (the web UI, clients): a
task's idle time and queued input, timed only when its loop waits, the job's
failures with the task and attempt each came from, and each subtask's
acknowledgement of a checkpoint."""

from __future__ import annotations

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.checkpointing import CheckpointCoordinator, plan_checkpoint
from weir.runtime.job_lifecycle import JobFailure, JobLifecycle
from weir.runtime.mailbox import Mailbox
from weir.runtime.storage import StateHandle


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_mailbox_times_only_its_waits_and_counts_what_waits_in_it():
    box: Mailbox[str] = Mailbox(2, capacity=4)
    box.put_data(0, 0, "a")
    box.put_data(1, 0, "b")
    box.put_data(1, 1, "c")
    assert box.queued == 3
    assert [box.take(0).payload for _ in range(3)] == ["a", "b", "c"]
    assert box.idle_s == 0.0 and box.queued == 0  # letters there: no wait, nothing timed
    assert box.take(0.05) is None
    assert 0.04 < box.idle_s < 1.0


def test_the_job_keeps_its_last_failures_with_task_and_attempt():
    clock = ManualClock()
    life = JobLifecycle("j", None, clock)  # type: ignore[arg-type]  # failed() never touches storage
    for i in range(JobLifecycle.HISTORY_LIMIT + 3):
        clock.now += 1
        life.failed(ValueError(f"boom {i}"), ("sum", i % 2), attempt=i)
    failures = list(life.failures)
    assert len(failures) == JobLifecycle.HISTORY_LIMIT
    assert failures[-1] == JobFailure(clock.now, life.failure, ("sum", 0), JobLifecycle.HISTORY_LIMIT + 2)
    assert str(failures[0].error) == "boom 3"


def test_a_checkpoint_keeps_each_subtasks_time_to_ack_and_bytes():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_sequence(0, 9).map(lambda x: x).name("m").sink_to(DiscardingSink())
    coordinator = CheckpointCoordinator(env.get_job_graph("acks"))
    plan = plan_checkpoint(env.get_job_graph("acks"), set())
    first = coordinator.start(plan, 10.0, lambda cid: f"file:///tmp/chk-{cid}")
    keys = sorted(plan.to_ack)
    for n, key in enumerate(keys):
        handle = StateHandle(f"file:///x/{key[0]}-{key[1]}", "0", 100 + n)
        coordinator.acknowledge(first.checkpoint_id, key, handle, {}, 10.25 + n)
    stats = coordinator.stats()[-1]
    assert stats["subtasks"][f"{keys[0][0]}/{keys[0][1]}"] == {
        "ack_ms": 250,
        "alignment_ms": 0,
        "size_bytes": 100,
        "full_size_bytes": 100,
    }
    assert stats["subtasks"][f"{keys[-1][0]}/{keys[-1][1]}"]["ack_ms"] == 250 + 1000 * (len(keys) - 1)
    coordinator.complete(first.checkpoint_id, 20.0)

    second = coordinator.start(plan_checkpoint(env.get_job_graph("acks"), set()), 30.0, lambda cid: "file:///c2")
    again = StateHandle("file:///x/new", "0", 7, base=(StateHandle(f"file:///x/{keys[0][0]}-{keys[0][1]}", "0", 100),))
    coordinator.acknowledge(second.checkpoint_id, keys[0], again, {}, 30.5, alignment_ms=120)
    ack = coordinator.stats()[-1]["subtasks"][f"{keys[0][0]}/{keys[0][1]}"]
    assert ack == {
        "ack_ms": 500,
        "alignment_ms": 120,
        "size_bytes": 7,
        "full_size_bytes": 107,
    }  # the file it builds on was written before

"""Figures the runtime keeps for whoever watches a job (the web UI, clients): a
task's idle time and queued input, timed only when its loop waits, and the
job's failures with the task and attempt each came from."""

from __future__ import annotations

from weir.runtime.job_lifecycle import JobFailure, JobLifecycle
from weir.runtime.mailbox import Mailbox


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

"""Failed checkpoints, driven by hand: the next one waits a growing backoff, each
failure is a WARNING, and checkpoint storage that keeps failing fails the job
with an error naming the storage and the OS error, instead of a bounded job
retrying its final checkpoint many times a second for ever (issue row 1)."""

from __future__ import annotations

import logging

import pytest

from tests.unit.jobs.test_exactly_once_edges import _StubGateway
from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.checkpointing import DEFAULT_TOLERABLE_STORAGE_FAILURES, FailedCheckpoints
from weir.runtime.clock import ManualClock
from weir.runtime.errors import CheckpointFailureReason, CheckpointStorageError
from weir.runtime.executor import JobStatus
from weir.runtime.jobmaster import JobMaster
from weir.runtime.letters import Decline, EndOfInput
from weir.runtime.master_options import MasterOptions
from weir.runtime.off_loop import inline

STORAGE = CheckpointFailureReason.DECLINED_STORAGE_FAILED
ENOSPC = "writing its state failed: [Errno 28] No space left on device: '/full/chk-1/map-0.state'"


def test_each_failed_checkpoint_doubles_the_wait_for_the_next_from_the_interval_up_to_a_cap():
    failures, waits = FailedCheckpoints(), []
    for now in range(9):
        failures = failures.aborted(STORAGE, float(now), 0.5)
        waits.append(failures.retry_at - now)
    assert waits == [0.5, 1, 2, 4, 8, 10, 10, 10, 10]
    assert FailedCheckpoints().aborted(STORAGE, 0.0, None).retry_at == FailedCheckpoints.RETRY_BASE_S  # no interval
    assert (
        FailedCheckpoints().aborted(STORAGE, 0.0, 60.0).aborted(STORAGE, 0.0, 60.0).retry_at == 60.0
    )  # a long interval is its cap


def test_only_failures_count_and_a_job_may_go_on_up_to_the_tolerable_number():
    failures = FailedCheckpoints()
    for reason in (
        CheckpointFailureReason.DECLINED_SUBSUMED,
        CheckpointFailureReason.JOB_STOPPING,
        CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK,
        CheckpointFailureReason.TASK_FAILURE,
    ):
        assert failures.aborted(reason, 5.0, 1.0) is failures
    failures = failures.aborted(CheckpointFailureReason.TIMEOUT, 0.0, 1.0)
    for _ in range(DEFAULT_TOLERABLE_STORAGE_FAILURES):
        failures = failures.aborted(CheckpointFailureReason.STORAGE_FAILURE, 0.0, 1.0)
    assert (failures.failed, failures.storage_failed) == (
        DEFAULT_TOLERABLE_STORAGE_FAILURES + 1,
        DEFAULT_TOLERABLE_STORAGE_FAILURES,
    )
    assert failures.beyond(None) is None  # unset: only storage failures are bounded, and the timeout is none
    assert failures.beyond(DEFAULT_TOLERABLE_STORAGE_FAILURES + 1) is None
    assert failures.beyond(DEFAULT_TOLERABLE_STORAGE_FAILURES) == "11 checkpoints failed in a row (tolerable: 10)"
    failures = failures.aborted(STORAGE, 0.0, 1.0)
    assert failures.beyond(None) == (
        "11 checkpoints failed in a row writing to it (tolerable: 10 unless set_tolerable_checkpoint_failure_number says otherwise)"
    )


class _Gateway(_StubGateway):
    """Deploys nothing: the test plays the tasks' letters, and sees the barriers sent."""

    def __init__(self) -> None:
        super().__init__()
        self.triggered: list[int] = []

    def send(self, task, letter) -> None:
        barrier = getattr(letter, "barrier", None)
        if barrier is not None:
            self.triggered.append(barrier.checkpoint_id)


def test_a_bounded_job_whose_storage_is_full_retries_its_final_checkpoint_with_backoff_then_fails(
    checkpoint_dir, caplog
):
    """Before: the final checkpoint was triggered again the moment it aborted
    (1,097 aborts in 25 s, at INFO), and the job stayed RUNNING for ever."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1000).get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_collection([1, 2, 3]).map(lambda x: x).sink_to(DiscardingSink())
    clock = ManualClock()
    gateway = _Gateway()
    master = JobMaster(env.get_job_graph("full-disk"), gateway, MasterOptions(clock=clock.now, storage_io=inline))
    master.start()
    source = next(k for k in gateway.keys if master.graph.vertices[k[0]].is_source)
    attempt = master.tasks.attempts[source]
    master.mailbox.put_control(EndOfInput(attempt, source))
    master.run_until_idle()
    assert gateway.triggered == [1]  # the final checkpoint, at once
    caplog.set_level(logging.INFO, "weir.jobmaster")
    waits = []
    for _ in range(2 * DEFAULT_TOLERABLE_STORAGE_FAILURES):  # the storage fails every time
        master.mailbox.put_control(Decline(attempt, source, gateway.triggered[-1], STORAGE, ENOSPC))
        master.run_until_idle()
        if master.status is not JobStatus.RUNNING:
            break
        failed_at, triggered = clock.now(), len(gateway.triggered)
        while len(gateway.triggered) == triggered:  # not at once: only once the backoff has passed
            assert not master.coordinator.pending and clock.now() < 1000
            clock.advance(0.25)
            master.run_until_idle()
        waits.append(clock.now() - failed_at)
    assert waits == [1, 2, 4, 8, 10, 10, 10, 10, 10, 10]
    assert gateway.triggered == list(range(1, DEFAULT_TOLERABLE_STORAGE_FAILURES + 2))
    assert master.status is JobStatus.FAILED
    error = master.life.failure
    assert isinstance(error, CheckpointStorageError)
    assert str(error) == (
        f"checkpoint storage {master.storage.root} cannot be written: 11 checkpoints failed in a row writing to it "
        "(tolerable: 10 unless set_tolerable_checkpoint_failure_number says otherwise); last: a task failed to write "
        f"its state to checkpoint storage ({source[0]}/0: {ENOSPC})"
    )
    aborts = [r for r in caplog.records if "checkpoint" in r.message and "of full-disk failed" in r.message]
    assert len(aborts) == 11 and all(r.levelno == logging.WARNING for r in aborts)
    assert (
        "(1 in a row; the next begins in 1.0s at the earliest): a task failed to write its state" in aborts[0].message
    )
    assert "No space left on device" in aborts[0].message


def test_a_failing_store_with_tolerable_failures_set_fails_the_job_after_that_many(checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1000).get_checkpoint_config().set_checkpoint_storage(
        checkpoint_dir
    ).set_tolerable_checkpoint_failure_number(0)
    env.from_collection([1, 2, 3]).sink_to(DiscardingSink())
    gateway = _Gateway()
    master = JobMaster(env.get_job_graph("no-tolerance"), gateway, MasterOptions(clock=lambda: 0.0, storage_io=inline))
    master.start()
    (source,) = gateway.keys
    attempt = master.tasks.attempts[source]
    master.mailbox.put_control(EndOfInput(attempt, source))
    master.run_until_idle()
    master.mailbox.put_control(Decline(attempt, source, 1, STORAGE, ENOSPC))
    master.run_until_idle()
    assert master.status is JobStatus.FAILED
    with pytest.raises(
        CheckpointStorageError,
        match=r"cannot be written: 1 checkpoints failed in a row \(tolerable: 0\); last: .*No space",
    ):
        raise master.life.failure

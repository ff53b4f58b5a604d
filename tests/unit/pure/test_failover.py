"""Failover decisions, tested by calling them: which tasks restart, whether the
job restarts at all (a full local disk only a few times), what the coordinators
do, and which checkpoint is next."""

from __future__ import annotations

from weir.runtime.config import RestartStrategy
from weir.runtime.errors import CorruptCheckpointError
from weir.runtime.failover import (
    LOCAL_DISK_FULL_RESTARTS,
    LOCAL_DISK_FULL_WINDOW_S,
    DiskFullFailures,
    Failover,
    FailoverAction,
    Restarts,
    coordinator_resets,
    decide_failover,
    fall_back,
    region_of,
)
from weir.runtime.restarts import RestartBackoff

A = frozenset({("src", 0), ("map", 0)})
B = frozenset({("src", 1), ("map", 1)})
REGIONS = [A, B]
BACKOFF = RestartBackoff(RestartStrategy.fixed_delay(3, 1.0))


def test_a_failed_task_restarts_its_region_with_region_failover_while_the_job_runs():
    assert region_of(("map", 1), REGIONS, "region", running=True, task_count=4) == B


def test_every_task_restarts_with_full_failover_or_when_the_job_is_not_running_or_no_task_failed():
    assert region_of(("map", 1), REGIONS, "full", running=True, task_count=4) is None
    assert region_of(("map", 1), REGIONS, "region", running=False, task_count=4) is None
    assert region_of(None, REGIONS, "region", running=True, task_count=4) is None


def test_a_region_that_is_the_whole_job_restarts_as_the_job():
    whole = A | B
    assert region_of(("map", 1), [whole], "region", running=True, task_count=4) is None


def test_a_region_restarts_when_the_failure_is_restartable_and_attempts_are_left():
    assert decide_failover(BACKOFF, True, B, False) == Failover(FailoverAction.RESTART_REGION, BACKOFF, B)


def test_without_a_region_the_job_restarts_is_cancelled_or_fails():
    assert decide_failover(BACKOFF, True, None, False) == Failover(FailoverAction.RESTART_JOB, BACKOFF)
    assert decide_failover(BACKOFF, True, None, True).action is FailoverAction.CANCEL
    assert decide_failover(BACKOFF, False, None, False).action is FailoverAction.FAIL
    assert decide_failover(None, True, None, False).action is FailoverAction.FAIL


def test_no_region_restart_once_the_attempts_are_used_up_or_the_failure_is_not_restartable():
    assert decide_failover(None, True, B, False).action is FailoverAction.FAIL
    assert decide_failover(BACKOFF, False, B, False).action is FailoverAction.FAIL
    assert decide_failover(None, True, B, True).action is FailoverAction.CANCEL  # a cancel on its way wins over failing


def test_a_coordinator_whose_every_subtask_restarts_is_closed_one_with_others_running_resets_those_that_restart():
    plan = coordinator_resets(B, {"all-in": ("src", 1), "shared": ("map", 2), "elsewhere": ("sink", 1)})
    assert plan.close == ["all-in"]
    assert plan.reset == {"shared": [1]}


def test_regions_are_redeployed_once_their_delay_passed():
    restarts = Restarts(RestartStrategy.fixed_delay(3, 0))
    restarts.waiting = {A: 1.0, B: 2.0}
    assert restarts.regions_due(now=1.5) == [A]
    assert restarts.regions_due(now=2.0) == [A, B]


def test_a_damaged_checkpoint_falls_back_to_the_one_before_it():
    error = CorruptCheckpointError("/cp/2/_metadata", "truncated")
    points = [("/cp/1", {"checkpoint_id": 1}), ("/cp/2", {"checkpoint_id": 2})]
    decision = fall_back(points, error, "j")
    assert decision.restore_points == points[:1] and decision.error is error and decision.restartable
    assert points == [
        ("/cp/1", {"checkpoint_id": 1}),
        ("/cp/2", {"checkpoint_id": 2}),
    ]  # the caller's list is left as it was


def test_with_no_earlier_checkpoint_left_the_job_fails_rather_than_start_from_scratch():
    decision = fall_back([("/cp/2", {})], CorruptCheckpointError("/cp/2/_metadata", "truncated"), "j")
    assert decision.restore_points == [] and not decision.restartable
    assert "job 'j' cannot restore" in str(decision.error) and "no earlier complete checkpoint" in str(decision.error)


def test_a_full_local_disk_restarts_the_job_a_few_times_within_the_window_then_fails_it():
    failures = DiskFullFailures()
    for n in range(LOCAL_DISK_FULL_RESTARTS):
        failures = failures.failed(now=10.0 * n)
        assert failures.restartable
    assert not failures.failed(now=100.0).restartable
    spread = DiskFullFailures()
    for n in range(10 * LOCAL_DISK_FULL_RESTARTS):  # each a window after the one before: never too often
        spread = spread.failed(now=n * LOCAL_DISK_FULL_WINDOW_S)
        assert spread.restartable and len(spread.times) == 1

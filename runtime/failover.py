"""Failover decisions, as plain functions over plain data: after a failure, what
restarts (a pipelined region, every task, or nothing: the job ends), under which
restart backoff, and from which checkpoint. The job master carries them out; it
calls these on its loop thread, and they touch nothing but their arguments.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any

from weir.runtime.checkpointing import TaskKey, task_name
from weir.runtime.config import RestartStrategy
from weir.runtime.errors import CorruptCheckpointError, LocalDiskFullError, NoRestorePointError
from weir.runtime.graph import JobGraph
from weir.runtime.restarts import RestartBackoff

RestorePoint = tuple[str, dict[str, Any]]  # (location, metadata) of a complete checkpoint or savepoint

# A full local disk (LocalDiskFullError) restarts the job at most this many times
# within the window, each under the restart strategy's backoff; the next fails it.
# A restart frees nothing there (a restore links the same files back), so a job
# restarted for ever would hide a disk that stays full.
LOCAL_DISK_FULL_RESTARTS = 3
LOCAL_DISK_FULL_WINDOW_S = 3600.0


class FailoverAction(enum.Enum):
    """What a failure does to the job. Each member carries its meaning."""

    RESTART_REGION = (
        "kill the failed task's pipelined region and redeploy it from the latest checkpoint; the others run on"
    )
    RESTART_JOB = "kill every task and redeploy the job from the latest checkpoint"
    CANCEL = "kill every task: a cancel was asked for, so the job ends CANCELED"
    FAIL = "kill every task: the failure is not restartable, or the restart strategy's attempts are used up"


@dataclass(frozen=True)
class Failover:
    """A failover decision: ``backoff`` is the restart strategy's next state, kept
    only if the job restarts (None: no attempt is left); ``region``: the tasks a
    region restart redeploys."""

    action: FailoverAction
    backoff: RestartBackoff | None
    region: frozenset[TaskKey] | None = None


def region_of(
    task: TaskKey | None, regions: list[frozenset[TaskKey]], failover_strategy: str, running: bool, task_count: int
) -> frozenset[TaskKey] | None:
    """The pipelined region to restart for ``task``'s failure, or None for all
    tasks: with full failover, when the job is not ``running`` (it is stopping or
    cancelling), when no task failed (a coordinator or a checkpoint did), or when
    its region is the whole job."""
    if task is None or failover_strategy != "region" or not running:
        return None
    region = next((r for r in regions if task in r), None)
    return region if region is not None and len(region) < task_count else None


def decide_failover(
    backoff: RestartBackoff | None, restartable: bool, region: frozenset[TaskKey] | None, cancel_requested: bool
) -> Failover:
    """What a failure does, given the restart strategy's answer to it (``backoff``,
    None once the attempts are used up), whether the failure may restart at all,
    the failed task's region (see :func:`region_of`) and whether a cancel is on its
    way. A region restart that cannot happen (see :func:`coordinator_resets`)
    becomes a restart of the job: decide again with ``region=None``."""
    if region is not None and restartable and backoff is not None:
        return Failover(FailoverAction.RESTART_REGION, backoff, region)
    if cancel_requested:
        return Failover(FailoverAction.CANCEL, backoff)
    if not restartable or backoff is None:
        return Failover(FailoverAction.FAIL, backoff)
    return Failover(FailoverAction.RESTART_JOB, backoff)


@dataclass(frozen=True)
class CoordinatorResets:
    """What a region restart does to the operator coordinators (FLIP-27): those
    whose every subtask restarts are closed and started afresh with the region;
    one that keeps other subtasks running takes back what it sent to the
    restarting ones (``reset``: operator uid -> its restarting subtasks)."""

    close: list[str]
    reset: dict[str, list[int]]


def coordinator_resets(region: frozenset[TaskKey], coordinators: dict[str, tuple[str, int]]) -> CoordinatorResets:
    """For a restart of ``region``, given each coordinator's (vertex id, parallelism)
    by operator uid."""
    close, reset = [], {}
    for uid, (vid, parallelism) in coordinators.items():
        subtasks = sorted(i for v, i in region if v == vid)
        if len(subtasks) == parallelism:
            close.append(uid)
        elif subtasks:
            reset[uid] = subtasks
    return CoordinatorResets(close, reset)


@dataclass(frozen=True)
class FallBack:
    """Where a job whose restore point turned out damaged goes: the restore points
    left (the damaged one dropped), and the error it fails over with; it may
    restart only if an earlier one is left (``restartable``)."""

    restore_points: list[RestorePoint]
    error: BaseException
    restartable: bool


def fall_back(restore_points: list[RestorePoint], error: CorruptCheckpointError, job: str) -> FallBack:
    """The latest of ``restore_points`` is damaged: restart from the one before it,
    or, with none left, fail (never start from scratch: that would drop the job's
    state without a word)."""
    left = restore_points[:-1]
    if left:
        return FallBack(left, error, True)
    return FallBack(
        left,
        NoRestorePointError(
            f"job '{job}' cannot restore: {error}; no earlier complete checkpoint is left to fall back to "
            "(keep more with set_num_retained_checkpoints), and starting from scratch would silently drop its state"
        ),
        False,
    )


@dataclass(frozen=True)
class DiskFullFailures:
    """When a job's latest local-disk-full failures came (those within the window,
    at most one more than it restarts for). A frozen value: :meth:`failed` returns the next."""

    times: tuple[float, ...] = ()

    def failed(self, now: float) -> "DiskFullFailures":
        recent = [t for t in self.times if now - t < LOCAL_DISK_FULL_WINDOW_S]
        return DiskFullFailures((*recent[-LOCAL_DISK_FULL_RESTARTS:], now))

    @property
    def restartable(self) -> bool:
        return len(self.times) <= LOCAL_DISK_FULL_RESTARTS


class Restarts:
    """A job's restarts as the job master keeps them: the restart strategy's
    backoff, how many restarts there were (a region's included), and what waits
    to be redeployed: the whole job at ``restart_at``, or failed-over regions
    (``waiting``: region -> when). ``jitter`` draws where each delay falls in its
    jitter band (a seeded one replays)."""

    def __init__(self, strategy: RestartStrategy, jitter: random.Random | None = None) -> None:
        self.backoff: RestartBackoff = RestartBackoff(strategy)
        self._jitter = jitter or random.Random()
        self.count = 0
        self.restart_at: float | None = None
        self.waiting: dict[frozenset[TaskKey], float] = {}
        self._regions: list[frozenset[TaskKey]] = []  # pipelined regions of the deployed graph
        self.disk_full = DiskFullFailures()

    def decide(
        self,
        graph: JobGraph,
        error: BaseException,
        task: TaskKey | None,
        restartable: bool,
        count: bool,
        running: bool,
        cancelling: bool,
        now: float,
    ) -> Failover:
        """What ``error`` does (see :func:`decide_failover`); ``task``: the task that
        failed, whose region alone may restart while the job is ``running``. A
        full local disk counts in :attr:`disk_full` whatever is decided, and is
        not restartable once it came too often (see ``LOCAL_DISK_FULL_RESTARTS``)."""
        if isinstance(error, LocalDiskFullError):
            self.disk_full = self.disk_full.failed(now)
            restartable = restartable and self.disk_full.restartable
        backoff = self.backoff.failed(now, self._jitter.random(), count)
        region = region_of(task, self._regions, graph.execution.failover_strategy, running, len(graph.task_names()))
        return decide_failover(backoff, restartable, region, cancelling)

    def go_ahead(self, decision: Failover, count: bool) -> None:
        """Keep the restart strategy's state of a restart that goes ahead."""
        assert decision.backoff is not None
        self.count += count
        self.backoff = decision.backoff
        if decision.region is None:
            self.restart_at = decision.backoff.restart_at
        else:
            self.waiting[decision.region] = decision.backoff.restart_at

    def stop_waiting(self) -> list[frozenset[TaskKey]]:
        """The job fails over whole, fails or is cancelled: the regions that waited
        for their restart will not be redeployed on their own; returns them."""
        regions = list(self.waiting)
        self.waiting.clear()
        return regions

    def job_due(self, now: float) -> bool:
        return self.restart_at is not None and now >= self.restart_at

    def regions_due(self, now: float) -> list[frozenset[TaskKey]]:
        """Failed-over regions whose restart delay has passed."""
        return [region for region, at in self.waiting.items() if now >= at]

    def deploying(self, graph: JobGraph, region: frozenset[TaskKey] | None) -> None:
        """The job (``region`` None), or a failed-over region, is being redeployed."""
        if region is None:
            self.waiting.clear()
            self._regions = graph.regions()
            self.restart_at = None
        else:
            del self.waiting[region]

    def checkpoint_completed(self, started: float, now: float) -> None:
        self.backoff = self.backoff.checkpoint_completed(started, now)

    def waiting_tasks(self) -> list[str]:
        return sorted(task_name(k) for region in self.waiting for k in region)

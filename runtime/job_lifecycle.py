"""A job's status (:class:`JobStatus`), changed only along its transition table
(:data:`_NEXT`), and how the job ended: when, why, the result its clients get,
and the record a job master that restarts reads before anything else (an ended
job never runs again). Clients name the status through
:mod:`weir.runtime.executor`, which takes it from here.
"""

from __future__ import annotations

import collections
import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from weir.runtime.errors import (
    CheckpointStorageError,
    FencedError,
    JobExecutionError,
    JobStatusError,
    RecordedFailureError,
)
from weir.runtime.storage import CheckpointStorage

log = logging.getLogger("weir.jobmaster")


class JobStatus(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    CANCELLING = "CANCELLING"
    STOPPING = "STOPPING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    SUSPENDED = "SUSPENDED"  # stopped without drain: resume it from its savepoint

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.SUSPENDED)

    def can_become(self, status: "JobStatus") -> bool:
        return status in _NEXT[self]


# What may follow each job status (Flink's JobStatus, plus STOPPING and SUSPENDED
# for stop-with-savepoint). A job master that tries any other change has a bug:
# it raises and the status stays as it was. Any live status may become FAILED
# (a bug in weir fails the job loudly).
_NEXT: dict[JobStatus, frozenset[JobStatus]] = {
    # The first deployment; a job master recovering a run whose end is recorded takes that end over.
    JobStatus.CREATED: frozenset(
        {JobStatus.RUNNING, JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.SUSPENDED, JobStatus.FAILED}
    ),
    # A stop, savepoint-and-stop or rescale; a failure; a cancel; every task finished.
    JobStatus.RUNNING: frozenset(
        {JobStatus.STOPPING, JobStatus.RESTARTING, JobStatus.CANCELLING, JobStatus.FINISHED, JobStatus.FAILED}
    ),
    # A rescale redeploys; a failed stop restarts; a cancel overtakes; drained or suspended.
    JobStatus.STOPPING: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.RESTARTING,
            JobStatus.CANCELLING,
            JobStatus.FINISHED,
            JobStatus.SUSPENDED,
            JobStatus.FAILED,
        }
    ),
    # Redeployed after the restart delay; cancelled while waiting; out of attempts.
    JobStatus.RESTARTING: frozenset({JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.FAILED}),
    JobStatus.CANCELLING: frozenset({JobStatus.CANCELED, JobStatus.FAILED}),
    JobStatus.FINISHED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELED: frozenset(),
    JobStatus.SUSPENDED: frozenset(),
}


@dataclass
class JobExecutionResult:
    job_name: str
    status: JobStatus
    duration_s: float
    restarts: int
    completed_checkpoints: int
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def get_net_runtime(self) -> float:
        """PyFlink's name: seconds the job ran."""
        return self.duration_s


@dataclass(frozen=True)
class JobFailure:
    """A failure that restarted or ended the job, in its exception history:
    ``at`` on the job master's clock; ``task`` (vertex, subtask) and the job's
    ``attempt`` when a task failed."""

    at: float
    error: BaseException
    task: tuple[str, int] | None = None
    attempt: int | None = None


class JobLifecycle:
    HISTORY_LIMIT = 20  # failures kept for the exception history (Flink keeps 16)

    def __init__(self, job: str, storage: CheckpointStorage, clock: Callable[[], float]) -> None:
        self._job, self._storage, self._clock = job, storage, clock
        self.status = JobStatus.CREATED
        self.started: float = clock()
        self.ended: float | None = None
        self.failure: BaseException | None = None  # the latest, whether the job restarted or not
        self.failures: collections.deque[JobFailure] = collections.deque(maxlen=self.HISTORY_LIMIT)

    def failed(self, error: BaseException, task: tuple[str, int] | None = None, attempt: int | None = None) -> None:
        """``error`` failed the job (``task``'s ``attempt``, when a task failed),
        which restarts or ends."""
        self.failure = error
        self.failures.append(JobFailure(self._clock(), error, task, attempt))

    def become(self, status: JobStatus) -> None:
        """Any change off the table is a bug in weir, refused before anything changes."""
        if not self.status.can_become(status):
            raise JobStatusError(f"job '{self._job}': {self.status.value} cannot become {status.value}")
        self.status = status

    def end(self, status: JobStatus, restarts: int, completed_checkpoints: int) -> None:
        """Record the end in storage, before anyone hears of it: a job master
        recovering this run reads it first."""
        try:
            self._storage.record_result(
                status.value,
                str(self.failure or ""),
                restarts=restarts,
                duration_s=round(self._clock() - self.started, 3),
                completed_checkpoints=completed_checkpoints,
            )
        except FencedError as exc:  # the run is another job master's now: its end is that one's to record
            log.warning("%s", exc)
        except (OSError, CheckpointStorageError) as exc:
            log.warning(
                "job %s: could not record its end (%s) in %s: %s", self._job, status.value, self._storage.root, exc
            )
        self.had_ended(status)

    def had_ended(self, status: JobStatus, detail: str = "") -> None:
        """The job ended ``status`` (``detail``: why it failed, as recorded)."""
        self.become(status)
        self.ended = self._clock()
        if detail:
            self.failure = RecordedFailureError(detail)

    def result(
        self, restarts: int, allowed: str, completed_checkpoints: int, metrics: list[dict[str, Any]]
    ) -> JobExecutionResult:
        """The outcome after ``restarts`` restarts of the ``allowed`` (the restart
        strategy's allowance); raises :class:`JobExecutionError` for a failed job."""
        if self.status is JobStatus.FAILED:
            raise self._failure_error(restarts, allowed)
        end = self.ended if self.ended is not None else self._clock()
        return JobExecutionResult(self._job, self.status, end - self.started, restarts, completed_checkpoints, metrics)

    def _failure_error(self, restarts: int, allowed: str) -> JobExecutionError:
        cause = self.failure
        err = JobExecutionError(
            f"job '{self._job}' failed after {restarts} restart(s) ({allowed}): {cause}", cause=cause
        )
        err.__cause__ = cause
        return err

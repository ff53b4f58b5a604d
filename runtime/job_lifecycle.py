"""A job's status, changed only along its transition table
(:data:`weir.runtime.executor._NEXT`), and how the job ended: when, why, and the
record a job master that restarts reads before anything else (an ended job
never runs again).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from weir.runtime.errors import (
    CheckpointStorageError,
    FencedError,
    JobExecutionError,
    JobStatusError,
    RecordedFailureError,
)
from weir.runtime.executor import JobExecutionResult, JobStatus
from weir.runtime.failover import Restarts
from weir.runtime.storage import CheckpointStorage

log = logging.getLogger("weir.jobmaster")


class JobLifecycle:
    def __init__(self, job: str, storage: CheckpointStorage, clock: Callable[[], float]) -> None:
        self._job, self._storage, self._clock = job, storage, clock
        self.status = JobStatus.CREATED
        self.started: float = clock()
        self.ended: float | None = None
        self.failure: BaseException | None = None  # the latest, whether the job restarted or not

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
        self, restarts: Restarts, completed_checkpoints: int, metrics: list[dict[str, Any]]
    ) -> JobExecutionResult:
        """The outcome; raises :class:`JobExecutionError` for a failed job."""
        if self.status is JobStatus.FAILED:
            raise self.failure_error(restarts)
        end = self.ended if self.ended is not None else self._clock()
        return JobExecutionResult(
            self._job, self.status, end - self.started, restarts.count, completed_checkpoints, metrics
        )

    def failure_error(self, restarts: Restarts) -> JobExecutionError:
        cause = self.failure
        allowed = restarts.backoff.strategy.allowance()
        err = JobExecutionError(
            f"job '{self._job}' failed after {restarts.count} restart(s) ({allowed}): {cause}", cause=cause
        )
        err.__cause__ = cause
        return err

"""The checkpoints and savepoints of a running job, from trigger to completion or
abort: the job master's room for them. :class:`CheckpointCoordinator` keeps the
books (plans, acks, ids, history); this room carries them out: it snapshots the
operator coordinators, sends the triggers, has the storage thread write the
metadata, notifies the tasks, and answers who waits for a savepoint.

What it cannot settle itself it hands back: a failure goes to ``fail`` (the job
master handles it after the current letter); what becomes of a stop's or
rescale's savepoint goes to the stop's room (:class:`StopProtocol`), which alone
knows the stop: this room only asks it whether the stop waits for a checkpoint.
A completed checkpoint that committed joins the :class:`RestorePoints` the job
restarts from. A checkpoint names the latest completed one as its base, on which
tasks may write only their changes; :class:`SharedFiles` counts who names which
task file, and the files no kept checkpoint names are deleted.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Protocol

from weir.runtime import faults
from weir.runtime.checkpointing import (
    NOT_FAILURES,
    STORAGE_FAILURES,
    AckResult,
    CheckpointCoordinator,
    PendingCheckpoint,
    TaskKey,
    plan_checkpoint,
    task_name,
)
from weir.runtime.coordinators import OperatorCoordinators
from weir.runtime.deployment import DeployedTasks
from weir.runtime.errors import (
    CheckpointDeclinedError,
    CheckpointFailureReason,
    CheckpointStorageError,
    FencedError,
    JobRequestError,
    TooManyCheckpointFailuresError,
    WeirError,
)
from weir.runtime.events import CheckpointBarrier, CheckpointKind
from weir.runtime.graph import JobGraph
from weir.runtime.letters import (
    Ack,
    Decline,
    Fenced,
    MasterLetter,
    MetadataWritten,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    Request,
    RescaleJob,
    StopJob,
    TriggerCheckpoint,
    TriggerSavepoint,
)
from weir.runtime.off_loop import OffLoopThread, Work
from weir.runtime.restore import RestorePoints, StartingPoint
from weir.runtime.shared_state import SharedFiles
from weir.runtime.stopping import RESCALE_WAIT_S, Answer, StopOutcome, StopProtocol
from weir.runtime.storage import (
    CheckpointStorage,
    handle_to_json,
    parent,
    prepare_location,
    savepoint_location,
    shared_folder,
    within,
    write_metadata,
    write_state,
)

log = logging.getLogger("weir.jobmaster")


class Fail(Protocol):
    def __call__(self, error: BaseException, restartable: bool = True, count: bool = True) -> None: ...


class CheckpointFlow:
    """``tasks`` are the deployed tasks, who get its letters; ``stop`` is the stop's room, told
    what becomes of a stop's savepoint; ``storage_io`` runs writes and deletes
    off the loop, and ``post`` brings their answers back as letters."""

    def __init__(
        self,
        graph: JobGraph,
        tasks: DeployedTasks,
        coordinators: OperatorCoordinators,
        stop: StopProtocol,
        storage: CheckpointStorage,
        storage_io: Callable[[Work], None],
        clock: Callable[[], float],
        fail: Fail,
        post: Callable[[MasterLetter], None],
    ) -> None:
        self.coordinator = CheckpointCoordinator(graph)
        self._tasks, self._coordinators, self._stop, self._storage = tasks, coordinators, stop, storage
        self.storage_io, self._clock, self._fail, self._post = storage_io, clock, fail, post
        self.requests: dict[int, Request] = {}  # savepoint id -> who waits for it
        self.final: int | None = None  # the final checkpoint, once every source has ended
        self.restore = RestorePoints()
        self.shared = SharedFiles(shared_folder(storage.location(0)))

    def start_from(self, start: StartingPoint) -> None:
        """The points the job may restore from; the run's own checkpoints among
        them keep their shared files. A job master that took the run over keeps
        its predecessor's checkpoints under the same retention rule as its own,
        and deletes what no complete one names: folders that never completed, and
        shared files of checkpoints that never completed."""
        if start.next_checkpoint_id is not None:
            self.coordinator.continue_from(start.next_checkpoint_id)
        self.restore = RestorePoints(start.points)
        for location, metadata in start.points:
            if metadata.get("kind") != CheckpointKind.CHECKPOINT.value:
                continue
            self.shared.completed(metadata["checkpoint_id"], metadata)
            if within(location, self._storage.root):
                self.coordinator.recovered(location, metadata)
        free = self._retain()
        for location in start.incomplete:
            self._io(functools.partial(self._storage.discard, location))
        self._delete(free + self.shared.unnamed(start.shared))

    @property
    def graph(self) -> JobGraph:
        return self.coordinator.graph

    def deploying(self, now: float) -> None:
        """Tasks are being deployed, the job's or a failed-over region's: the
        final checkpoint, if any, is theirs to take again. The first checkpoint
        comes one interval after the first deploy, as in Flink."""
        self.final = None
        self.coordinator.first_due_after(now)

    def rescaled_to(self, graph: JobGraph) -> None:
        """The job redeploys as ``graph``: its checkpoints from now on are of it."""
        self.coordinator.rescaled(graph)

    # ------------------------------------------------------------ triggering
    def tick(self, now: float, may_trigger: bool) -> None:
        """Abort what timed out; trigger what is due (``may_trigger``: the job runs
        with every task deployed). Once every source has ended, the final
        checkpoint goes at once, not at the next interval (after a failed one, once
        its backoff passed); after it completed the tasks exit and need no other."""
        self._abort_expired(now)
        if not may_trigger:
            return
        if self._tasks.sources_ended(self.graph):
            if self.final is None and not self.coordinator.pending and self.coordinator.may_retry(now):
                self.final = self.trigger(now)
        elif self.coordinator.due(now):
            self.trigger(now)

    def trigger(
        self,
        now: float,
        location: str | None = None,
        kind: CheckpointKind = CheckpointKind.CHECKPOINT,
        stop_drain: bool | None = None,
    ) -> int | None:
        """Start a checkpoint (or a savepoint into ``location``; ``stop_drain``: one
        that stops the sources); None: no task is left to snapshot, or a coordinator failed."""
        plan = plan_checkpoint(self.graph, self._tasks.exited)
        if not plan.to_ack:
            return None
        base = self.shared.latest if kind is CheckpointKind.CHECKPOINT else None
        pending = self.coordinator.start(plan, now, lambda cid: location or self._storage.location(cid), kind, base)
        self.shared.build_on(base)
        cid = pending.checkpoint_id
        states = self._coordinators.snapshot(cid, plan.to_ack)  # before any task's
        if states is None:
            return None  # a coordinator failed, and so does the job
        pending.coordinator_states.update(states)
        barrier = CheckpointBarrier(cid, pending.timestamp_ms, kind, pending.location, base)
        self._coordinators.trigger(
            barrier,
            [
                (key, TriggerCheckpoint(barrier, stop_drain if self.graph.vertices[key[0]].is_source else None))
                for key in plan.to_trigger
            ],
        )
        return cid

    def savepoint_requested(self, now: float, letter: TriggerSavepoint | StopJob) -> bool:
        """A client asked for a savepoint into a fresh folder under its location
        (None: under the job's default savepoint folder), or for a stop with one
        (None: a final retained checkpoint); True: a stop has started. The request
        hears the savepoint's location once it completed."""
        request, stop = letter.request, isinstance(letter, StopJob)
        # Without a path, a savepoint goes to the job's default savepoint folder (a
        # retained checkpoint would be discarded by the next completion); a stop
        # takes a final retained checkpoint, which nothing discards once the job ended.
        target = letter.location if letter.location is not None or stop else self._storage.savepoints
        try:
            folder = savepoint_location(prepare_location(target), self.graph.run_id) if target is not None else None
        except WeirError as exc:  # a location that cannot be written
            request.reply(error=exc)
            return False
        kind = CheckpointKind.SAVEPOINT if folder is not None else CheckpointKind.CHECKPOINT
        cid = self.trigger(now, folder, kind, letter.drain if isinstance(letter, StopJob) else None)
        if cid is None:
            Answer(request, StopOutcome.NOT_STARTED, detail=self._not_started()).deliver(self.graph.name)
        elif isinstance(letter, StopJob):
            self._stop.stop_started(cid, letter.drain, self.coordinator.pending[cid].location, request)
        else:
            self.requests[cid] = request
        return cid is not None and stop

    def rescale_requested(self, now: float, letter: RescaleJob) -> bool:
        """A rescale to the letter's parallelism: it waits for its new tasks' slots
        (at most ``RESCALE_WAIT_S``), then stops the job for the redeploy; True:
        that stop has started."""
        try:
            graph = self.graph.rescaled(letter.parallelism)
        except WeirError as exc:
            letter.request.reply(error=exc)
            return False
        refused = self._stop.rescale_requested(letter.request, graph, now + RESCALE_WAIT_S)
        if refused is not None:
            refused.deliver(self.graph.name)
            return False
        return self.rescale_when_ready(now)

    def rescale_when_ready(self, now: float) -> bool:
        """Once the waiting rescale's slots are up, or its wait is over, stop the
        job without drain into a retained checkpoint, from which it redeploys
        rescaled; True: the stop has started."""
        if not self._stop.rescale_ready(now, self._tasks.reserve):
            return False
        cid = self.trigger(now, None, CheckpointKind.CHECKPOINT, stop_drain=False)
        if cid is None:
            self._stop.rescale_not_started(self._not_started()).deliver(self.graph.name)
            return False
        self._stop.rescale_stop_started(cid, self.coordinator.pending[cid].location, now)
        return True

    def _not_started(self) -> str:
        """Why :meth:`trigger` started nothing."""
        return (
            "its tasks have finished"
            if self._tasks.all_exited(self.graph)
            else "an operator coordinator failed, and the job fails over"
        )

    def _abort_expired(self, now: float) -> None:
        for cid in self.coordinator.expired(now):
            # Name who held it up: a task stuck in a user function never acknowledges.
            pending = self.coordinator.pending[cid]
            late = sorted(pending.not_yet_acknowledged)
            names = ", ".join(f"{task_name(k)} ({self.graph.vertices[k[0]].name})" for k in late[:5])
            self.abort(
                cid,
                CheckpointFailureReason.TIMEOUT,
                f"not acknowledged by {names}{' and more' if len(late) > 5 else ''}"
                if late
                else f"every task acknowledged it, but its metadata was still being written to {pending.location}",
            )

    # ------------------------------------------------------------ completing
    def on_decline(self, decline: Decline) -> None:
        self._coordinators.subtask_checkpointed(decline.task, decline.checkpoint_id)
        detail = f"{task_name(decline.task)}: {decline.detail}" if decline.detail else task_name(decline.task)
        self.abort(decline.checkpoint_id, decline.reason, detail)

    def on_ack(self, ack: Ack) -> None:
        self._coordinators.subtask_checkpointed(ack.task, ack.checkpoint_id)
        result = self.coordinator.acknowledge(
            ack.checkpoint_id, ack.task, ack.handle, ack.operators, self._clock(), ack.alignment_ms
        )
        if result in (AckResult.UNKNOWN, AckResult.DISCARDED):
            self._delete(self.shared.unreferenced([ack.handle]))  # written for a checkpoint already aborted
        if result is AckResult.SUCCESS and self.coordinator.is_complete(ack.checkpoint_id):
            self._complete(ack.checkpoint_id)
        elif result is AckResult.SUCCESS:
            faults.point("checkpoint-half-acknowledged")

    def _complete(self, checkpoint_id: int) -> None:
        """Every task acknowledged: the storage thread writes the coordinators'
        state and the metadata, and the checkpoint completes when it reports back."""
        union = self.coordinator.union_state_partially_finished(checkpoint_id, self._tasks.exited)
        if union is not None:
            self.abort(checkpoint_id, CheckpointFailureReason.UNION_STATE_PARTIALLY_FINISHED, f"operator '{union}'")
            return
        metadata = self.coordinator.metadata(checkpoint_id, self._tasks.exited, self._stop.stops_at(checkpoint_id))
        pending = self.coordinator.pending[checkpoint_id]
        self._io(
            functools.partial(
                _write,
                self._storage,
                pending.location,
                metadata,
                dict(pending.coordinator_states),
                checkpoint_id,
                self._post,
            )
        )

    def on_metadata_written(self, letter: MetadataWritten) -> float | None:
        """A checkpoint's metadata is on storage (or failed to be written); returns
        when a checkpoint that committed had started (the restart backoff resets
        on progress), else None."""
        checkpoint_id = letter.checkpoint_id
        if checkpoint_id not in self.coordinator.pending:
            return (
                None  # aborted while it was written (timed out, a failover): its location is discarded after the write
            )
        if letter.error is not None:
            self.abort(checkpoint_id, CheckpointFailureReason.STORAGE_FAILURE, letter.error)
            return None
        location = self.coordinator.pending[checkpoint_id].location
        pending = self.coordinator.complete(checkpoint_id, self._clock())
        stops = self._stop.stops_at(checkpoint_id)
        if stops:
            self._stop.savepoint_completed()
        # A savepoint commits no side effects (Flink >= 1.15, FLINK-25191): what its
        # sinks pre-committed is committed by the next checkpoint, and recovery,
        # which knows only checkpoints, never restores to before something committed.
        # A stop's savepoint commits: nothing runs after it.
        commits = pending.kind is CheckpointKind.CHECKPOINT or stops
        self._coordinators.checkpoint_ended(checkpoint_id, committed=commits)
        for key in pending.plan.to_ack if commits else ():
            if key not in self._tasks.exited:
                self._tasks.send(key, NotifyCheckpointComplete(checkpoint_id))
        request = self.requests.pop(checkpoint_id, None)
        if request is not None:
            request.reply(location)
        if commits:
            self.restore.completed(location, letter.metadata)
        if pending.kind is CheckpointKind.CHECKPOINT:
            self.shared.completed(checkpoint_id, letter.metadata)
        self._delete(self.shared.built(pending.base) + self._retain())
        return pending.started if commits else None

    def _retain(self) -> list[str]:
        """Discard the completed checkpoints beyond the newest ``retained``; returns
        the shared files no kept checkpoint names any more, for :meth:`_delete`."""
        discarded = self.coordinator.discard_beyond(self.graph.checkpointing.retained)
        for _, old in discarded:
            self._io(functools.partial(self._storage.discard, old))
        self.restore.discarded([old for _, old in discarded])
        return self.shared.discarded(cid for cid, _ in discarded)

    def _delete(self, files: list[str]) -> None:
        if files:
            self._io(functools.partial(self._storage.delete, files))

    def _io(self, work: Work) -> None:
        """Storage work off the loop. A job master that was taken over finds out
        there, writes nothing, and stands down (a :class:`Fenced` letter)."""

        def fenced() -> None:
            try:
                work()
            except FencedError as exc:
                self._post(Fenced(exc))

        self.storage_io(fenced)

    # ------------------------------------------------------------ aborting
    def abort_all(self, reason: CheckpointFailureReason, detail: str) -> None:
        for cid in list(self.coordinator.pending):
            self.abort(cid, reason, detail)

    def task_finished(self, task: TaskKey) -> None:
        """``task`` finished: checkpoints still waiting for its acknowledgement never get it."""
        for cid in self.coordinator.waiting_on(task):
            self.abort(cid, CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK, task_name(task))

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str = "") -> None:
        pending = self.coordinator.abort(checkpoint_id, reason, self._clock(), detail)
        if pending is None:
            return
        self._log_abort(checkpoint_id, reason, detail)
        self._io(functools.partial(self._storage.discard, pending.location))
        written = [handle for handle, _ in pending.acks.values()]
        self._delete(self.shared.built(pending.base) + self.shared.unreferenced(written))
        self._coordinators.checkpoint_ended(checkpoint_id, committed=False)
        if checkpoint_id == self.final:
            self.final = None  # try again
        for key in pending.plan.to_ack:
            if key not in self._tasks.exited:
                self._tasks.send(key, NotifyCheckpointAborted(checkpoint_id))
        request = self.requests.pop(checkpoint_id, None)
        if reason is CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK and self._retried(pending, request):
            return
        error = CheckpointDeclinedError(checkpoint_id, reason, detail)
        if request is not None:
            request.reply(error=error)
        if self._stop.stops_at(checkpoint_id):
            # The sources have stopped already: go back to the latest checkpoint and
            # keep running; the stop request fails with the reason.
            self._stop.savepoint_failed(error).deliver(self.graph.name)
            self._fail(error, count=False)
        too_many = self.coordinator.failures.beyond(self.graph.checkpointing.tolerable_failures)
        if too_many is not None:
            last = f"{too_many}; last: {reason.message} ({detail})"
            storage = reason in STORAGE_FAILURES
            self._fail(
                CheckpointStorageError(self._storage.root, f"cannot be written: {last}")
                if storage
                else TooManyCheckpointFailuresError(last),
                restartable=False,
            )

    def _log_abort(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None:
        if reason in NOT_FAILURES:
            log.info("checkpoint %d of %s aborted: %s %s", checkpoint_id, self.graph.name, reason.message, detail)
            return
        failures = self.coordinator.failures
        log.warning(
            "checkpoint %d of %s failed (%d in a row; the next begins in %.1fs at the earliest): %s %s",
            checkpoint_id,
            self.graph.name,
            failures.failed,
            max(0.0, failures.retry_at - self._clock()),
            reason.message,
            detail,
        )

    def _retried(self, pending: PendingCheckpoint, request: Request | None) -> bool:
        """A savepoint or stop whose ``pending`` snapshot was aborted because a task
        exited between the plan and its trigger is triggered again (the next plan
        knows it); False: there was none, or no task is left to snapshot. A
        savepoint is retried in a fresh folder beside the aborted one: that one's
        discard runs on the I/O thread, maybe after the retry wrote."""
        stop_drain = self._stop.stop_drain(pending.checkpoint_id)
        if request is None and stop_drain is None:
            return False
        retry = self.trigger(
            self._clock(),
            savepoint_location(parent(pending.location), self.graph.run_id)
            if pending.kind is CheckpointKind.SAVEPOINT
            else None,
            pending.kind,
            stop_drain,
        )
        if retry is None:
            return False
        if request is not None:
            self.requests[retry] = request
        if stop_drain is not None:
            self._stop.savepoint_retried(retry, self.coordinator.pending[retry].location)
        return True

    def close(self) -> None:
        if isinstance(self.storage_io, OffLoopThread):
            self.storage_io.close()

    def job_ended(self, status: str) -> None:
        """Savepoints still waiting fail: the job ended ``status`` first."""
        for request in self.requests.values():
            request.reply(
                error=JobRequestError(f"job '{self.graph.name}' ended {status} before the savepoint completed")
            )
        self.requests.clear()


def _write(
    storage: CheckpointStorage,
    location: str,
    metadata: dict[str, Any],
    states: dict[str, bytes],
    checkpoint_id: int,
    post: Callable[[MasterLetter], None],
) -> None:
    """On the storage thread: write a checkpoint's coordinator states and its
    metadata (which completes it on storage), and tell the loop how it went. A
    job master that was taken over writes nothing (:class:`FencedError`): the
    checkpoint stays pending until the job master stands down."""
    error = None
    try:
        storage.check_fence()
        metadata["coordinators"] = {
            uid: handle_to_json(write_state(location, f"coordinator-{uid}", payload)) for uid, payload in states.items()
        }
        faults.point("checkpoint-before-metadata")
        write_metadata(location, metadata)
    except FencedError:
        raise
    except Exception as exc:
        error = str(exc) or type(exc).__name__
    post(MetadataWritten(checkpoint_id, metadata, error))

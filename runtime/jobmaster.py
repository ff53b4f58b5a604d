"""The job master: deploys a job's tasks, runs its checkpoints and savepoints,
restarts it on failure, stops and ends it. It runs on one loop thread fed by a
mailbox of letters (acks, declines, end-of-input reports, and client requests);
the tasks are reached through a :class:`TaskGateway`, which the Ray executor
implements with actors and the in-process executor with threads.

Stop (FLIP-34/45): a savepoint whose trigger tells the sources to stop. With
drain they end their input as if it ran out (MAX_WATERMARK, ``finish``,
``EndOfData(drain=True)``) and the job ends FINISHED once the savepoint completed;
without drain they only send ``EndOfData(drain=False)``, nothing is flushed,
and the job ends SUSPENDED, resumable from the savepoint as if never stopped.
If that savepoint fails, the job restarts from its latest checkpoint and keeps
running, and the stop request fails with the reason.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import random
import threading
import time
import uuid
from typing import Any, Callable

from weir.runtime import faults
from weir.runtime.checkpointing import (
    NOT_FAILURES,
    STORAGE_FAILURES,
    AckResult,
    CheckpointCoordinator,
    PendingCheckpoint,
    TaskKey,
    plan_checkpoint,
    restore_plan,
    task_name,
)
from weir.runtime.config import restart_strategy_for
from weir.runtime.coordination import AsyncCall, CoordinatorHolder
from weir.runtime.deployment import TaskGateway, plan_deployments
from weir.runtime.errors import (
    CheckpointStorageError,
    CheckpointDeclinedError,
    CheckpointFailureReason,
    CorruptCheckpointError,
    JobCancelledError,
    JobExecutionError,
    JobStatusError,
    UserFunctionError,
    WeirError,
)
from weir.runtime.events import CheckpointBarrier, CheckpointKind
from weir.runtime.executor import JobExecutionResult, JobStatus
from weir.runtime.failover import (
    Failover,
    FailoverAction,
    coordinator_resets,
    decide_failover,
    due_regions,
    fall_back,
    region_of,
)
from weir.runtime.graph import JobGraph
from weir.runtime.letters import (
    Ack,
    AskLetter,
    CancelJob,
    CoordinatorCallDone,
    Decline,
    EndOfInput,
    EventAcknowledged,
    EventFromOperator,
    MetadataWritten,
    RescaleJob,
    Request,
    StopJob,
    TriggerSavepoint,
)
from weir.runtime.mailbox import Mailbox, MailboxClosedError
from weir.runtime.restarts import RestartBackoff
from weir.runtime.stopping import AfterLastTask, Answer, StopOutcome, StopProtocol
from weir.runtime.storage import (
    CheckpointStorage,
    discard,
    find_restore_point,
    handle_from_json,
    handle_to_json,
    parent,
    pickle_state,
    prepare_location,
    read_metadata,
    read_state,
    savepoint_location,
    write_metadata,
    write_state,
)
from weir.runtime.storage_thread import StorageThread
from weir.runtime.task import (
    Cancel,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorEvent,
    TaskResult,
    TaskState,
    TriggerCheckpoint,
)

log = logging.getLogger("weir.jobmaster")


class JobMaster:
    TICK_S = 0.05  # how soon a task's exit (polled from the gateway) is seen; executors may set their own
    # A rescale lets the job run on this long while the processes of its new tasks
    # start; then it stops the job anyway, and the deploy waits for them (a cluster
    # short of CPUs may take long to make room, and a bounded job may end first).
    RESCALE_WAIT_S = 5.0
    CANCEL_TIMEOUT_S = 10.0  # tasks that do not close by then (a blocked user function) are killed

    def __init__(
        self, graph: JobGraph, gateway: TaskGateway, clock: Callable[[], float] = time.monotonic, recovering: bool = False,
        event_valve: bool = True, first_attempt: int = 0, on_end: Callable[[JobStatus], None] | None = None,
        tick_s: float = TICK_S, storage_io: Callable[[Callable[[], None]], None] | None = None,
        coordinator_io: Callable[[Callable[[], None]], None] | None = None, restart_jitter: random.Random | None = None,
    ) -> None:
        """``recovering``: this job master replaces one that died; it picks the job
        up from the latest completed checkpoint in storage. ``event_valve=False``
        switches off the FLINK-16986 protection of operator coordinators (tests
        only: it shows what the valve prevents). ``first_attempt``: attempts are
        numbered after it (a coordinator taking a job over starts above its predecessor's).
        ``on_end``: records the job's end where a restarted job master would look,
        before the end is reported to anyone (an ended job never runs again).
        ``tick_s``: the longest the loop waits for a letter before it polls the
        gateway for task exits. ``storage_io``: runs checkpoint storage writes and
        deletes (default: a :class:`StorageThread`; :func:`inline` for tests).
        ``coordinator_io``: runs operator coordinators' async calls (default: a
        small thread pool; :func:`inline` for tests). ``restart_jitter``: draws
        where each restart delay falls in its jitter band (a seeded one replays)."""
        self.recovering = recovering
        self.event_valve = event_valve
        self.graph = graph
        self.gateway = gateway
        self.clock = clock
        self.mailbox = Mailbox(0)
        self.status = JobStatus.CREATED
        self.coordinator = CheckpointCoordinator(graph)
        self.storage = CheckpointStorage(graph.checkpointing.storage, graph.name, graph.run_id)
        self.attempt = first_attempt
        self.restarts = 0  # every restart, a region's included
        self._backoff = RestartBackoff(restart_strategy_for(graph.execution.restart_strategy, graph.checkpointing.enabled))
        self._jitter = restart_jitter or random.Random()
        self.failure: BaseException | None = None
        self.started = clock()
        self.ended: float | None = None
        self._restart_at: float | None = None
        self._cancel_requested: float | None = None
        self._exited: set[TaskKey] = set()
        self._ended_input: set[TaskKey] = set()
        self._final_checkpoint: int | None = None
        # Complete checkpoints and savepoints to restore from, oldest first, as
        # (location, metadata): the latest is used; a damaged one falls back.
        self._restore_points: list[tuple[str, dict[str, Any]]] = []
        self._requests: dict[int, Request] = {}  # savepoint id -> who waits for it
        self._stop = StopProtocol()  # a stop, drained stop or rescale in progress
        self._coordinators: dict[str, tuple[str, CoordinatorHolder]] = {}  # operator uid -> (vertex id, holder), this deployment's
        self._held_triggers: dict[int, tuple[CheckpointBarrier, bool | None, list[TaskKey]]] = {}  # until events settle
        self._task_attempts: dict[TaskKey, int] = {}  # the attempt each task's letters must carry
        self._killed: set[TaskKey] = set()  # killed while this tick's exits are handled
        self._regions: list[frozenset[TaskKey]] = []  # pipelined regions of the deployed graph
        self._restarting: dict[frozenset[TaskKey], float] = {}  # regions failed over -> when to redeploy
        self._done = threading.Event()
        self._on_end = on_end
        self._tick_s = tick_s
        self.final_metrics: list[dict[str, Any]] = []
        self._storage_io = storage_io or StorageThread(graph.name)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._coordinator_io = coordinator_io or self._in_pool

    # ------------------------------------------------------------ the loop
    def run(self) -> None:
        try:
            self.start()
            while not self.status.is_terminal:
                letter = self.mailbox.take(self._tick_s)
                if letter is not None:
                    self._handle(letter)
                self._tick()
        except WeirError as exc:  # e.g. a savepoint that does not fit the job
            self._fail_now(exc)
        except BaseException as exc:  # a bug in weir itself: fail the job loudly
            log.exception("job master of %s failed", self.graph.name)
            self._fail_now(exc)
        finally:
            try:
                self.final_metrics = self.gateway.metrics()
            except Exception:
                log.warning("could not collect the final metrics of %s", self.graph.name)
            self.gateway.kill_all()
            if isinstance(self._storage_io, StorageThread):
                self._storage_io.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)  # a call blocked on a broker ends on its own
            if self._on_end is not None:
                try:
                    self._on_end(self.status)
                except Exception as exc:  # the pool unreachable: clients must still hear the end
                    log.error("could not record the end (%s) of job '%s': %s", self.status.value, self.graph.name, exc)
            self._refuse_leftover_requests()
            self._done.set()

    def _fail_now(self, error: BaseException) -> None:
        if not self.status.is_terminal:
            self.failure = error
            self._end(JobStatus.FAILED)

    def _become(self, status: JobStatus) -> None:
        """Change the job's status along :data:`weir.runtime.executor._NEXT`; any other
        change is a bug in weir, refused before anything changes."""
        if not self.status.can_become(status):
            raise JobStatusError(f"job '{self.graph.name}': {self.status.value} cannot become {status.value}")
        self.status = status

    def start(self) -> None:
        """Restore (or recover) and deploy the first attempt; ``run`` does this first.
        A recovering job master whose run had ended (its result is in storage)
        deploys nothing: an ended job never runs again."""
        if not self.recovering:
            self.storage.mark_started()
        self._recover_or_restore()
        if not self.status.is_terminal:
            self._deploy()

    def run_until_idle(self) -> None:
        """Harness mode (a test drives the job master by hand, after ``start``):
        handle the letters already in the mailbox, then one tick."""
        while (letter := self.mailbox.take(0)) is not None:
            self._handle(letter)
        self._tick()

    def cancel(self) -> None:
        """Ask the job to cancel (any thread); nothing to do once it has ended."""
        self.gateway.stop_deploying()  # the loop may be waiting in one
        try:
            self.mailbox.put_control(CancelJob())
        except MailboxClosedError:
            pass

    def ask(self, letter: AskLetter, timeout_s: float) -> Any:
        """Send a savepoint, stop or rescale request and wait for its answer (any thread)."""
        try:
            self.mailbox.put_control(letter)
        except MailboxClosedError:
            self._refuse(letter.request)
        return letter.request.wait(timeout_s)

    def _refuse(self, request: Request) -> None:
        request.reply(error=WeirError(f"job '{self.graph.name}' is {self.status.value}: no savepoint or stop now"))

    def _refuse_leftover_requests(self) -> None:
        self.mailbox.close()
        while True:
            try:
                letter = self.mailbox.take(0)
            except MailboxClosedError:
                return
            if letter is None:
                return
            if isinstance(letter, (TriggerSavepoint, StopJob, RescaleJob)):
                self._refuse(letter.request)

    def _recover_or_restore(self) -> None:
        """Where the job starts: after a job master's death, its latest completed
        checkpoint (never a half-written one: those have no metadata), with new
        checkpoint ids after every folder there; else the savepoint it was given."""
        if self.recovering:
            result = self.storage.recorded_result()
            if result is not None:
                log.warning("job %s had ended %s before its job master restarted; it is not run again", self.graph.name, result["status"])
                self._become(JobStatus(result["status"]))
                self.ended = self.clock()
                if self.status is JobStatus.FAILED:
                    self.failure = WeirError(result["detail"])
                return
            if not self.storage.started():
                raise CheckpointStorageError(
                    self.storage.root,
                    "holds no trace of this run, which had started: is it the storage the job wrote to, reachable from "
                    "this node? (the default local storage is not shared between nodes; use s3://, hdfs:// or a shared mount)",
                )
            self.coordinator.next_id = max(self.storage.checkpoint_ids(completed_only=False), default=0) + 1
            done = self.storage.checkpoint_ids()
            for cid in done:
                location = self.storage.location(cid)
                try:
                    self._restore_points.append((location, read_metadata(location)))
                except CorruptCheckpointError as exc:
                    log.warning("job %s: skipping damaged checkpoint %d: %s", self.graph.name, cid, exc)
            if self._restore_points:
                log.warning("job %s: job master restarted; recovering from %s", self.graph.name, self._restore_points[-1][0])
                return
            if done:
                raise WeirError(
                    f"job '{self.graph.name}' cannot recover: every checkpoint in {self.storage.root} is damaged "
                    "(see the warnings); not starting from scratch, which would silently drop its state"
                )
        restore = self.graph.execution.restore_from
        if restore is not None:
            restore = find_restore_point(restore)
            self._restore_points.append((restore, read_metadata(restore)))
            restore_plan(self._restore_points[-1][1], self.graph, self.graph.execution.allow_non_restored_state)  # fail fast

    @property
    def _latest(self) -> dict[str, Any] | None:
        return self._restore_points[-1][1] if self._restore_points else None

    def _fall_back(self, error: CorruptCheckpointError) -> None:
        """The checkpoint being restored is damaged: restart from the one before it
        (see :func:`fall_back`)."""
        if self.status is JobStatus.RESTARTING or self.status.is_terminal:
            return
        decision = fall_back(self._restore_points, error, self.graph.name)
        self._restore_points = decision.restore_points
        if decision.restartable:
            log.warning("job %s: %s; falling back to %s (records after it are processed again: "
                        "sinks that committed the damaged checkpoint may see them twice)", self.graph.name, error, self._restore_points[-1][0])
        self._fail(decision.error, restartable=decision.restartable)

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    def result(self) -> JobExecutionResult:
        """The outcome; raises :class:`JobExecutionError` for a failed job."""
        if self.status is JobStatus.FAILED:
            raise self.failure_error()
        end = self.ended if self.ended is not None else self.clock()
        completed = self.coordinator.completed
        return JobExecutionResult(self.graph.name, self.status, end - self.started, self.restarts, completed, self.final_metrics)

    def failure_error(self) -> JobExecutionError:
        cause = self.failure
        allowed = self._backoff.strategy.allowance()
        err = JobExecutionError(
            f"job '{self.graph.name}' failed after {self.restarts} restart(s) ({allowed}): {cause}",
            cause=cause,
        )
        err.__cause__ = cause
        return err

    # ------------------------------------------------------------ letters
    def _handle(self, letter: Any) -> None:
        if isinstance(letter, CancelJob):
            self._cancel()
            return
        if isinstance(letter, (TriggerSavepoint, StopJob)):
            self._on_savepoint_request(letter)
            return
        if isinstance(letter, RescaleJob):
            self._on_rescale(letter)
            return
        if isinstance(letter, MetadataWritten):
            self._on_metadata_written(letter)
            return
        if isinstance(letter, CoordinatorCallDone):
            if any(holder is letter.holder for _, holder in self._coordinators.values()):  # else: from a closed one
                self._coordinator_call(letter.holder, "async call", letter.holder.call_done, letter.call, letter.result, letter.error, self.clock())
            return
        if letter.attempt != self._task_attempts.get(letter.task):
            return  # from a previous attempt of its task
        if isinstance(letter, Ack):
            self._on_ack(letter)
        elif isinstance(letter, Decline):
            self._on_subtask_checkpointed(letter.task, letter.checkpoint_id)
            self._abort(letter.checkpoint_id, letter.reason, f"{task_name(letter.task)}: {letter.detail}" if letter.detail else task_name(letter.task))
        elif isinstance(letter, EndOfInput):
            self._ended_input.add(letter.task)
        elif isinstance(letter, EventFromOperator):
            if letter.operator_uid in self._coordinators:
                _, holder = self._coordinators[letter.operator_uid]
                self._coordinator_call(holder, "handle_event", holder.handle_event, letter.task[1], letter.event)
        elif isinstance(letter, EventAcknowledged):
            if letter.operator_uid in self._coordinators:
                self._coordinators[letter.operator_uid][1].on_event_acknowledged(letter.task[1], letter.event_id)
            self._release_triggers()

    def _tick(self) -> None:
        now = self.clock()
        self._killed = set()
        for key, result in self.gateway.poll_exits():
            # An earlier exit of this batch may have failed the job (or a region)
            # over: the tasks it killed report nothing more, as the gateway promises.
            if key not in self._killed:
                self._on_exit(key, result)
        if self.status is JobStatus.RESTARTING and self._restart_at is not None and now >= self._restart_at:
            self._deploy()
        for region in due_regions(self._restarting, now):
            if self.status is JobStatus.RUNNING:
                self._deploy(region)
        if self.status is JobStatus.CANCELLING and self._cancel_requested is not None and now - self._cancel_requested > self.CANCEL_TIMEOUT_S:
            log.warning("job %s: tasks did not close within %.0fs of cancel; killing them", self.graph.name, self.CANCEL_TIMEOUT_S)
            self._end(JobStatus.CANCELED)
        if self.status not in (JobStatus.RUNNING, JobStatus.STOPPING):
            return
        self._rescale_when_ready(now)
        for _, holder in list(self._coordinators.values()):
            for call in holder.due_calls(now):
                self._coordinator_io(functools.partial(self._run_async_call, holder, call))
        for cid in self.coordinator.expired(now):
            # Name who held it up: a task stuck in a user function never acknowledges.
            pending = self.coordinator.pending[cid]
            late = sorted(pending.not_yet_acknowledged)
            names = ", ".join(f"{task_name(k)} ({self.graph.vertices[k[0]].name})" for k in late[:5])
            self._abort(cid, CheckpointFailureReason.TIMEOUT, f"not acknowledged by {names}{' and more' if len(late) > 5 else ''}" if late
                        else f"every task acknowledged it, but its metadata was still being written to {pending.location}")
        if self.status is JobStatus.STOPPING or self._restarting:
            return  # the stop's savepoint is the last one; a region on its way back would decline
        if self._all_sources_ended():
            # The final checkpoint: at once, not at the next interval (after a
            # failed one, once its backoff passed); after it completed the tasks
            # are exiting and need no other.
            idle = self._final_checkpoint is None and not self.coordinator.pending
            if idle and self.coordinator.may_retry(now):
                self._final_checkpoint = self._trigger(now)
        elif self.coordinator.due(now):
            self._trigger(now)

    def _run_async_call(self, holder: CoordinatorHolder, call: AsyncCall) -> None:
        """Off the loop: a coordinator's call; its end goes back to the loop as a letter."""
        try:
            done = CoordinatorCallDone(holder, call, call.call(), None)
        except Exception as exc:
            done = CoordinatorCallDone(holder, call, None, exc)
        try:
            self.mailbox.put_control(done)
        except MailboxClosedError:
            pass  # the job ended meanwhile

    def _in_pool(self, work: Callable[[], None]) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix=f"coordinator-{self.graph.name}")
        self._pool.submit(work)

    def _all_sources_ended(self) -> bool:
        sources = [(v.id, i) for v in self.graph.sources for i in range(v.parallelism)]
        return all(k in self._ended_input or k in self._exited for k in sources)

    # ------------------------------------------------------------ checkpoints
    def _trigger(
        self, now: float, location: str | None = None, kind: CheckpointKind = CheckpointKind.CHECKPOINT, stop_drain: bool | None = None
    ) -> int | None:
        plan = plan_checkpoint(self.graph, self._exited)
        if not plan.to_ack:
            return None
        pending = self.coordinator.start(plan, now, lambda cid: location or self.storage.location(cid), kind)
        cid = pending.checkpoint_id
        # Coordinators first: their snapshot must be taken before any task's.
        for vid, holder in self._coordinators.values():
            subtasks = {i for v, i in plan.to_ack if v == vid}
            state = self._coordinator_call(holder, "snapshot_state", holder.snapshot, cid, subtasks)
            if self.status is JobStatus.RESTARTING:
                return None  # it failed, and so did the job
            pending.coordinator_states[holder.uid] = pickle_state(state, f"coordinator of '{holder.name}'")
        barrier = CheckpointBarrier(cid, pending.timestamp_ms, kind, pending.location)
        self._held_triggers[cid] = (barrier, stop_drain, plan.to_trigger)
        self._release_triggers()
        return cid

    def _release_triggers(self) -> None:
        """Trigger the tasks of a checkpoint once every event its coordinators sent
        before their snapshot was handled (FLINK-16986)."""
        for cid in sorted(self._held_triggers):
            if not all(holder.settled(cid) for _, holder in self._coordinators.values()):
                continue
            barrier, stop_drain, keys = self._held_triggers.pop(cid)
            for key in keys:
                source = self.graph.vertices[key[0]].is_source
                self.gateway.send(key, TriggerCheckpoint(barrier, stop_drain if source else None))

    def _coordinator_call(self, holder: CoordinatorHolder, what: str, call: Callable[..., Any], *args: Any) -> Any:
        """A call into a coordinator's code: its failure restarts the job like a
        failing task's would."""
        try:
            return call(*args)
        except Exception as exc:
            self._fail(UserFunctionError(holder.name, f"coordinator {what}", exc))
            return None

    def _on_subtask_checkpointed(self, task: TaskKey, checkpoint_id: int) -> None:
        for vid, holder in self._coordinators.values():
            if vid == task[0]:
                holder.on_subtask_checkpointed(task[1], checkpoint_id)

    def _start_coordinators(self, region: frozenset[TaskKey] | None = None) -> None:
        """Fresh coordinators, from the restored checkpoint's state: all of them for
        a new deployment, or those whose every subtask is in a redeployed ``region``."""
        if region is None:
            self._close_coordinators()
        saved = {} if self._latest is None else self._latest.get("coordinators", {})
        for v in self.graph.vertices.values():
            if region is not None and any((v.id, i) not in region for i in range(v.parallelism)):
                continue
            for spec in v.operators:
                if spec.make_coordinator is None:
                    continue
                try:
                    state = read_state(handle_from_json(saved[spec.uid])) if spec.uid in saved else None
                except CorruptCheckpointError as exc:
                    self._fall_back(exc)
                    return
                holder = CoordinatorHolder(spec.uid, spec.name, v.parallelism, spec.make_coordinator(), self._event_sender(v.id), self.event_valve)
                self._coordinators[spec.uid] = (v.id, holder)
                self._coordinator_call(holder, "start", holder.start, state)

    def _event_sender(self, vertex_id: str) -> Callable[[int, str, int, Any], None]:
        def send(subtask: int, uid: str, event_id: int, event: Any) -> None:
            self.gateway.send((vertex_id, subtask), OperatorEvent(uid, event_id, event))

        return send

    def _close_coordinators(self) -> None:
        coordinators, self._coordinators = self._coordinators, {}
        self._held_triggers.clear()
        for _, holder in coordinators.values():
            self._close_coordinator(holder)

    @staticmethod
    def _close_coordinator(holder: CoordinatorHolder) -> None:
        try:
            holder.close()
        except Exception:
            log.exception("closing the coordinator of %s failed", holder.name)

    def _refuse_while_restarting_a_region(self, request: Request) -> bool:
        if self._restarting:
            tasks = ", ".join(sorted(task_name(k) for r in self._restarting for k in r))
            request.reply(error=WeirError(
                f"job '{self.graph.name}' is restarting failed task(s) {tasks}; a snapshot needs every task running: try again in a moment"
            ))
        return bool(self._restarting)

    def _on_savepoint_request(self, letter: TriggerSavepoint | StopJob) -> None:
        request = letter.request
        if self.status is not JobStatus.RUNNING:
            self._refuse(request)
            return
        if self._refuse_while_restarting_a_region(request):
            return
        try:
            location = savepoint_location(prepare_location(letter.location), self.graph.run_id) if letter.location is not None else None
        except WeirError as exc:
            request.reply(error=exc)
            return
        kind = CheckpointKind.SAVEPOINT if location is not None else CheckpointKind.CHECKPOINT
        drain = letter.drain if isinstance(letter, StopJob) else None
        cid = self._trigger(self.clock(), location, kind, drain)
        if cid is None:
            self._deliver(Answer(request, StopOutcome.NOT_STARTED, detail=self.status.value))
        elif isinstance(letter, StopJob):
            self._stop.stop_started(cid, letter.drain, self.coordinator.pending[cid].location, request)
            self._become(JobStatus.STOPPING)
        else:
            self._requests[cid] = request

    def _on_rescale(self, letter: RescaleJob) -> None:
        if self.status is not JobStatus.RUNNING:
            self._refuse(letter.request)
            return
        if self._refuse_while_restarting_a_region(letter.request):
            return
        try:
            new_graph = self.graph.rescaled(letter.parallelism)
        except WeirError as exc:
            letter.request.reply(error=exc)
            return
        now = self.clock()
        self._deliver(self._stop.rescale_requested(letter.request, new_graph, now + self.RESCALE_WAIT_S))
        self._rescale_when_ready(now)

    def _rescale_when_ready(self, now: float) -> None:
        """Stop the job for the waiting rescale once its slots are up."""
        waiting = self._stop.waiting
        if waiting is None or self.status is not JobStatus.RUNNING or self._restarting:
            return
        if not self.gateway.reserve(waiting.graph) and now < waiting.deadline:
            return
        rescale = self._stop.slots_ready()
        cid = self._trigger(now, None, CheckpointKind.CHECKPOINT, stop_drain=False)
        if cid is None:
            self._deliver(rescale.not_started(self.status))
            return
        self._stop.rescale_stop_started(rescale, cid, self.coordinator.pending[cid].location, now)
        self._become(JobStatus.STOPPING)

    def _finish_rescale(self, graph: JobGraph) -> None:
        """Every task stopped at the rescale checkpoint: deploy the new graph from it."""
        self._kill()
        self.graph = self.coordinator.graph = graph
        self._deploy()
        answer = self._stop.redeployed(self.clock())
        log.info("job %s rescaled: %s; not processing for %.2fs", self.graph.name,
                 {v.id: v.parallelism for v in self.graph.vertices.values()}, answer.result)
        self._deliver(answer)

    def _deliver(self, answer: Answer | None) -> None:
        if answer is not None:
            answer.deliver(self.graph.name)

    def _on_ack(self, ack: Ack) -> None:
        self._on_subtask_checkpointed(ack.task, ack.checkpoint_id)
        result = self.coordinator.acknowledge(ack.checkpoint_id, ack.task, ack.handle, ack.operators)
        if result is AckResult.SUCCESS and self.coordinator.is_complete(ack.checkpoint_id):
            self._complete(ack.checkpoint_id)
        elif result is AckResult.SUCCESS:
            faults.point("checkpoint-half-acknowledged")

    def _complete(self, checkpoint_id: int) -> None:
        """Every task acknowledged: the storage thread writes the coordinators'
        state and the metadata, and the checkpoint completes when it reports back."""
        union = self.coordinator.union_state_partially_finished(checkpoint_id, self._exited)
        if union is not None:
            self._abort(checkpoint_id, CheckpointFailureReason.UNION_STATE_PARTIALLY_FINISHED, f"operator '{union}'")
            return
        metadata = self.coordinator.metadata(checkpoint_id, self._exited)
        pending = self.coordinator.pending[checkpoint_id]
        location, states, mailbox = pending.location, dict(pending.coordinator_states), self.mailbox

        def write() -> None:
            error = None
            try:
                metadata["coordinators"] = {uid: handle_to_json(write_state(location, f"coordinator-{uid}", payload)) for uid, payload in states.items()}
                faults.point("checkpoint-before-metadata")
                write_metadata(location, metadata)
            except Exception as exc:
                error = str(exc) or type(exc).__name__
            try:
                mailbox.put_control(MetadataWritten(checkpoint_id, metadata, error))
            except MailboxClosedError:
                pass  # the job ended meanwhile; its abort discards the location

        self._storage_io(write)

    def _on_metadata_written(self, letter: MetadataWritten) -> None:
        checkpoint_id, metadata = letter.checkpoint_id, letter.metadata
        if checkpoint_id not in self.coordinator.pending:
            return  # aborted while it was written (timed out, a failover): its location is discarded after the write
        if letter.error is not None:
            self._abort(checkpoint_id, CheckpointFailureReason.STORAGE_FAILURE, letter.error)
            return
        location = self.coordinator.pending[checkpoint_id].location
        pending = self.coordinator.complete(checkpoint_id, self.clock())
        # A savepoint commits no side effects (Flink >= 1.15, FLINK-25191): what its
        # sinks pre-committed is committed by the next checkpoint, and recovery,
        # which knows only checkpoints, never restores to before something committed.
        # A stop's savepoint commits: nothing runs after it.
        commits = pending.kind is CheckpointKind.CHECKPOINT or self._stop.stops_at(checkpoint_id)
        if commits:
            self._restore_points.append((location, metadata))
            self._backoff = self._backoff.checkpoint_completed(pending.started, self.clock())
        for _, holder in self._coordinators.values():
            self._coordinator_call(holder, "notify_checkpoint_complete", holder.on_checkpoint_ended, checkpoint_id, commits)
        for key in pending.plan.to_ack if commits else ():
            if key not in self._exited:
                self.gateway.send(key, NotifyCheckpointComplete(checkpoint_id))
        request = self._requests.pop(checkpoint_id, None)
        if request is not None:
            request.reply(location)
        self._discard_old_checkpoints()

    def _discard_old_checkpoints(self) -> None:
        """Keep the newest ``retained`` checkpoints (their deletes run on the storage thread)."""
        for location in self.coordinator.discard_beyond(self.graph.checkpointing.retained):
            self._storage_io(functools.partial(discard, location))
            self._restore_points = [p for p in self._restore_points if p[0] != location]

    def _abort(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str = "") -> None:
        pending = self.coordinator.abort(checkpoint_id, reason, self.clock(), detail)
        if pending is None:
            return
        if reason in NOT_FAILURES:
            log.info("checkpoint %d of %s aborted: %s %s", checkpoint_id, self.graph.name, reason.message, detail)
        else:
            failures = self.coordinator.failures
            log.warning(
                "checkpoint %d of %s failed (%d in a row; the next begins in %.1fs at the earliest): %s %s",
                checkpoint_id, self.graph.name, failures.failed, max(0.0, failures.retry_at - self.clock()),
                reason.message, detail,
            )
        self._storage_io(functools.partial(discard, pending.location))
        self._held_triggers.pop(checkpoint_id, None)
        for _, holder in self._coordinators.values():
            holder.on_checkpoint_ended(checkpoint_id, False)
        if checkpoint_id == self._final_checkpoint:
            self._final_checkpoint = None  # try again
        for key in pending.plan.to_ack:
            if key not in self._exited:
                self.gateway.send(key, NotifyCheckpointAborted(checkpoint_id))
        request = self._requests.pop(checkpoint_id, None)
        if reason is CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK and self._retried(pending, request):
            return
        error = CheckpointDeclinedError(checkpoint_id, reason, detail)
        if request is not None:
            request.reply(error=error)
        if self._stop.stops_at(checkpoint_id):  # not if a failed retry failed the job over already
            # The sources have stopped already: go back to the latest checkpoint and
            # keep running; the stop request fails with the reason.
            self._deliver(self._stop.savepoint_failed(error))
            self._fail(error, count=False)
        too_many = self.coordinator.failures.beyond(self.graph.checkpointing.tolerable_failures)
        if too_many is not None:
            last = f"{too_many}; last: {reason.message} ({detail})"
            storage = reason in STORAGE_FAILURES
            self._fail(CheckpointStorageError(self.storage.root, f"cannot be written: {last}") if storage else WeirError(last),
                       restartable=False)

    def _retried(self, pending: PendingCheckpoint, request: Request | None) -> bool:
        """A savepoint or stop whose ``pending`` snapshot was aborted because a task
        exited between the plan and its trigger is triggered again (the next plan
        knows it); False: there was none, or no task is left to snapshot. A
        savepoint is retried in a fresh folder beside the aborted one: that one's
        discard runs on the I/O thread, maybe after the retry wrote."""
        stopping = self._stop.stopping if self._stop.stops_at(pending.checkpoint_id) else None
        if request is None and stopping is None:
            return False
        retry = self._trigger(
            self.clock(),
            savepoint_location(parent(pending.location), self.graph.run_id) if pending.kind is CheckpointKind.SAVEPOINT else None,
            pending.kind,
            stopping.drain if stopping is not None else None,
        )
        if retry is None:
            return False
        if request is not None:
            self._requests[retry] = request
        if stopping is not None:
            self._stop.savepoint_retried(retry, self.coordinator.pending[retry].location)
        return True

    # ------------------------------------------------------------ tasks ending
    def _on_exit(self, key: TaskKey, result: TaskResult) -> None:
        if result.state is TaskState.FINISHED:
            self._exited.add(key)
            for vid, holder in self._coordinators.values():
                if vid == key[0]:
                    holder.on_subtask_gone(key[1])
            self._release_triggers()
            if len(self._exited) == len(self.graph.task_names()):
                self._all_finished()
                return
            for cid in self.coordinator.waiting_on(key):
                self._abort(cid, CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK, task_name(key))
        elif self.status is JobStatus.CANCELLING:
            self._exited.add(key)
            if len(self._exited) == len(self.graph.task_names()):
                self._end(JobStatus.CANCELED)
        elif isinstance(result.error, CorruptCheckpointError) and self._restore_points:
            self._fall_back(result.error)
        else:
            error = result.error if result.error is not None else WeirError(result.error_text or f"task {task_name(key)} ended {result.state.value}")
            self._fail(error, task=key)

    def _all_finished(self) -> None:
        """Every task finished. A stop or rescale whose savepoint had not completed
        did not happen (the job's input ended first): the job is FINISHED and the
        request fails, rather than the aborted savepoint restarting a finished job."""
        if self.status is JobStatus.CANCELLING:  # the last tasks finished as the cancel came
            self._end(JobStatus.CANCELED)
            return
        stopping = self._stop.stopping
        after, answer = self._stop.all_finished(stopping is not None and stopping.checkpoint_id in self.coordinator.pending)
        self._deliver(answer)
        if after is AfterLastTask.REDEPLOY:
            assert stopping is not None and stopping.rescale_to is not None
            self._finish_rescale(stopping.rescale_to)
        else:
            self._end(JobStatus.SUSPENDED if after is AfterLastTask.SUSPEND else JobStatus.FINISHED)

    def _kill(self, tasks: frozenset[TaskKey] | None = None) -> None:
        """Kill these tasks (None: all); exits of them already polled are dropped."""
        if tasks is None:
            self.gateway.kill_all()
            self._killed |= set(self._task_attempts)
        else:
            self.gateway.kill(tasks)
            self._killed |= tasks

    def _fail(self, error: BaseException, restartable: bool = True, count: bool = True, task: TaskKey | None = None) -> None:
        """Restart from the latest checkpoint under the restart strategy (``count``:
        the restart uses up an attempt), or fail the job for good. A ``task``'s
        failure restarts only its pipelined region where that is possible."""
        if self.status.is_terminal or self.status is JobStatus.RESTARTING:
            return
        self.failure = error
        headline = str(error).splitlines()[0] if str(error) else repr(error)
        backoff = self._backoff.failed(self.clock(), self._jitter.random(), count)
        region = region_of(task, self._regions, self.graph.execution.failover_strategy,
                           self.status is JobStatus.RUNNING, len(self.graph.task_names()))
        cancelling = self._cancel_requested is not None
        decision = decide_failover(backoff, restartable, region, cancelling)
        if decision.action is FailoverAction.RESTART_REGION:
            if self._restart_region(decision, headline, count):
                return
            decision = decide_failover(backoff, restartable, None, cancelling)
        log.warning("job %s: %s", self.graph.name, headline)
        if self.status is not JobStatus.CANCELLING:
            self._become(JobStatus.RESTARTING)  # no stop reacts to the aborts below
        for cid in list(self.coordinator.pending):
            self._abort(cid, CheckpointFailureReason.TASK_FAILURE, headline)
        self._close_coordinators()
        self._deliver(self._stop.job_failed(error))
        self._kill()
        self._restarting.clear()
        if decision.action is FailoverAction.CANCEL:
            self._end(JobStatus.CANCELED)
        elif decision.action is FailoverAction.FAIL:
            self._end(JobStatus.FAILED)
        else:
            self._restart_after(decision, count)

    def _restart_after(self, decision: Failover, count: bool) -> None:
        """Keep the restart strategy's state of a restart that goes ahead."""
        assert decision.backoff is not None
        self.restarts += count
        self._backoff = decision.backoff
        if decision.region is None:
            self._restart_at = decision.backoff.restart_at
        else:
            self._restarting[decision.region] = decision.backoff.restart_at

    def _restart_region(self, decision: Failover, headline: str, count: bool) -> bool:
        """Region failover: kill the region's tasks and redeploy them from the
        latest checkpoint when the backoff says, while the other regions go on.
        Checkpoints in flight are aborted (they wait for the failed task) and none
        starts until the region is back. Coordinators are closed or reset as
        :func:`coordinator_resets` says. False: a coordinator cannot reset, so
        every task must restart."""
        region = decision.region
        assert region is not None
        log.warning("job %s: %s; restarting its region of %d task(s)", self.graph.name, headline, len(region))
        for cid in list(self.coordinator.pending):
            self._abort(cid, CheckpointFailureReason.TASK_FAILURE, headline)
        self._kill(region)
        self._exited -= region
        self._ended_input -= region
        self._final_checkpoint = None
        plan = coordinator_resets(region, {uid: (vid, h.parallelism) for uid, (vid, h) in self._coordinators.items()})
        for uid in plan.close:
            self._close_coordinator(self._coordinators.pop(uid)[1])
        for uid, subtasks in plan.reset.items():
            holder = self._coordinators[uid][1]
            for i in subtasks:
                if not self._coordinator_call(holder, "subtask_reset", holder.reset_subtask, i):
                    return self.status is not JobStatus.RUNNING  # it failed the job, or it cannot: restart all
        self._restart_after(decision, count)
        return True

    def _cancel(self) -> None:
        if self.status.is_terminal or self.status is JobStatus.CANCELLING:
            return  # a second cancel must not put off the kill of tasks that do not close
        self._cancel_requested = self.clock()
        for cid in list(self.coordinator.pending):  # a cancel wins over savepoints in flight
            self._abort(cid, CheckpointFailureReason.JOB_STOPPING, "the job was cancelled")
        if self.status.is_terminal:
            return
        if self.status is JobStatus.RESTARTING:
            self._end(JobStatus.CANCELED)
            return
        self._become(JobStatus.CANCELLING)
        for region in self._restarting:  # not deployed: nothing to cancel
            self._exited |= region
        self._restarting.clear()
        if len(self._exited) == len(self.graph.task_names()):
            self._end(JobStatus.CANCELED)
            return
        for key in self.graph.task_names():
            if key not in self._exited:
                self.gateway.send(key, Cancel())

    def _end(self, status: JobStatus) -> None:
        try:  # before anyone hears of the end: a job master recovering this run reads it first
            self.storage.record_result(
                status.value, str(self.failure or ""), restarts=self.restarts,
                duration_s=round(self.clock() - self.started, 3), completed_checkpoints=self.coordinator.completed,
            )
        except OSError as exc:
            log.warning("job %s: could not record its end (%s) in %s: %s", self.graph.name, status.value, self.storage.root, exc)
        self._become(status)
        self.ended = self.clock()
        self._close_coordinators()
        for request in self._requests.values():
            request.reply(error=WeirError(f"job '{self.graph.name}' ended {status.value} before the savepoint completed"))
        self._requests.clear()
        for answer in self._stop.job_ended(status):
            self._deliver(answer)

    # ------------------------------------------------------------ deploying
    def _deploy(self, region: frozenset[TaskKey] | None = None) -> None:
        """Deploy every task from the latest checkpoint (a new attempt of the job),
        or only a failed-over ``region``'s while the others keep running."""
        self.attempt += 1
        g = self.graph
        if region is None:
            self._exited = set()
            self._ended_input = set()
            self._task_attempts = {}  # after a rescale, removed subtasks' late letters must not count
            self._restarting.clear()
            self._regions = g.regions()
            self._restart_at = None
        else:
            del self._restarting[region]
        self._final_checkpoint = None
        restore = {} if self._latest is None else restore_plan(self._latest, g, g.execution.allow_non_restored_state)
        deployments = plan_deployments(g, self.attempt, uuid.uuid4().hex[:12], restore, region)
        for d in deployments:
            self._task_attempts[d.key] = self.attempt
        if self.coordinator.last_trigger is None:
            # The first checkpoint comes one interval after the job starts (as in
            # Flink), not at once: there is nothing to snapshot yet.
            self.coordinator.last_trigger = self.clock()
        if region is None:
            self._become(JobStatus.RUNNING)
        try:
            self.gateway.deploy(deployments)
        except JobCancelledError:  # a cancel stopped it waiting for room on the cluster
            self._cancel_requested = self.clock()
            self._fail(WeirError("cancelled while deploying"), count=False)
            return
        except Exception as exc:  # e.g. a task killed while it was being set up, no room on the cluster
            self._fail(exc)
            return
        self._start_coordinators(region)
        if region is not None:
            for vid, holder in self._coordinators.values():
                for i in range(holder.parallelism):
                    if (vid, i) in region:
                        holder.subtask_running(i)

    # ------------------------------------------------------------ queries (any thread)
    def restarting_tasks(self) -> list[str]:
        """Tasks of failed-over regions waiting to be redeployed (the others run)."""
        return sorted(task_name(k) for region in list(self._restarting) for k in region)

    def checkpoint_stats(self) -> list[dict[str, Any]]:
        return [{**vars(s), "status": s.status.value} for s in sorted(self.coordinator.history.values(), key=lambda s: s.checkpoint_id)]

"""The job master: deploys a job's tasks, runs its checkpoints and savepoints,
restarts it on failure, stops and ends it. It runs on one loop thread fed by a
mailbox of letters (acks, declines, end-of-input reports, client requests, and
what its own off-loop work answers); the tasks are reached through a
:class:`TaskGateway`, which the Ray executor implements with actors and the
in-process executor with threads.

Nothing recurses back into the loop: whatever fails the job (a task, a
coordinator, too many failed checkpoints) becomes a :class:`Failed` letter,
handled once the current letter is done. The rooms it leans on are plain data
and functions: :mod:`~weir.runtime.checkpointing` (the checkpoints' bookkeeping),
:mod:`~weir.runtime.stopping` (a stop or rescale in progress, told of the job's
events here and of its savepoint by the checkpoint flow),
:mod:`~weir.runtime.failover` (what a failure restarts),
:mod:`~weir.runtime.restore` (where the job starts),
:mod:`~weir.runtime.deployment` (what runs where) and
:mod:`~weir.runtime.coordinators` (operator coordinators).

Stop (FLIP-34/45): a savepoint whose trigger tells the sources to stop. With
drain they end their input as if it ran out (MAX_WATERMARK, ``finish``,
``EndOfData(drain=True)``) and the job ends FINISHED once the savepoint completed;
without drain they only send ``EndOfData(drain=False)``, nothing is flushed,
and the job ends SUSPENDED, resumable from the savepoint as if never stopped.
If that savepoint fails, the job restarts from its latest checkpoint and keeps
running, and the stop request fails with the reason.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from typing import Any

from weir.runtime.checkpoint_flow import CheckpointFlow
from weir.runtime.checkpointing import TaskKey, task_name
from weir.runtime.config import restart_strategy_for
from weir.runtime.coordinators import OperatorCoordinators
from weir.runtime.deployment import DeployedTasks, TaskGateway
from weir.runtime.errors import (
    CheckpointFailureReason,
    CorruptCheckpointError,
    JobCancelledError,
    JobRequestError,
    TaskFailedError,
    WeirError,
)
from weir.runtime.failover import Failover, FailoverAction, Restarts, decide_failover
from weir.runtime.graph import JobGraph
from weir.runtime.job_lifecycle import JobExecutionResult, JobLifecycle, JobStatus
from weir.runtime.letters import (
    Ack,
    AskLetter,
    Cancel,
    CancelJob,
    CoordinatorCallDone,
    Decline,
    Deployed,
    EndOfInput,
    EventAcknowledged,
    EventFromOperator,
    Failed,
    Fenced,
    MasterLetter,
    MetadataWritten,
    Request,
    RescaleJob,
    StopJob,
    TaskExited,
    TriggerSavepoint,
    ask,
    close_refusing,
    post,
)
from weir.runtime.lifecycle import TaskResult, TaskState
from weir.runtime.mailbox import DataLetter, Mailbox
from weir.runtime.master_options import MasterOptions
from weir.runtime.off_loop import OffLoopThread
from weir.runtime.restore import starting_point
from weir.runtime.stopping import AfterLastTask, Answer, Redeploy, StopProtocol
from weir.runtime.storage import CheckpointStorage

log = logging.getLogger("weir.jobmaster")


@dataclass(frozen=True)
class JobView:
    """What clients may read of a running job from other threads: a copy its job
    master publishes after each tick, never its live state."""

    restarting_tasks: list[str]
    checkpoints: list[dict[str, Any]]


class JobMaster:
    """A job's master for one run (see the module's docstring); ``options``: how it is wired."""

    CANCEL_TIMEOUT_S = 10.0  # tasks that do not close by then (a blocked user function) are killed
    # The longest the loop waits for a letter before what time brings (a checkpoint
    # due, a restart's delay over, a timeout): a task's exit wakes it at once.
    TICK_S = 0.05

    def __init__(self, graph: JobGraph, gateway: TaskGateway, options: MasterOptions | None = None) -> None:
        o = options or MasterOptions()
        self.graph, self.gateway, self.clock, self.recovering = graph, gateway, o.clock, o.recovering
        self.mailbox: Mailbox[MasterLetter] = Mailbox(0)
        gateway.on_exit(lambda: self._post(TaskExited()))
        self.storage = CheckpointStorage(graph.checkpointing.storage, graph.name, graph.run_id, o.incarnation)
        self.life = JobLifecycle(graph.name, self.storage, o.clock)
        self.coordinators = OperatorCoordinators(
            graph.name, gateway.send, self._post, self._fail, o.event_valve, o.coordinator_io
        )
        self._stop = StopProtocol()  # a stop, drained stop or rescale in progress: its room
        self.tasks = DeployedTasks(gateway, o.deploy_io)
        storage_io = o.storage_io or OffLoopThread(graph.name, "checkpoint storage")
        self.checkpoints = CheckpointFlow(
            graph, self.tasks, self.coordinators, self._stop, self.storage, storage_io, o.clock, self._fail, self._post
        )
        self.coordinator = self.checkpoints.coordinator
        self.attempt = o.first_attempt
        strategy = restart_strategy_for(graph.execution.restart_strategy, graph.checkpointing.enabled)
        self.restarts = Restarts(strategy, o.restart_jitter)
        self._cancel_requested: float | None = None
        self._failures: collections.deque[Failed] = collections.deque()  # to handle after the current letter
        self._done = threading.Event()
        self._on_end, self._report_failure = o.on_end, o.on_failure
        self._held: list[MasterLetter] = []  # letters that came while a deploy ran
        self.final_metrics: list[dict[str, Any]] = []
        self.view = JobView([], [])

    # ------------------------------------------------------------ the loop
    def run(self) -> None:
        try:
            self.start()
            while not self.status.is_terminal:
                letter = self.mailbox.take(self.TICK_S)
                if letter is not None:
                    self._handle(letter)
                self._tick()
        except (
            BaseException
        ) as exc:  # a WeirError (e.g. a savepoint that does not fit the job), or a bug in weir: loudly
            if not isinstance(exc, WeirError):
                log.exception("job master of %s failed", self.graph.name)
            if not self.status.is_terminal:
                self.life.failed(exc)
                self._end(JobStatus.FAILED)
        finally:
            self._close()

    def _close(self) -> None:
        self.tasks.close()
        try:
            self.final_metrics = self.gateway.metrics()
        except Exception:
            log.warning("could not collect the final metrics of %s", self.graph.name)
        self.gateway.kill_all()
        self.checkpoints.close()
        self.coordinators.shutdown()
        if self._on_end is not None:
            try:
                self._on_end(self.status)
            except Exception as exc:  # the pool unreachable: clients must still hear the end
                log.error("could not record the end (%s) of job '%s': %s", self.status.value, self.graph.name, exc)
        close_refusing(self.mailbox, self._refuse)
        self.view = JobView(self.restarts.waiting_tasks(), self.coordinator.stats())
        self._done.set()

    @property
    def status(self) -> JobStatus:
        return self.life.status

    def start(self) -> None:
        """Restore (or recover) and deploy the first attempt; ``run`` does this first. A recovering
        job master whose run had ended (its result is in storage) deploys nothing: it never runs again."""
        if self.recovering:
            self.storage.claim()  # from now on the job master it replaces writes nothing here
        else:
            self.storage.mark_started()
        start = starting_point(self.storage, self.graph, self.recovering)
        if start.ended is not None:
            status, detail = start.ended
            self.life.had_ended(status, detail if status is JobStatus.FAILED else "")
            return
        self.checkpoints.start_from(start)
        self._deploy()
        self._settle()

    def run_until_idle(self) -> None:
        """Harness mode (a test drives the job master by hand, after ``start``):
        handle the letters already in the mailbox, then one tick."""
        while (letter := self.mailbox.take(0)) is not None:
            self._handle(letter)
        self._tick()

    def cancel(self) -> None:
        """Ask the job to cancel (any thread); nothing to do once it has ended."""
        self.gateway.stop_deploying()  # the loop may be waiting in one
        self._post(CancelJob())

    def ask(self, letter: AskLetter, timeout_s: float) -> Any:
        """Send a savepoint, stop or rescale request and wait for its answer (any thread)."""
        return ask(self.mailbox, letter, timeout_s, self._refuse)

    def _post(self, letter: MasterLetter) -> None:
        post(self.mailbox, letter)

    def _refuse(self, request: Request) -> None:
        request.reply(
            error=JobRequestError(f"job '{self.graph.name}' is {self.status.value}: no savepoint or stop now")
        )

    def _fall_back(self, error: CorruptCheckpointError) -> None:
        """The checkpoint being restored is damaged: restart from the one before it (:meth:`RestorePoints.fall_back`)."""
        if self.status is JobStatus.RESTARTING or self.status.is_terminal:
            return
        decision = self.checkpoints.restore.fall_back(error, self.graph.name)
        self._fail(decision.error, restartable=decision.restartable)

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    def result(self) -> JobExecutionResult:
        """The outcome; raises :class:`JobExecutionError` for a failed job."""
        return self.life.result(
            self.restarts.count,
            self.restarts.backoff.strategy.allowance(),
            self.coordinator.completed,
            self.final_metrics,
        )

    # ------------------------------------------------------------ letters
    def _handle(self, letter: MasterLetter | DataLetter) -> None:
        self._take(letter)
        self._settle()

    def _take(self, letter: MasterLetter | DataLetter) -> None:
        """Act on ``letter``; one that is no :data:`MasterLetter` (its mailbox has no data channels) raises."""
        if self.tasks.in_flight and not isinstance(letter, (Deployed, DataLetter)):
            self._held.append(letter)  # handled once the deploy is done and its coordinators run
            return
        if isinstance(letter, Deployed):
            self._on_deployed(letter)
        elif isinstance(letter, CancelJob):
            self._cancel()
        elif isinstance(letter, (TriggerSavepoint, StopJob, RescaleJob)):
            self._on_request(letter)
        elif isinstance(letter, MetadataWritten):
            self._on_metadata_written(letter)
        elif isinstance(letter, CoordinatorCallDone):
            self.coordinators.on_call_done(letter, self.clock())
        elif isinstance(letter, TaskExited):
            pass  # the tick after this letter polls the exits
        elif isinstance(letter, Fenced):
            self._fail(letter.error, restartable=False, count=False)
        elif not isinstance(letter, (Ack, Decline, EndOfInput, EventFromOperator, EventAcknowledged)):
            raise TypeError(f"job master of '{self.graph.name}' got a letter it does not know: {letter!r}")
        elif not self.tasks.is_current(letter.task, letter.attempt):
            return  # from a previous attempt of its task
        elif isinstance(letter, Ack):
            self.checkpoints.on_ack(letter)
        elif isinstance(letter, Decline):
            self.checkpoints.on_decline(letter)
        elif isinstance(letter, EndOfInput):
            self.tasks.input_ended(letter.task)
        elif isinstance(letter, EventFromOperator):
            self.coordinators.on_event(letter)
        else:
            self.coordinators.on_event_acknowledged(letter)

    def _fail(
        self, error: BaseException, restartable: bool = True, count: bool = True, task: TaskKey | None = None
    ) -> None:
        """Something failed the job: it restarts or ends once the current letter is handled."""
        self._failures.append(Failed(error, restartable, count, task))

    def _settle(self) -> None:
        """Handle the failures the last letter (or exit, or tick) caused, in order."""
        while self._failures and not self.tasks.in_flight:
            self._on_failure(self._failures.popleft())

    def _tick(self) -> None:
        if not self.tasks.in_flight:
            self._advance(self.clock())
        self._settle()
        self.view = JobView(self.restarts.waiting_tasks(), self.coordinator.stats())

    def _advance(self, now: float) -> None:
        """Exits, due restarts and deploys, the cancel's deadline, the rescale,
        coordinators' calls, checkpoints: what time and the gateway bring."""
        for key, result in self.tasks.exits(self.gateway.poll_exits()):
            self._on_exit(key, result)
            self._settle()
        if self.status is JobStatus.RESTARTING and self.restarts.job_due(now):
            self._deploy()
        for region in self.restarts.regions_due(now)[:1]:  # one deploy at a time
            if self.status is JobStatus.RUNNING:
                self._deploy(region)
        if self.tasks.in_flight:
            return
        overdue = self._cancel_requested is not None and now - self._cancel_requested > self.CANCEL_TIMEOUT_S
        if self.status is JobStatus.CANCELLING and overdue:
            log.warning(
                "job %s: tasks did not close within %.0fs of cancel; killing them",
                self.graph.name,
                self.CANCEL_TIMEOUT_S,
            )
            self._end(JobStatus.CANCELED)
        # Nothing new starts while a region is on its way back (it would decline);
        # the stop's savepoint is the last one.
        settled = self.status is JobStatus.RUNNING and not self.restarts.waiting
        if settled and self.checkpoints.rescale_when_ready(now):
            self.life.become(JobStatus.STOPPING)
        if self.status in (JobStatus.RUNNING, JobStatus.STOPPING):
            self.coordinators.run_due_calls(now)
            self.checkpoints.tick(now, may_trigger=self.status is JobStatus.RUNNING and not self.restarts.waiting)

    def _on_metadata_written(self, letter: MetadataWritten) -> None:
        started = self.checkpoints.on_metadata_written(letter)
        if started is not None:
            self.restarts.checkpoint_completed(started, self.clock())

    def _may_snapshot(self, request: Request) -> bool:
        """A savepoint, stop or rescale needs the job running with every task deployed; else it is refused."""
        if self.status is not JobStatus.RUNNING:
            self._refuse(request)
        elif self.restarts.waiting:
            request.reply(
                error=JobRequestError(
                    f"job '{self.graph.name}' is restarting failed task(s) {', '.join(self.restarts.waiting_tasks())}; "
                    "a snapshot needs every task running: try again in a moment"
                )
            )
        return self.status is JobStatus.RUNNING and not self.restarts.waiting

    def _on_request(self, letter: TriggerSavepoint | StopJob | RescaleJob) -> None:
        if not self._may_snapshot(letter.request):
            return
        if isinstance(letter, RescaleJob):
            stopping = self.checkpoints.rescale_requested(self.clock(), letter)
        else:
            stopping = self.checkpoints.savepoint_requested(self.clock(), letter)
        if stopping:
            self.life.become(JobStatus.STOPPING)

    def _finish_rescale(self, graph: JobGraph) -> None:
        """Every task stopped at the rescale checkpoint: deploy the new graph from it."""
        self.tasks.kill()
        self.graph = graph
        self.checkpoints.rescaled_to(graph)
        self._deploy()

    def _deliver(self, answer: Answer | None) -> None:
        if answer is not None:
            answer.deliver(self.graph.name)

    # ------------------------------------------------------------ tasks ending
    def _on_exit(self, key: TaskKey, result: TaskResult) -> None:
        if result.state is TaskState.FINISHED:
            self.tasks.exited_task(key)
            self.coordinators.subtask_gone(key)
            if self.tasks.all_exited(self.graph):
                self._all_finished()
                return
            self.checkpoints.task_finished(key)
        elif self.status is JobStatus.CANCELLING:
            self.tasks.exited_task(key)
            if self.tasks.all_exited(self.graph):
                self._end(JobStatus.CANCELED)
        elif isinstance(result.error, CorruptCheckpointError) and self.checkpoints.restore.points:
            self._fall_back(result.error)
        else:
            error = (
                result.error
                if result.error is not None
                else TaskFailedError(task_name(key), result.error_text or f"ended {result.state.value}")
            )
            self._fail(error, task=key)

    def _all_finished(self) -> None:
        """Every task finished: the job ends, or a rescale redeploys it (the stop's
        room says which, see :meth:`StopProtocol.all_finished`)."""
        if self.status is JobStatus.CANCELLING:  # the last tasks finished as the cancel came
            self._end(JobStatus.CANCELED)
            return
        after, answer = self._stop.all_finished()
        self._deliver(answer)
        if isinstance(after, Redeploy):
            self._finish_rescale(after.graph)
        else:
            self._end(JobStatus.SUSPENDED if after is AfterLastTask.SUSPEND else JobStatus.FINISHED)

    def _on_failure(self, failed: Failed) -> None:
        """Restart from the latest checkpoint under the restart strategy (``count``:
        the restart uses up an attempt), or fail the job for good. A ``task``'s
        failure restarts only its pipelined region where that is possible."""
        if self.status.is_terminal or self.status is JobStatus.RESTARTING:
            return
        error = failed.error
        self.life.failed(error, failed.task, self.attempt)
        if self._report_failure is not None:
            self._report_failure()
        headline = str(error).splitlines()[0] if str(error) else repr(error)
        cancelling = self._cancel_requested is not None
        running = self.status is JobStatus.RUNNING
        decision = self.restarts.decide(
            self.graph, failed.error, failed.task, failed.restartable, failed.count, running, cancelling, self.clock()
        )
        if decision.action is FailoverAction.RESTART_REGION:
            if self._restart_region(decision, headline, failed.count):
                return
            decision = decide_failover(decision.backoff, failed.restartable, None, cancelling)
        log.warning("job %s: %s", self.graph.name, headline)
        if self.status is not JobStatus.CANCELLING:
            self.life.become(JobStatus.RESTARTING)  # no stop reacts to the aborts below
        self.checkpoints.abort_all(CheckpointFailureReason.TASK_FAILURE, headline)
        self.coordinators.close()
        self._deliver(self._stop.job_failed(error))
        self.tasks.kill()
        self.restarts.stop_waiting()
        if decision.action is FailoverAction.CANCEL:
            self._end(JobStatus.CANCELED)
        elif decision.action is FailoverAction.FAIL:
            self._end(JobStatus.FAILED)
        else:
            self.restarts.go_ahead(decision, failed.count)

    def _restart_region(self, decision: Failover, headline: str, count: bool) -> bool:
        """Region failover: kill the region's tasks and redeploy them from the
        latest checkpoint when the backoff says, while the other regions go on.
        Checkpoints in flight are aborted (they wait for the failed task) and none
        starts until the region is back. False: a coordinator cannot reset its
        subtasks there (see :meth:`OperatorCoordinators.reset`), so every task must restart."""
        region = decision.region
        assert region is not None
        log.warning("job %s: %s; restarting its region of %d task(s)", self.graph.name, headline, len(region))
        self.checkpoints.abort_all(CheckpointFailureReason.TASK_FAILURE, headline)
        self.tasks.restart(region)
        self.checkpoints.deploying(self.clock())
        if not self.coordinators.reset(region):
            return False
        self.restarts.go_ahead(decision, count)
        return True

    def _cancel(self) -> None:
        if self.status.is_terminal or self.status is JobStatus.CANCELLING:
            return  # a second cancel must not put off the kill of tasks that do not close
        self._cancel_requested = self.clock()
        # A cancel wins over savepoints in flight. A stop whose savepoint it aborts
        # hears so first: the abort must not fail the stop as if the job ran on.
        self._deliver(self._stop.job_cancelled())
        self.checkpoints.abort_all(CheckpointFailureReason.JOB_STOPPING, "the job was cancelled")
        if self.status is JobStatus.RESTARTING:
            self._end(JobStatus.CANCELED)
            return
        self.life.become(JobStatus.CANCELLING)
        self.tasks.never_deployed(self.restarts.stop_waiting())  # nothing to cancel there
        if self.tasks.all_exited(self.graph):
            self._end(JobStatus.CANCELED)
            return
        for key in self.graph.task_names():
            if key not in self.tasks.exited:
                self.gateway.send(key, Cancel())

    def _end(self, status: JobStatus) -> None:
        self.life.end(status, self.restarts.count, self.coordinator.completed)
        self.coordinators.close()
        self.checkpoints.job_ended(status.value)
        for answer in self._stop.job_ended(status):
            self._deliver(answer)

    # ------------------------------------------------------------ deploying
    def _deploy(self, region: frozenset[TaskKey] | None = None) -> None:
        """Deploy every task from the latest checkpoint (a new attempt of the job),
        or only a failed-over ``region``'s while the others keep running."""
        self.attempt += 1
        self.restarts.deploying(self.graph, region)
        self.checkpoints.deploying(self.clock())
        if region is None:
            self.life.become(JobStatus.RUNNING)
        self.tasks.deploy(self.graph, self.attempt, self.checkpoints.restore.plan(self.graph), region, self._post)

    def _on_deployed(self, letter: Deployed) -> None:
        """The deploy is done: start its coordinators, or fail over (a cancel that
        stopped it waiting for room ends the job); a rescale's deploy answers the
        rescale, whatever it did; then take the letters held meanwhile."""
        self.tasks.deploy_done()
        if isinstance(letter.error, JobCancelledError):
            self._cancel_requested = self.clock()
            self._fail(JobCancelledError("cancelled while deploying"), count=False)
        elif letter.error is not None:  # e.g. a task killed while it was being set up, no room on the cluster
            self._fail(letter.error)
        else:
            damaged = self.coordinators.start(self.graph, self.checkpoints.restore.coordinator_states(), letter.region)
            if damaged is not None:
                self._fall_back(damaged)
        rescaled = self._stop.deployed(self.clock())
        if rescaled is not None:  # a rescale's deploy: it hears how long the job was not processing
            parallelism = {v.id: v.parallelism for v in self.graph.vertices.values()}
            log.info("job %s rescaled: %s; not processing for %.2fs", self.graph.name, parallelism, rescaled.result)
            self._deliver(rescaled)
        held, self._held = self._held, []
        for held_letter in held:
            self._take(held_letter)

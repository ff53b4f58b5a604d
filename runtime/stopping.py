"""A stop, stop with drain, or rescale in progress, as a state object (the job
master's counterpart of :mod:`weir.runtime.barriers`).

A stop is a savepoint whose trigger tells the sources to stop (FLIP-34/45); a
rescale first waits for its new tasks' slots, then stops without drain into a
retained checkpoint and redeploys the job from it with the new parallelism. The
states are :class:`NoStop`, :class:`WaitingForSlots`, :class:`Stopping` and
:class:`Redeploying`; each event method of :class:`StopProtocol` moves to the
next one and returns the :class:`Answer` its request must hear, if any. An event
that is illegal in the current state raises :class:`StopProtocolError` and
leaves the state as it was.

:class:`StopProtocol` is the stop's room: only it reads or writes the stop's
state, and no method of it hands a state object out. Two rooms report to it
through its named methods: the checkpoint flow (a stop's or rescale's savepoint
started, was retried, failed or completed, and the one question
:meth:`~StopProtocol.stops_at`: does the stop wait for this checkpoint?) and
the job master (every task finished, the job failed, was cancelled, deployed,
ended). Each report returns what its caller must do: an :class:`Answer` to
deliver, or what the job does once its last task finished.

Sans-IO and not thread-safe: the job master's loop thread drives it, starts the
savepoints, ends the job and delivers the answers (``Answer.deliver``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

from weir.runtime.errors import JobRequestError, WeirError
from weir.runtime.graph import JobGraph
from weir.runtime.job_lifecycle import JobStatus

# A rescale lets the job run on this long while the processes of its new tasks
# start; then it stops the job anyway, and the deploy waits for them (a cluster
# short of CPUs may take long to make room, and a bounded job may end first).
RESCALE_WAIT_S = 5.0


class StopProtocolError(WeirError):
    """An event the stop in progress cannot take in its state (a bug in weir)."""


class Replies(Protocol):
    """Who waits for a stop's or rescale's answer (the job master's ``Request``)."""

    def reply(self, result: Any = None, error: BaseException | None = None) -> None: ...


class StopOutcome(enum.Enum):
    """How a stop or rescale request ended. Each member carries what its request
    hears: a template for the error (``{what}``: stop or rescale, ``{job}``, and
    ``{detail}``), or, for the two that succeed, what the reply holds."""

    STOPPED = "the savepoint's location"
    RESCALED = "the seconds the job was not processing"
    NOT_STARTED = "job '{job}' could not start a snapshot: {detail}"
    ALREADY_RESCALING = "job '{job}' is being rescaled already: try again when that is done"
    SAVEPOINT_FAILED = "{what} of job '{job}' failed, the job keeps running: {detail}"
    JOB_FAILED = "{what} of job '{job}' failed: {detail}"
    FINISHED_FIRST = "{what} of job '{job}' did not happen: the job finished before its savepoint completed"
    CANCELLED_FIRST = "{what} of job '{job}' did not happen: the job was cancelled before its savepoint completed"
    OVERTAKEN_BY_CANCEL = (
        "{what} of job '{job}' was overtaken by a cancel: the job ended CANCELED, "
        "after its savepoint had completed at {detail} (it can be restored)"
    )
    ENDED_BEFORE_RESCALE = "job '{job}' ended {detail} before it was rescaled"

    @property
    def succeeded(self) -> bool:
        return self in (StopOutcome.STOPPED, StopOutcome.RESCALED)


@dataclass(frozen=True)
class Answer:
    """A command: tell ``request`` the ``outcome`` (``result``: a success's value)."""

    request: Replies
    outcome: StopOutcome
    what: str = "stop"
    detail: str = ""
    result: Any = None

    def message(self, job: str) -> str:
        return self.outcome.value.format(what=self.what, job=job, detail=self.detail)

    def deliver(self, job: str) -> None:
        if self.outcome.succeeded:
            self.request.reply(self.result)
        else:
            self.request.reply(error=JobRequestError(self.message(job)))


@dataclass(frozen=True)
class NoStop:
    """Nothing in progress: the job runs, restarts or ends on its own."""


@dataclass(frozen=True)
class WaitingForSlots:
    """A rescale waiting for its new tasks' slots: the job processes on until they
    are up (or ``deadline`` passes), so its pause is the stop and the redeploy,
    not a process start."""

    request: Replies
    graph: JobGraph
    deadline: float


@dataclass(frozen=True)
class Stopping:
    """The stop's savepoint (or the rescale's checkpoint) ``checkpoint_id`` is on its
    way into ``location``; the sources stop once triggered. Once it ``completed``,
    the stop happens whatever comes: the job ends (or redeploys) as it stopped."""

    checkpoint_id: int
    drain: bool
    location: str
    request: Replies
    rescale_to: JobGraph | None = None
    started: float = 0.0
    waiting: WaitingForSlots | None = None  # a rescale that waited for slots when this stop began
    completed: bool = False

    @property
    def after(self) -> "NoStop | WaitingForSlots":
        """The state once this stop is over but the job is not: a rescale that was
        waiting waits on."""
        return self.waiting or NoStop()

    @property
    def what(self) -> str:
        return "rescale" if self.rescale_to is not None else "stop"


@dataclass(frozen=True)
class Redeploying:
    """Every task stopped at the rescale's checkpoint: the new graph is deployed
    from it; the request hears the pause once that is done, whatever the deploy did."""

    request: Replies
    started: float


State = NoStop | WaitingForSlots | Stopping | Redeploying


class AfterLastTask(enum.Enum):
    """How the job ends once its every task finished (unless it :class:`Redeploy` s)."""

    FINISH = "the job ends FINISHED"
    SUSPEND = "the job ends SUSPENDED, resumable from the stop's savepoint"


@dataclass(frozen=True)
class Redeploy:
    """A command, once every task finished: the rescale deploys ``graph`` from its checkpoint."""

    graph: JobGraph


class StopProtocol:
    """The stop or rescale in progress of one job, if any (see the module's docstring)."""

    def __init__(self) -> None:
        self._state: State = NoStop()

    @property
    def state(self) -> State:
        """For tests: the rooms that report to the stop never read its state."""
        return self._state

    def _illegal(self, event: str) -> StopProtocolError:
        return StopProtocolError(f"{event} while {type(self._state).__name__}")

    def _stopping(self, event: str) -> Stopping:
        """The stop whose savepoint is still on its way, for ``event``; else it is illegal."""
        if not isinstance(self._state, Stopping) or self._state.completed:
            raise self._illegal(event)
        return self._state

    # ------------------------------------------------------------ the checkpoint flow's questions
    def stops_at(self, checkpoint_id: int) -> bool:
        """``checkpoint_id`` is the stop's savepoint: it commits, nothing runs after it."""
        return self.stop_drain(checkpoint_id) is not None

    def stop_drain(self, checkpoint_id: int) -> bool | None:
        """What the trigger of ``checkpoint_id`` tells the sources: None, nothing (it
        is not the stop's savepoint); else to stop, with drain (True) or without."""
        s = self._state
        return s.drain if isinstance(s, Stopping) and s.checkpoint_id == checkpoint_id else None

    def rescale_ready(self, now: float, reserve: Callable[[JobGraph], bool]) -> bool:
        """A rescale waits, and its slots are up (``reserve`` asks for the new
        graph's: True once every one is) or its wait is over at ``now``: its
        checkpoint is due, then :meth:`rescale_stop_started` or :meth:`rescale_not_started`."""
        s = self._state
        return isinstance(s, WaitingForSlots) and (reserve(s.graph) or now >= s.deadline)

    # ------------------------------------------------------------ the checkpoint flow's reports
    def stop_started(self, checkpoint_id: int, drain: bool, location: str, request: Replies) -> None:
        """A stop's savepoint was triggered (a rescale waiting for slots waits on
        behind it: it goes ahead if the stop fails)."""
        s = self._state
        if not isinstance(s, (NoStop, WaitingForSlots)):
            raise self._illegal("a stop started")
        self._state = Stopping(
            checkpoint_id, drain, location, request, waiting=s if isinstance(s, WaitingForSlots) else None
        )

    def rescale_requested(self, request: Replies, graph: JobGraph, deadline: float) -> Answer | None:
        """A rescale to ``graph``: it waits for slots until ``deadline``; a second
        one is refused while the first waits."""
        if isinstance(self._state, WaitingForSlots):
            return Answer(request, StopOutcome.ALREADY_RESCALING, "rescale")
        if not isinstance(self._state, NoStop):
            raise self._illegal("a rescale was requested")
        self._state = WaitingForSlots(request, graph, deadline)
        return None

    def rescale_stop_started(self, checkpoint_id: int, location: str, now: float) -> None:
        """The waiting rescale's checkpoint was triggered at ``now`` (the pause begins)."""
        s = self._state
        if not isinstance(s, WaitingForSlots):
            raise self._illegal("a rescale's stop started")
        self._state = Stopping(checkpoint_id, False, location, s.request, s.graph, now)

    def rescale_not_started(self, why: str) -> Answer:
        """The waiting rescale's checkpoint could not be triggered: it is over."""
        s = self._state
        if not isinstance(s, WaitingForSlots):
            raise self._illegal("a rescale did not start")
        self._state = NoStop()
        return Answer(s.request, StopOutcome.NOT_STARTED, "rescale", why)

    def savepoint_retried(self, checkpoint_id: int, location: str) -> None:
        """The stop's savepoint was aborted for a task that finished meanwhile and
        triggered again as ``checkpoint_id``."""
        s = self._stopping("a stop's savepoint was retried")
        self._state = replace(s, checkpoint_id=checkpoint_id, location=location)

    def savepoint_failed(self, error: BaseException) -> Answer:
        """The stop's savepoint failed: the job goes back to its latest checkpoint
        and keeps running."""
        s = self._stopping("a stop's savepoint failed")
        self._state = s.after
        return Answer(s.request, StopOutcome.SAVEPOINT_FAILED, s.what, str(error))

    def savepoint_completed(self) -> None:
        """The stop's savepoint completed: the stop happens, whatever comes (see
        :meth:`all_finished`, :meth:`job_cancelled`)."""
        self._state = replace(self._stopping("a stop's savepoint completed"), completed=True)

    # ------------------------------------------------------------ the job master's reports
    def job_failed(self, error: BaseException) -> Answer | None:
        """The job fails over (or fails): a stop in progress fails with it; a
        rescale waiting for slots waits on, and one redeploying answers after it."""
        s = self._state
        if not isinstance(s, Stopping):
            return None
        self._state = s.after
        return Answer(s.request, StopOutcome.JOB_FAILED, s.what, str(error))

    def all_finished(self) -> tuple[AfterLastTask | Redeploy, Answer | None]:
        """Every task finished. A stop or rescale whose savepoint had not completed
        did not happen: the job's input ended first, and it ends FINISHED rather
        than restarting for the aborted savepoint."""
        s = self._state
        if not isinstance(s, Stopping):
            return AfterLastTask.FINISH, None
        if not s.completed:
            self._state = s.after
            return AfterLastTask.FINISH, Answer(s.request, StopOutcome.FINISHED_FIRST, s.what)
        if s.rescale_to is not None:
            self._state = Redeploying(s.request, s.started)
            return Redeploy(s.rescale_to), None
        return (AfterLastTask.FINISH if s.drain else AfterLastTask.SUSPEND), None

    def deployed(self, now: float) -> Answer | None:
        """A deploy is done (or failed) at ``now``: a rescale redeploying hears how
        long the job was not processing; any other deploy is none of the stop's."""
        s = self._state
        if not isinstance(s, Redeploying):
            return None
        self._state = NoStop()
        return Answer(s.request, StopOutcome.RESCALED, "rescale", result=now - s.started)

    def job_cancelled(self) -> Answer | None:
        """A cancel came; it aborts the savepoints in flight. A stop or rescale whose
        savepoint had not completed did not happen, and the job ends CANCELED: its
        request hears that now, not that the savepoint failed and the job keeps
        running. One whose savepoint completed hears at the end (:meth:`job_ended`);
        a rescale waiting for slots waits on until then too."""
        s = self._state
        if not isinstance(s, Stopping) or s.completed:
            return None
        self._state = s.after
        return Answer(s.request, StopOutcome.CANCELLED_FIRST, s.what)

    def job_ended(self, status: JobStatus) -> list[Answer]:
        """The job ended ``status``: a rescale still waiting for slots fails; a stop
        whose savepoint completed answers its location (unless a cancel overtook it)."""
        s = self._state
        stop = s if isinstance(s, Stopping) else None
        waiting = s if isinstance(s, WaitingForSlots) else stop.waiting if stop is not None else None
        if isinstance(s, (WaitingForSlots, Stopping)):
            self._state = NoStop()
        answers = (
            []
            if waiting is None
            else [Answer(waiting.request, StopOutcome.ENDED_BEFORE_RESCALE, "rescale", status.value)]
        )
        if stop is not None and status is JobStatus.CANCELED:
            answers.append(Answer(stop.request, StopOutcome.OVERTAKEN_BY_CANCEL, stop.what, stop.location))
        elif stop is not None:
            answers.append(Answer(stop.request, StopOutcome.STOPPED, stop.what, result=stop.location))
        return answers

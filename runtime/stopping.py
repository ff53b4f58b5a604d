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

Sans-IO and not thread-safe: the job master's loop thread drives it, starts the
savepoints, ends the job and delivers the answers (``Answer.deliver``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Protocol

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

    def not_started(self, why: str) -> Answer:
        """Its checkpoint could not be triggered."""
        return Answer(self.request, StopOutcome.NOT_STARTED, "rescale", why)


@dataclass(frozen=True)
class Stopping:
    """The stop's savepoint (or the rescale's checkpoint) ``checkpoint_id`` is on its
    way into ``location``; the sources stop once triggered."""

    checkpoint_id: int
    drain: bool
    location: str
    request: Replies
    rescale_to: JobGraph | None = None
    started: float = 0.0
    waiting: WaitingForSlots | None = None  # a rescale that waited for slots when this stop began

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
    """What the job does once its every task finished."""

    FINISH = "the job ends FINISHED"
    SUSPEND = "the job ends SUSPENDED, resumable from the stop's savepoint"
    REDEPLOY = "the rescale deploys the new graph"


class StopProtocol:
    """The stop or rescale in progress of one job, if any (see the module's docstring)."""

    def __init__(self) -> None:
        self._state: State = NoStop()

    @property
    def state(self) -> State:
        return self._state

    @property
    def stopping(self) -> Stopping | None:
        return self._state if isinstance(self._state, Stopping) else None

    @property
    def waiting(self) -> WaitingForSlots | None:
        return self._state if isinstance(self._state, WaitingForSlots) else None

    def stops_at(self, checkpoint_id: int) -> bool:
        """``checkpoint_id`` is the stop's savepoint: it commits, nothing runs after it."""
        return isinstance(self._state, Stopping) and self._state.checkpoint_id == checkpoint_id

    def _illegal(self, event: str) -> StopProtocolError:
        return StopProtocolError(f"{event} while {type(self._state).__name__}")

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

    def slots_ready(self) -> WaitingForSlots:
        """The waiting rescale's slots are up (or its deadline passed): it is taken
        out to trigger its checkpoint, then ``rescale_stop_started``, or it answers
        ``WaitingForSlots.not_started``."""
        s = self._state
        if not isinstance(s, WaitingForSlots):
            raise self._illegal("a rescale's slots were ready")
        self._state = NoStop()
        return s

    def rescale_stop_started(self, rescale: WaitingForSlots, checkpoint_id: int, location: str, now: float) -> None:
        """``rescale``'s checkpoint was triggered at ``now`` (the pause begins)."""
        if not isinstance(self._state, NoStop):
            raise self._illegal("a rescale's stop started")
        self._state = Stopping(checkpoint_id, False, location, rescale.request, rescale.graph, now)

    def savepoint_retried(self, checkpoint_id: int, location: str) -> None:
        """The stop's savepoint was aborted for a task that finished meanwhile and
        triggered again as ``checkpoint_id``."""
        if not isinstance(self._state, Stopping):
            raise self._illegal("a stop's savepoint was retried")
        self._state = replace(self._state, checkpoint_id=checkpoint_id, location=location)

    def savepoint_failed(self, error: BaseException) -> Answer:
        """The stop's savepoint failed: the job goes back to its latest checkpoint
        and keeps running."""
        s = self._state
        if not isinstance(s, Stopping):
            raise self._illegal("a stop's savepoint failed")
        self._state = s.after
        return Answer(s.request, StopOutcome.SAVEPOINT_FAILED, s.what, str(error))

    def job_failed(self, error: BaseException) -> Answer | None:
        """The job fails over (or fails): a stop in progress fails with it; a
        rescale waiting for slots waits on, and one redeploying answers after it."""
        s = self._state
        if not isinstance(s, Stopping):
            return None
        self._state = s.after
        return Answer(s.request, StopOutcome.JOB_FAILED, s.what, str(error))

    def all_finished(self, savepoint_pending: bool) -> tuple[AfterLastTask, Answer | None]:
        """Every task finished. A stop or rescale whose savepoint had not completed
        (``savepoint_pending``) did not happen: the job's input ended first, and it
        ends FINISHED rather than restarting for the aborted savepoint."""
        s = self._state
        if not isinstance(s, Stopping):
            return AfterLastTask.FINISH, None
        if savepoint_pending:
            self._state = s.after
            return AfterLastTask.FINISH, Answer(s.request, StopOutcome.FINISHED_FIRST, s.what)
        if s.rescale_to is not None:
            self._state = Redeploying(s.request, s.started)
            return AfterLastTask.REDEPLOY, None
        return (AfterLastTask.FINISH if s.drain else AfterLastTask.SUSPEND), None

    def redeployed(self, now: float) -> Answer:
        """The rescaled graph was deployed (or failed to be) at ``now``."""
        s = self._state
        if not isinstance(s, Redeploying):
            raise self._illegal("a rescale redeployed")
        self._state = NoStop()
        return Answer(s.request, StopOutcome.RESCALED, "rescale", result=now - s.started)

    def job_cancelled(self, savepoint_pending: bool) -> Answer | None:
        """A cancel came; it aborts the savepoints in flight. A stop or rescale whose
        savepoint had not completed (``savepoint_pending``) did not happen, and the
        job ends CANCELED: its request hears that now, not that the savepoint failed
        and the job keeps running. One whose savepoint completed hears at the end
        (:meth:`job_ended`); a rescale waiting for slots waits on until then too."""
        s = self._state
        if not isinstance(s, Stopping) or not savepoint_pending:
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

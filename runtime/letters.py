"""Letters to a task (:data:`TaskLetter`: the job master's triggers and
notifications, a coordinator's events, cancel), and to the job master, one
typed union (:data:`MasterLetter`): what its
tasks report (:data:`TaskReport`, through a task's ``MasterPorts``), what its own
off-loop work answers, and what clients ask (:data:`AskLetter`, each carrying the
:class:`Request` its answer goes to). They are plain values; only the loop
thread acts on them, and it refuses any other letter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from weir.runtime.checkpointing import TaskKey
from weir.runtime.coordination import AsyncCall, CoordinatorHolder
from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.events import CheckpointBarrier
from weir.runtime.mailbox import Mailbox, MailboxClosedError
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle


# Letters to a task: what the job master (or a coordinator) puts into its mailbox.
@dataclass(frozen=True)
class TriggerCheckpoint:
    barrier: CheckpointBarrier
    stop_drain: bool | None = None  # a source told to stop: with drain (finish) or not (suspend)


@dataclass(frozen=True)
class NotifyCheckpointComplete:
    checkpoint_id: int


@dataclass(frozen=True)
class NotifyCheckpointAborted:
    checkpoint_id: int


@dataclass(frozen=True)
class OperatorEvent:
    """From an operator's coordinator (see :mod:`weir.runtime.coordination`)."""

    operator_uid: str
    event_id: int
    event: Any


@dataclass(frozen=True)
class Cancel:
    pass


# What a job master sends a task (through its gateway's ``send``).
TaskLetter = TriggerCheckpoint | NotifyCheckpointComplete | NotifyCheckpointAborted | OperatorEvent | Cancel


@dataclass(frozen=True)
class Ack:
    attempt: int
    task: TaskKey
    checkpoint_id: int
    handle: StateHandle
    operators: dict[str, SnapshotSummary]
    alignment_ms: int = 0  # from its first input's barrier to its last (0: one input, or a source)


@dataclass(frozen=True)
class Decline:
    attempt: int
    task: TaskKey
    checkpoint_id: int
    reason: CheckpointFailureReason
    detail: str


@dataclass(frozen=True)
class EndOfInput:
    attempt: int
    task: TaskKey


@dataclass(frozen=True)
class EventFromOperator:
    attempt: int
    task: TaskKey
    operator_uid: str
    event: Any


@dataclass(frozen=True)
class EventAcknowledged:
    attempt: int
    task: TaskKey
    operator_uid: str
    event_id: int


# What a task reports to the job master.
TaskReport = Ack | Decline | EndOfInput | EventFromOperator | EventAcknowledged


@dataclass(frozen=True)
class Deployed:
    """The gateway deployed an attempt's tasks (``error``: or failed to);
    ``region``: a failed-over region's only."""

    attempt: int
    region: frozenset[TaskKey] | None
    error: BaseException | None


@dataclass(frozen=True)
class CancelJob:
    pass


@dataclass(frozen=True)
class TaskExited:
    """A task ended (the gateway's wake-up): the tick after it polls the exits."""


@dataclass(frozen=True)
class MetadataWritten:
    """The storage thread wrote a checkpoint's metadata (``error``: or failed to)."""

    checkpoint_id: int
    metadata: dict[str, Any]
    error: str | None


@dataclass(frozen=True)
class Fenced:
    """The storage thread found that a newer job master took the job over: this one stands down."""

    error: BaseException


@dataclass(frozen=True)
class Failed:
    """Something failed the job (a task, an operator coordinator, its checkpoints):
    the job master restarts it or ends it once the letter it is handling is done,
    never from within it. ``restartable``: the restart strategy may restart it;
    ``count``: a restart uses up an attempt; ``task``: the task that failed (only
    its pipelined region may restart)."""

    error: BaseException
    restartable: bool = True
    count: bool = True
    task: TaskKey | None = None


@dataclass(frozen=True)
class CoordinatorCallDone:
    """An operator coordinator's async call returned (``error``: or raised)."""

    holder: CoordinatorHolder
    call: AsyncCall
    result: Any
    error: BaseException | None


class Request:
    """A client's call that waits for its answer (from any thread)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    def reply(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self._done.is_set():
            self._result, self._error = result, error
            self._done.set()

    def wait(self, timeout_s: float) -> Any:
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"no answer within {timeout_s}s")
        if self._error is not None:
            raise self._error
        return self._result


@dataclass(frozen=True)
class TriggerSavepoint:
    """Take a savepoint into ``location`` (None: a retained checkpoint); replies its location."""

    location: str | None
    request: Request


@dataclass(frozen=True)
class StopJob:
    """Stop with a savepoint into ``location`` (None: a final retained checkpoint);
    replies the location once the job has ended."""

    location: str | None
    drain: bool
    request: Request


@dataclass(frozen=True)
class RescaleJob:
    """Change operators' parallelism on the running job: a stop without drain into
    a retained checkpoint, then the job restarts from it with the new parallelism.
    Replies the seconds the job was not processing."""

    parallelism: dict[str, int]
    request: Request


AskLetter = TriggerSavepoint | StopJob | RescaleJob

# Every letter the job master's mailbox takes.
MasterLetter = (
    TaskReport | AskLetter | Deployed | CancelJob | TaskExited | MetadataWritten | Fenced | CoordinatorCallDone
)


def post(mailbox: Mailbox[MasterLetter], letter: MasterLetter) -> None:
    """A letter from off the job master's loop (any thread); dropped once the job has ended."""
    try:
        mailbox.put_control(letter)
    except MailboxClosedError:
        pass


def ask(mailbox: Mailbox[MasterLetter], letter: AskLetter, timeout_s: float, refuse: Callable[[Request], None]) -> Any:
    """Send a client's request and wait for its answer (any thread); ``refuse``
    answers it at once if the job has ended."""
    try:
        mailbox.put_control(letter)
    except MailboxClosedError:
        refuse(letter.request)
    return letter.request.wait(timeout_s)


def close_refusing(mailbox: Mailbox[MasterLetter], refuse: Callable[[Request], None]) -> None:
    """The job has ended: close its mailbox, and refuse the requests still in it."""
    mailbox.close()
    while True:
        try:
            letter = mailbox.take(0)
        except MailboxClosedError:
            return
        if letter is None:
            return
        if isinstance(letter, (TriggerSavepoint, StopJob, RescaleJob)):
            refuse(letter.request)

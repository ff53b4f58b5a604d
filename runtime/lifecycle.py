"""A stream task's lifecycle, as a state machine (Flink's Task Lifecycle and FLIP-147).

::

    RUNNING ──end of input──▶ DRAINING ───┐  chain finished,
       │                                  ├─ EndOfData sent ─▶ FINISHED ──exit gate──▶ CLOSING ─▶ ENDED
       └──stop without drain─▶ SUSPENDING ┘                     (waits for a checkpoint
                                                                 taken in FINISHED)
    any phase but ENDED ──failure or cancel──▶ CLOSING ─▶ ENDED   (only close() runs)

The phases and their legal moves are data (:data:`TRANSITIONS`); each rule of
what a phase allows is one set below, asked by the task in one place. A move
that is not legal raises :class:`LifecycleError` and leaves the phase as it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from weir.runtime.errors import WeirError


class Phase(enum.Enum):
    RUNNING = "RUNNING"
    DRAINING = "DRAINING"  # end of input: end_input and finish() run, first to last
    SUSPENDING = "SUSPENDING"  # stopped without drain: nothing is finished or flushed
    FINISHED = "FINISHED"  # EndOfData sent; waiting for a checkpoint taken from here on to complete
    CLOSING = "CLOSING"  # close() runs
    ENDED = "ENDED"


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.RUNNING: frozenset({Phase.DRAINING, Phase.SUSPENDING, Phase.CLOSING}),
    Phase.DRAINING: frozenset({Phase.FINISHED, Phase.CLOSING}),
    Phase.SUSPENDING: frozenset({Phase.FINISHED, Phase.CLOSING}),
    Phase.FINISHED: frozenset({Phase.CLOSING}),
    Phase.CLOSING: frozenset({Phase.ENDED}),
    Phase.ENDED: frozenset(),
}

# Processing-time timers fire only while input may still come: once the input
# ended (or the source stopped) they are quiesced, and a suspended job's timers
# wait in its savepoint.
FIRES_PROCESSING_TIMERS = frozenset({Phase.RUNNING})


class TaskState(enum.Enum):
    RUNNING = "RUNNING"
    FINISHING = "FINISHING"  # finished, waiting for a final checkpoint
    FINISHED = "FINISHED"
    CANCELED = "CANCELED"
    FAILED = "FAILED"


@dataclass
class TaskResult:
    state: TaskState
    error: BaseException | None = None
    error_text: str = ""


class LifecycleError(WeirError):
    pass


class Lifecycle:
    """Where one task is in its life (its phase, and the :class:`TaskState` its
    executor reports, which follows it), and the exit gate of FLIP-147: the task
    leaves once a checkpoint it snapshotted in FINISHED has completed and every
    producer has exited (nothing more can arrive on any channel)."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.phase = Phase.RUNNING
        self.state = TaskState.RUNNING  # what the task reports: FINISHING from FINISHED on, then how it ended
        self.drained: bool | None = None  # how the input ended: drained, or stopped (a suspend)
        self._first_checkpoint_in_finished: int | None = None
        self.final_checkpoint_done = False

    def to(self, phase: Phase) -> None:
        if phase not in TRANSITIONS[self.phase]:
            raise LifecycleError(f"task {self.task}: {self.phase.value} -> {phase.value} is not a legal move")
        self.phase = phase
        if phase is Phase.FINISHED:
            self.state = TaskState.FINISHING

    def ended(self, how: TaskState) -> None:
        """The task's run is over: FINISHED (closed after the exit gate), CANCELED or FAILED."""
        self.state = how

    def end_input(self, drain: bool) -> None:
        self.drained = drain
        self.to(Phase.DRAINING if drain else Phase.SUSPENDING)

    @property
    def input_ended(self) -> bool:
        return self.drained is not None

    @property
    def fires_processing_timers(self) -> bool:
        return self.phase in FIRES_PROCESSING_TIMERS

    def on_snapshot(self, checkpoint_id: int) -> None:
        if self.phase is Phase.FINISHED and self._first_checkpoint_in_finished is None:
            self._first_checkpoint_in_finished = checkpoint_id

    def on_complete(self, checkpoint_id: int) -> None:
        first = self._first_checkpoint_in_finished
        if first is not None and checkpoint_id >= first:
            self.final_checkpoint_done = True

    def may_exit(self, producers_left: bool) -> bool:
        return self.phase is Phase.FINISHED and self.final_checkpoint_done and not producers_left

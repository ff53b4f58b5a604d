"""A task actor taken back from a dead coordinator's job (``abandon``), built
outside Ray with a stand-in task: the old attempt's task is cancelled and the
slot reset, a stuck one is reported for killing, and a late ``run`` call of the
dead coordinator's attempt runs nothing."""

from __future__ import annotations

import threading

import pytest

from weir.actors.task_actor import TaskActor
from weir.runtime.errors import WeirError
from weir.runtime.task import Cancel, TaskResult, TaskState


class _Task:
    """Runs until a Cancel letter comes (or, stuck, until released)."""

    def __init__(self, stuck: bool = False) -> None:
        self.stuck, self.letters, self.ran = stuck, [], 0
        self._cancelled, self.release, self.started = threading.Event(), threading.Event(), threading.Event()

    def put_letter(self, letter) -> None:
        self.letters.append(letter)
        if isinstance(letter, Cancel) and not self.stuck:
            self._cancelled.set()

    def run(self) -> TaskResult:
        self.ran += 1
        self.started.set()
        (self.release if self.stuck else self._cancelled).wait(30)
        return TaskResult(TaskState.CANCELED)


def _slot_running(task: _Task, attempt: int = 7) -> tuple[TaskActor, threading.Thread]:
    slot = TaskActor()
    slot._task, slot._attempt = task, attempt
    runner = threading.Thread(target=slot.run, args=(attempt,), daemon=True)
    runner.start()
    assert task.started.wait(30)
    return slot, runner


def test_abandon_cancels_the_running_task_and_resets_the_slot():
    task = _Task()
    slot, runner = _slot_running(task)
    assert slot.abandon(3.0) is True
    runner.join(5)
    assert [type(x) for x in task.letters] == [Cancel] and slot._task is None and not slot._running


def test_abandon_reports_a_task_that_does_not_return_within_the_grace():
    task = _Task(stuck=True)
    slot, _ = _slot_running(task)
    try:
        assert slot.abandon(0.2) is False, "a stuck task's slot must be killed, not reused"
        assert slot._task is task, "the slot was reset under a task still running"
    finally:
        task.release.set()


def test_a_late_run_of_a_dead_coordinators_attempt_runs_nothing():
    slot, task = TaskActor(), _Task()
    slot._task, slot._attempt = task, 1_000_001  # set up by the coordinator that took the job over
    with pytest.raises(WeirError, match="no task of attempt 7 to run"):
        slot.run(7)
    assert task.ran == 0

"""A stop or rescale in progress as a state object, driven by hand with the
reports of the checkpoint flow and the job master: each event moves it on and
says what the request hears; an illegal one raises and leaves it as it was."""

from __future__ import annotations

from typing import Any

import pytest

from weir.runtime.errors import WeirError
from weir.runtime.executor import JobStatus
from weir.runtime.stopping import (
    AfterLastTask,
    NoStop,
    Redeploy,
    Redeploying,
    StopOutcome,
    Stopping,
    StopProtocol,
    StopProtocolError,
    WaitingForSlots,
)

NEW_GRAPH: Any = "the rescaled graph"  # the protocol only carries it


class Heard:
    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

    def reply(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error


def stopping(drain: bool = False, completed: bool = False) -> tuple[StopProtocol, Heard]:
    p, request = StopProtocol(), Heard()
    p.stop_started(7, drain, "/sp/7", request)
    if completed:
        p.savepoint_completed()
    return p, request


def rescaling(now: float = 1.0) -> tuple[StopProtocol, Heard]:
    p, request = StopProtocol(), Heard()
    assert p.rescale_requested(request, NEW_GRAPH, deadline=5.0) is None
    p.rescale_stop_started(9, "/cp/9", now)
    return p, request


def test_a_stop_whose_savepoint_completed_ends_the_job_and_answers_its_location():
    p, request = stopping(drain=False)
    assert p.stops_at(7) and not p.stops_at(6)
    assert p.stop_drain(7) is False and p.stop_drain(6) is None
    p.savepoint_completed()
    assert p.stops_at(7)
    assert p.all_finished() == (AfterLastTask.SUSPEND, None)
    [answer] = p.job_ended(JobStatus.SUSPENDED)
    answer.deliver("j")
    assert (answer.outcome, request.result, request.error) == (StopOutcome.STOPPED, "/sp/7", None)
    assert p.state == NoStop()


def test_a_drained_stop_ends_the_job_finished():
    p, _ = stopping(drain=True)
    assert p.stop_drain(7) is True
    p.savepoint_completed()
    assert p.all_finished() == (AfterLastTask.FINISH, None)


def test_a_job_whose_input_ended_before_the_stops_savepoint_completed_finishes_and_the_stop_did_not_happen():
    p, request = stopping()
    after, answer = p.all_finished()
    assert after is AfterLastTask.FINISH and answer is not None
    answer.deliver("j")
    assert str(request.error) == "stop of job 'j' did not happen: the job finished before its savepoint completed"
    assert p.state == NoStop() and p.job_ended(JobStatus.FINISHED) == []


def test_a_retried_savepoint_moves_the_stop_to_its_new_checkpoint():
    p, _ = stopping()
    p.savepoint_retried(8, "/sp/8")
    assert p.stops_at(8) and not p.stops_at(7)
    assert isinstance(p.state, Stopping) and p.state.location == "/sp/8"


def test_a_failed_savepoint_answers_that_the_job_keeps_running():
    p, request = stopping()
    p.savepoint_failed(WeirError("checkpoint 7 aborted")).deliver("j")
    assert str(request.error) == "stop of job 'j' failed, the job keeps running: checkpoint 7 aborted"
    assert p.state == NoStop()


def test_a_cancel_overtaking_a_stop_says_where_its_savepoint_is():
    p, request = stopping()
    [answer] = p.job_ended(JobStatus.CANCELED)
    answer.deliver("j")
    assert answer.outcome is StopOutcome.OVERTAKEN_BY_CANCEL and "completed at /sp/7 (it can be restored)" in str(
        request.error
    )


def test_a_cancel_before_the_stops_savepoint_completed_answers_that_the_stop_did_not_happen():
    """It answered that the savepoint failed and the job keeps running, while the cancel ended the job."""
    assert StopProtocol().job_cancelled() is None
    p, request = stopping()
    answer = p.job_cancelled()
    assert answer is not None and answer.outcome is StopOutcome.CANCELLED_FIRST
    answer.deliver("j")
    assert str(request.error) == "stop of job 'j' did not happen: the job was cancelled before its savepoint completed"
    assert p.state == NoStop() and not p.stops_at(7), "the abort that follows must not fail the stop again"
    assert p.job_ended(JobStatus.CANCELED) == []


def test_a_cancel_after_the_stops_savepoint_completed_leaves_the_answer_to_the_jobs_end():
    p, _ = stopping(completed=True)
    before = p.state
    assert p.job_cancelled() is None and p.state is before
    [answer] = p.job_ended(JobStatus.CANCELED)
    assert answer.outcome is StopOutcome.OVERTAKEN_BY_CANCEL


def test_a_rescale_waiting_behind_a_cancelled_stop_hears_at_the_jobs_end():
    p, rescale, stop = StopProtocol(), Heard(), Heard()
    p.rescale_requested(rescale, NEW_GRAPH, deadline=5.0)
    p.stop_started(7, False, "/sp/7", stop)
    p.job_cancelled()
    assert isinstance(p.state, WaitingForSlots) and p.state.request is rescale
    [answer] = p.job_ended(JobStatus.CANCELED)
    answer.deliver("j")
    assert str(rescale.error) == "job 'j' ended CANCELED before it was rescaled"


def test_a_job_failing_over_fails_its_stop_but_not_nothing():
    assert StopProtocol().job_failed(WeirError("boom")) is None
    p, request = stopping()
    answer = p.job_failed(WeirError("boom"))
    assert answer is not None and answer.outcome is StopOutcome.JOB_FAILED
    answer.deliver("j")
    assert str(request.error) == "stop of job 'j' failed: boom"


def test_a_rescale_waits_for_slots_then_stops_and_answers_its_pause_once_redeployed():
    p, request = StopProtocol(), Heard()
    p.rescale_requested(request, NEW_GRAPH, deadline=5.0)
    assert p.state == WaitingForSlots(request, NEW_GRAPH, 5.0)
    p.rescale_stop_started(9, "/cp/9", now=1.0)
    assert p.state == Stopping(9, False, "/cp/9", request, NEW_GRAPH, 1.0)
    assert p.stop_drain(9) is False
    p.savepoint_completed()
    assert p.all_finished() == (Redeploy(NEW_GRAPH), None)
    assert p.job_failed(WeirError("deploy failed")) is None  # the pause is answered whatever the deploy did
    answer = p.deployed(now=1.25)
    assert answer is not None
    answer.deliver("j")
    assert request.result == 0.25 and p.state == NoStop()


def test_a_rescale_waits_until_its_slots_are_up_or_its_deadline_passed():
    p, reserved = StopProtocol(), []
    assert not p.rescale_ready(1.0, lambda graph: reserved.append(graph) or True), "no rescale waits"
    p.rescale_requested(Heard(), NEW_GRAPH, deadline=5.0)
    assert not p.rescale_ready(1.0, lambda graph: reserved.append(graph) or False)
    assert p.rescale_ready(1.0, lambda graph: reserved.append(graph) or True)
    assert p.rescale_ready(5.0, lambda graph: reserved.append(graph) or False)
    assert reserved == [NEW_GRAPH] * 3, "the slots are asked for at every look"
    p.stop_started(7, False, "/sp/7", Heard())
    assert not p.rescale_ready(9.0, lambda graph: True), "it waits behind a stop"


def test_a_deploy_that_is_no_rescales_answers_nothing():
    for p in (StopProtocol(), stopping()[0], stopping(completed=True)[0]):
        before = p.state
        assert p.deployed(1.0) is None and p.state is before


def test_a_second_rescale_is_refused_while_the_first_waits():
    p, first = StopProtocol(), Heard()
    p.rescale_requested(first, NEW_GRAPH, deadline=5.0)
    second = Heard()
    answer = p.rescale_requested(second, NEW_GRAPH, deadline=6.0)
    assert answer is not None
    answer.deliver("j")
    assert str(second.error) == "job 'j' is being rescaled already: try again when that is done"
    assert isinstance(p.state, WaitingForSlots) and p.state.request is first


def test_a_rescale_whose_checkpoint_could_not_start_says_why():
    p, request = StopProtocol(), Heard()
    p.rescale_requested(request, NEW_GRAPH, deadline=5.0)
    p.rescale_not_started("its tasks have finished").deliver("j")
    assert str(request.error) == "job 'j' could not start a snapshot: its tasks have finished"
    assert p.state == NoStop()


def test_a_stop_while_a_rescale_waits_lets_it_go_ahead_if_the_stop_fails_and_fails_it_if_the_job_ends():
    p, rescale, stop = StopProtocol(), Heard(), Heard()
    p.rescale_requested(rescale, NEW_GRAPH, deadline=5.0)
    p.stop_started(7, False, "/sp/7", stop)
    p.savepoint_failed(WeirError("aborted"))
    assert isinstance(p.state, WaitingForSlots) and p.state.request is rescale
    p.stop_started(8, False, "/sp/8", stop)
    answers = p.job_ended(JobStatus.SUSPENDED)
    assert [a.outcome for a in answers] == [StopOutcome.ENDED_BEFORE_RESCALE, StopOutcome.STOPPED]
    for answer in answers:
        answer.deliver("j")
    assert str(rescale.error) == "job 'j' ended SUSPENDED before it was rescaled" and stop.result == "/sp/8"


@pytest.mark.parametrize(
    "make, event",
    [
        (lambda: StopProtocol(), lambda p: p.savepoint_failed(WeirError("x"))),
        (lambda: StopProtocol(), lambda p: p.savepoint_retried(2, "/sp/2")),
        (lambda: StopProtocol(), lambda p: p.savepoint_completed()),
        (lambda: StopProtocol(), lambda p: p.rescale_not_started("x")),
        (lambda: StopProtocol(), lambda p: p.rescale_stop_started(10, "/cp/10", 2.0)),
        (lambda: stopping()[0], lambda p: p.stop_started(8, True, "/sp/8", Heard())),
        (lambda: stopping()[0], lambda p: p.rescale_requested(Heard(), NEW_GRAPH, 5.0)),
        (lambda: stopping(completed=True)[0], lambda p: p.savepoint_completed()),
        (lambda: stopping(completed=True)[0], lambda p: p.savepoint_failed(WeirError("x"))),
        (lambda: stopping(completed=True)[0], lambda p: p.savepoint_retried(8, "/sp/8")),
        (lambda: rescaling()[0], lambda p: p.rescale_stop_started(10, "/cp/10", 2.0)),
        (lambda: rescaling()[0], lambda p: p.rescale_not_started("x")),
    ],
)
def test_an_illegal_event_raises_and_leaves_the_state_as_it_was(make, event):
    p = make()
    before = p.state
    with pytest.raises(StopProtocolError):
        event(p)
    assert p.state is before


def test_redeploying_takes_no_stop_until_the_rescale_answered():
    p, _ = rescaling()
    p.savepoint_completed()
    p.all_finished()
    assert isinstance(p.state, Redeploying)
    with pytest.raises(StopProtocolError):
        p.stop_started(10, False, "/sp/10", Heard())
    assert p.job_ended(JobStatus.FAILED) == [] and isinstance(p.state, Redeploying)

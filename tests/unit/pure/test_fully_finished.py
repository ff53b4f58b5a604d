"""When a checkpoint records an operator as fully finished (FLIP-147): once every
subtask exited, ran finish() before its snapshot (a final checkpoint: a restore
that ran finish() again would emit what it had emitted twice), or was itself
restored fully finished. A drained stop's own snapshot is the exception: there
the stop finished the tasks, and a restore from it reads on."""

from __future__ import annotations

import pytest

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.checkpointing import CheckpointCoordinator, plan_checkpoint
from weir.runtime.restore import restore_plan
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle

RAN_FINISH = SnapshotSummary(finished=True, has_state=True, has_union_state=False)
NOT_FINISHED = SnapshotSummary(finished=False, has_state=True, has_union_state=False)
RESTORED_FINISHED = SnapshotSummary(
    finished=True,
    has_state=False,
    has_union_state=False,
    finished_on_restore=True,
)


def _graph():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_sequence(0, 9).uid("src").sink_to(DiscardingSink()).uid("sink")  # one chain, two subtasks
    return env.get_job_graph("fully-finished")


def _metadata(exited, summary, stops=False):
    """A completed checkpoint where the ``exited`` subtasks had exited before the
    trigger and the others acknowledged with ``summary`` for each operator."""
    g = _graph()
    (vertex,) = g.vertices
    coordinator = CheckpointCoordinator(g)
    plan = plan_checkpoint(g, {(vertex, i) for i in exited})
    pending = coordinator.start(plan, 0.0, lambda cid: f"file:///tmp/chk-{cid}")
    for key in plan.to_ack:
        ops = {op.uid: summary for op in g.vertices[vertex].operators}
        coordinator.acknowledge(pending.checkpoint_id, key, StateHandle("file:///x", "0", 1), ops, 0.0)
    assert coordinator.is_complete(pending.checkpoint_id)
    return g, coordinator.metadata(pending.checkpoint_id, set(), stops)


@pytest.mark.parametrize(
    "exited,summary,stops,fully_finished",
    [
        ((), RAN_FINISH, False, True),  # the final checkpoint: every subtask ran finish(), none had exited
        ((0,), RAN_FINISH, False, True),  # one exited, one still up after finish()
        ((), RAN_FINISH, True, False),  # a drained stop's savepoint: a restore reads on
        ((0,), RAN_FINISH, True, False),
        ((0,), NOT_FINISHED, False, False),  # one exited, one still running
        ((0, 1), None, False, True),  # every subtask exited
        ((0,), RESTORED_FINISHED, False, True),  # one exited, one restored fully finished: it stays so
        ((), RESTORED_FINISHED, True, True),
    ],
)
def test_fully_finished_once_every_subtask_exited_ran_finish_or_was_restored_so(exited, summary, stops, fully_finished):
    g, metadata = _metadata(exited, summary, stops)
    assert {uid: op["fully_finished"] for uid, op in metadata["operators"].items()} == {
        "src": fully_finished,
        "sink": fully_finished,
    }
    assert all(r.fully_finished is fully_finished for r in restore_plan(metadata, g, False).values())

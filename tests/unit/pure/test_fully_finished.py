"""When a checkpoint records an operator as fully finished (FLIP-147): only once
every subtask exited, or was itself restored fully finished. As in Flink, a subtask
that ran finish() but still runs (a drained stop's savepoint, a final checkpoint)
does not count, so a restore runs it again from its state."""

from __future__ import annotations

import pytest

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.checkpointing import CheckpointCoordinator, plan_checkpoint
from weir.runtime.restore import restore_plan
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle

RAN_FINISH = SnapshotSummary(finished=True, has_state=True, has_union_state=False)
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


def _metadata(exited, summary):
    """A completed checkpoint where the ``exited`` subtasks had exited before the
    trigger and the others acknowledged with ``summary`` for each operator."""
    g = _graph()
    (vertex,) = g.vertices
    coordinator = CheckpointCoordinator(g)
    plan = plan_checkpoint(g, {(vertex, i) for i in exited})
    pending = coordinator.start(plan, 0.0, lambda cid: f"file:///tmp/chk-{cid}")
    for key in plan.to_ack:
        ops = {op.uid: summary for op in g.vertices[vertex].operators}
        coordinator.acknowledge(pending.checkpoint_id, key, StateHandle("file:///x", "0", 1), ops)
    assert coordinator.is_complete(pending.checkpoint_id)
    return g, coordinator.metadata(pending.checkpoint_id, set())


@pytest.mark.parametrize(
    "exited,summary,fully_finished",
    [
        ((), RAN_FINISH, False),  # a drained stop: every subtask ran finish(), none had exited
        ((0,), RAN_FINISH, False),  # one exited, one still up after finish()
        ((0, 1), None, True),  # every subtask exited
        ((0,), RESTORED_FINISHED, True),  # one exited, one restored fully finished: it stays so
        ((), RESTORED_FINISHED, True),
    ],
)
def test_fully_finished_once_every_subtask_exited_or_was_restored_so(exited, summary, fully_finished):
    g, metadata = _metadata(exited, summary)
    assert {uid: op["fully_finished"] for uid, op in metadata["operators"].items()} == {
        "src": fully_finished,
        "sink": fully_finished,
    }
    assert all(r.fully_finished is fully_finished for r in restore_plan(metadata, g, False).values())

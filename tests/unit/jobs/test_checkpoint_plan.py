"""The checkpoint plan with finished tasks (FLIP-147) and the union-state rule."""

from __future__ import annotations

import sys
import time

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.checkpointing import CheckpointCoordinator, plan_checkpoint
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle


def _graph():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    src = env.from_sequence(0, 9)
    src.forward().map(lambda x: x).name("pointwise").sink_to(DiscardingSink())  # forward: one producer each
    src.rebalance().map(lambda x: x).name("all-to-all").sink_to(DiscardingSink())  # every producer
    return env.get_job_graph("plan")


def test_nothing_finished_triggers_the_sources_and_waits_for_all():
    g = _graph()
    plan = plan_checkpoint(g, set())
    assert sorted(plan.to_trigger) == [("source-sequence", 0), ("source-sequence", 1)]
    assert len(plan.to_ack) == len(g.task_names())


def test_pointwise_edges_need_their_own_producer_finished_all_to_all_edges_every_producer():
    g = _graph()
    plan = plan_checkpoint(g, {("source-sequence", 0)})
    assert sorted(plan.to_trigger) == [("pointwise", 0), ("source-sequence", 1)]
    assert ("source-sequence", 0) not in plan.to_ack and plan.finished == {("source-sequence", 0)}
    plan = plan_checkpoint(g, {("source-sequence", 0), ("source-sequence", 1)})
    assert sorted(plan.to_trigger) == [("all-to-all", 0), ("all-to-all", 1), ("pointwise", 0), ("pointwise", 1)]


def test_union_list_state_of_a_partially_finished_operator_declines():
    g = _graph()
    coordinator = CheckpointCoordinator(g)
    plan = plan_checkpoint(g, set())
    pending = coordinator.start(plan, 0.0, lambda cid: f"file:///tmp/chk-{cid}")
    uid = g.vertices["pointwise"].operators[0].uid
    for key in plan.to_ack:
        finished = key == ("pointwise", 0)
        union = key[0] == "pointwise"
        ops = {op.uid: SnapshotSummary(finished, union, union) for op in g.vertices[key[0]].operators}
        coordinator.acknowledge(pending.checkpoint_id, key, StateHandle("file:///x", "0", 1), ops, 0.0)
    assert coordinator.is_complete(pending.checkpoint_id)
    assert coordinator.union_state_partially_finished(pending.checkpoint_id, set()) == "pointwise"
    assert uid in coordinator.metadata(pending.checkpoint_id, set())["operators"]


def test_the_checkpoint_history_stays_bounded_and_still_counts_every_checkpoint():
    """Issue #13 item 7: it grew by one entry per checkpoint, for the job's life."""
    g = _graph()
    coordinator = CheckpointCoordinator(g)
    for i in range(3 * CheckpointCoordinator.HISTORY_LIMIT):
        plan = plan_checkpoint(g, set())
        pending = coordinator.start(plan, float(i), lambda cid: f"file:///tmp/chk-{cid}")
        for key in plan.to_ack:
            coordinator.acknowledge(pending.checkpoint_id, key, StateHandle("file:///x", "0", 1), {}, float(i))
        if pending.checkpoint_id > 1:  # the job master discards all but the newest (retained=1)
            coordinator.history[pending.checkpoint_id - 1].discarded = True
        coordinator.complete(pending.checkpoint_id, float(i))
    assert coordinator.completed == 3 * CheckpointCoordinator.HISTORY_LIMIT
    assert len(coordinator.history) <= CheckpointCoordinator.HISTORY_LIMIT + 1
    assert max(coordinator.history) == 3 * CheckpointCoordinator.HISTORY_LIMIT  # the newest stay


def test_reading_the_history_while_checkpoints_run_sees_whole_entries(tmp_path):
    """Issue #13 item 7: `weir status` reads the history from another thread while
    the job master's loop adds, completes and trims entries."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(10).get_checkpoint_config().set_checkpoint_storage(str(tmp_path))
    env.from_generator(lambda i: i, records_per_second=2000).map(lambda x: x).sink_to(DiscardingSink())
    client = env.execute_async("history-race", executor="local")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        reads, newest = 0, 0
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline or newest < CheckpointCoordinator.HISTORY_LIMIT + 30:
            stats = client.checkpoints()
            ids = [s["checkpoint_id"] for s in stats]
            newest = max(ids, default=0)
            assert ids == sorted(set(ids)) and len(ids) <= CheckpointCoordinator.HISTORY_LIMIT + 5
            assert all(s["status"] in ("PENDING", "COMPLETED", "ABORTED") for s in stats)
            reads += 1
            assert time.monotonic() < deadline + 30, "checkpoints too slow to fill the history"
    finally:
        sys.setswitchinterval(switch)
        client.cancel()
    assert reads > 100


def test_all_but_the_newest_retained_completed_checkpoints_are_discarded_never_a_savepoint():
    from weir.runtime.checkpointing import CheckpointStats, CheckpointStatus

    coordinator = CheckpointCoordinator(_graph())
    for cid, status, kind in [
        (1, "COMPLETED", "checkpoint"),
        (2, "COMPLETED", "savepoint"),
        (3, "ABORTED", "checkpoint"),
        (4, "COMPLETED", "checkpoint"),
        (5, "COMPLETED", "checkpoint"),
    ]:
        coordinator.history[cid] = CheckpointStats(cid, CheckpointStatus(status), 0, kind, location=f"/cp/{cid}")
    assert coordinator.discard_beyond(2) == [(1, "/cp/1")]
    assert [cid for cid, s in coordinator.history.items() if s.discarded] == [1]
    assert coordinator.discard_beyond(1) == [(4, "/cp/4")]
    assert coordinator.discard_beyond(1) == []


def _slowly(x: int) -> int:
    time.sleep(0.03)  # the slow input: a barrier waits behind the record in hand
    return x


def test_each_acknowledgement_reports_how_long_the_subtasks_barriers_took_to_align(checkpoint_dir):
    """A subtask with two inputs, one of them slow: its barriers arrive apart, and
    the checkpoint's per-subtask figures (what ``weir checkpoints`` and the web UI
    show) carry that alignment time; a source's is 0 (no input to align)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    fast = env.from_sequence(0, 9).name("fast")
    slow = env.from_sequence(10, 69).name("slow").map(_slowly).name("slowly")
    fast.union(slow).key_by(lambda x: x % 2).reduce(lambda a, b: a + b).name("sums").sink_to(DiscardingSink())
    client = env.execute_async("alignment", executor="local")
    client.wait(60)
    acks = [(task, a["alignment_ms"]) for c in client.checkpoints() for task, a in c["subtasks"].items()]
    assert acks and all(isinstance(ms, int) and ms >= 0 for _, ms in acks)
    assert max(ms for task, ms in acks if task.startswith("sums/")) > 0
    assert all(ms == 0 for task, ms in acks if task.startswith("fast/"))

"""Deployment planning, tested by calling it: every task or a region's, its
channels wired both ways, its share of the restored state."""

from __future__ import annotations

from weir import DiscardingSink, StreamExecutionEnvironment
from weir.runtime.deployment import plan_deployments
from weir.runtime.task import OperatorRestore


def _graph():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    src = env.from_sequence(0, 9)
    src.forward().map(lambda x: x).name("pointwise").sink_to(DiscardingSink())
    src.rebalance().map(lambda x: x).name("all-to-all").sink_to(DiscardingSink())
    return env.get_job_graph("deploy")


def test_every_task_is_deployed_once_in_the_attempt_and_each_route_lands_on_its_own_input_channel():
    g = _graph()
    deployments = plan_deployments(g, 3, "a1", {})
    assert sorted(d.key for d in deployments) == sorted(g.task_names())
    assert {d.attempt for d in deployments} == {3} and {d.task.attempt_id for d in deployments} == {"a1"}
    by_key = {d.key: d for d in deployments}
    for d in deployments:
        for e, channels in zip(d.task.vertex.outputs, d.routes):
            for target, channel in channels:
                assert by_key[target].task.input_channels[channel] == (e.edge_id, d.key[1])
            assert len(channels) == (1 if e.pointwise else g.vertices[e.target].parallelism)


def test_a_region_deploys_only_its_tasks_with_their_operators_restored_state():
    g = _graph()
    source = g.vertices["source-sequence"]
    uid = source.operators[0].uid
    restore = {uid: OperatorRestore([None, None], False), "not-in-this-job": OperatorRestore([], True)}
    region = frozenset(
        {("source-sequence", 1), ("pointwise", 1)}
        | {k for k in g.task_names() if k[0] != "source-sequence" and k[0] != "pointwise"}
    )
    deployments = plan_deployments(g, 1, "a2", restore, region)
    assert {d.key for d in deployments} == region
    restored = {d.key: d.task.restore for d in deployments}
    assert restored[("source-sequence", 1)] == {uid: restore[uid]} and restored[("pointwise", 1)] == {}

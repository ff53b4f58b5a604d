"""Jobs on a Ray cluster of several nodes simulated on this machine
(``ray.cluster_utils.Cluster``: a head and worker raylets, each a node of its
own). A driver joins one Ray cluster for its life, so each scenario runs in a
process of its own and prints one JSON line:

    python -m tests.multinode lose-node WORKDIR
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import ray
from ray.cluster_utils import Cluster

from tests.checker import check_running_sums
from weir import JobClient, RestartStrategy, StreamExecutionEnvironment
from weir.actors.cluster import ensure_ray
from weir.connectors.files import FileSink, read_committed

RECORDS, RATE = 60_000, 15_000


def _nodes_of_tasks(client: JobClient) -> dict[str, str]:
    return {m["task"]: m["node_id"] for m in client.metrics()}


def lose_a_node(workdir: str) -> dict[str, Any]:
    """A keyed running sum spread over three nodes; one worker node hosting some of
    its task actors is removed at once (its raylet and every worker process die).
    The job must recover on the nodes left, with exact output."""
    # Ray declares a node dead after missed health checks: 5 x 3 s by default
    # (~17 s from the loss to the job running again here); checked faster here.
    checks = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": checks})
    workers = {node.node_id: node for node in (cluster.add_node(num_cpus=1) for _ in range(2))}
    cluster.wait_for_nodes()
    ensure_ray(cluster.address)

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{workdir}/chk")
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.5))
    out = f"{workdir}/out"
    (
        env.from_generator(lambda i: i, count=RECORDS, records_per_second=RATE)
        .map(lambda i: (i % 100, i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out))
    )
    client = env.execute_async("lose-a-node")
    while not (
        sum(m["records_in"] for m in client.metrics()) and any(c["status"] == "COMPLETED" for c in client.checkpoints())
    ):
        assert not client.status().is_terminal, "the job ended before the node was lost"
        time.sleep(0.05)
    before = _nodes_of_tasks(client)
    victim = next(n for n in before.values() if n in workers)
    on_victim = sorted(t for t, n in before.items() if n == victim)
    lost_at = time.monotonic()
    cluster.remove_node(workers[victim], allow_graceful=False)
    after: dict[str, str] = {}
    while not client.status().is_terminal:  # the tasks of the recovered job, once all run again
        now = _nodes_of_tasks(client)
        if len(now) == len(before) and victim not in now.values():
            after = now
            break
        time.sleep(0.1)
    recovered_s = time.monotonic() - lost_at
    result = client.wait(300)
    recovered = client.info()["coordinator_recovered"]  # Ray may have put the coordinator on the lost node
    verdict = check_running_sums(map(tuple, read_committed(out)), ((i % 100, i) for i in range(RECORDS)))
    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    ray.shutdown()
    cluster.shutdown()
    return {
        "nodes_before": len(set(before.values())),
        "tasks_on_lost_node": on_victim,
        "tasks_after_on_alive_nodes": bool(after) and all(n in alive for n in after.values()),
        "restarts": result.restarts,
        "coordinator_recovered": recovered,
        "status": result.status.value,
        "recovered_s": round(recovered_s, 2),
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "keys_wrong": verdict.keys_wrong,
        "outputs": verdict.outputs,
    }


SCENARIOS = {"lose-node": lose_a_node}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]](sys.argv[2])))

"""A running job's metrics appear in Ray's own metrics export (Prometheus text from
each node's metrics agent), which the Ray dashboard and Grafana read."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
import ray

from weir import DiscardingSink, StreamExecutionEnvironment

pytestmark = pytest.mark.ray


def _scrape() -> str:
    node = ray._private.worker.global_worker.node
    with urllib.request.urlopen(f"http://{node.node_ip_address}:{node.metrics_export_port}/metrics", timeout=10) as r:
        return r.read().decode()


def _value(text: str, metric: str, job: str) -> float:
    """The sum of a metric's samples for one job (0 when none is exported yet)."""
    return sum(
        float(v) for labels, v in re.findall(rf"^{metric}{{([^}}]*)}} (\S+)$", text, re.M) if f'job="{job}"' in labels
    )


def test_a_running_jobs_metrics_appear_in_rays_export(ray_cluster, checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_generator(lambda i: (i % 5, 1), records_per_second=2_000).key_by(lambda kv: kv[0]).sum(1).sink_to(
        DiscardingSink()
    )
    client = env.execute_async("metrics-job")
    try:
        # Each process exports on its own period: wait until every series the
        # test reads has arrived, then check them all in one scrape.
        deadline = time.monotonic() + 60
        while True:
            text = _scrape()
            exported = {
                "records in": _value(text, "ray_weir_task_records_in_total", "metrics-job") > 0,
                "records out": _value(text, "ray_weir_task_records_out_total", "metrics-job") > 0,
                "checkpoints": _value(text, "ray_weir_job_checkpoints_completed_total", "metrics-job") > 0,
                "subtask 1": re.search(r'^ray_weir_task_records_in_total\{[^}]*subtask="1"', text, re.M) is not None,
                "job gauges": "ray_weir_job_restarts{" in text and "ray_weir_job_last_checkpoint_duration_ms{" in text,
            }
            if all(exported.values()):
                break
            assert time.monotonic() < deadline, (
                f"not exported: {[k for k, ok in exported.items() if not ok]}; weir lines: {[line for line in text.splitlines() if 'weir' in line][:10]}"
            )
            time.sleep(1)
    finally:
        client.cancel()

"""Kafka → keyed running sum → Kafka, exactly-once on Ray: task actors killed at
random (``ray.kill`` and SIGKILL) while a bounded read of a 4-partition topic
runs, and a task dying in the final checkpoint; a read_committed consumer counts
lost and duplicated updates. ``WEIR_KAFKA_SEEDS`` sets how many seeds (2 in CI;
50 by hand for README's figures)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from tests.chaos import kill_random_task
from tests.checker import check_running_sums
from tests.integration.test_kafka import _env, _fill, _read_committed, _running_sum_job, _topic
from weir import JobStatus

pytestmark = pytest.mark.ray

N = 500_000
SEEDS = int(os.environ.get("WEIR_KAFKA_SEEDS", "2"))
INPUTS = [(i % 1000, i) for i in range(N)]


@pytest.fixture(scope="module")
def input_topic(kafka_broker):
    topic = _topic(kafka_broker, 4)
    _fill(kafka_broker, topic, INPUTS, 4)
    return topic


@pytest.mark.parametrize("seed", range(SEEDS))
def test_kafka_to_kafka_on_ray_is_exactly_once_under_actor_kills(
    ray_cluster, kafka_broker, input_topic, checkpoint_dir, seed
):
    rng = random.Random(seed)
    sink = _topic(kafka_broker, 2)
    env = _env(checkpoint_dir, p=2, interval_ms=300)
    _running_sum_job(env, kafka_broker, input_topic, sink)
    client = env.execute_async(f"kafka-ray-{seed}")
    killed: list[str] = []

    def kill() -> None:
        # After a first checkpoint (a kill before it proves little), 3 kills while it runs.
        while not client.status().is_terminal and not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
            time.sleep(0.05)
        while len(killed) < 3 and not client.status().is_terminal:
            time.sleep(rng.uniform(0.2, 0.8))
            if (name := kill_random_task(client, rng)) is not None:
                killed.append(name)

    killer = threading.Thread(target=kill)
    killer.start()
    result = client.wait()
    killer.join()
    assert result.status is JobStatus.FINISHED and killed
    verdict = check_running_sums([tuple(r) for r in _read_committed(kafka_broker, sink)], INPUTS)
    print(f"seed {seed}: killed {killed}, restarts {result.restarts}, {verdict}")
    assert (verdict.lost, verdict.duplicated, verdict.keys_wrong, verdict.outputs) == (0, 0, 0, N), (
        f"seed {seed}, killed {killed}"
    )


@pytest.mark.parametrize("moment", ["task-finishing", "task-writing-snapshot"])
def test_a_task_dying_in_the_final_checkpoint_of_a_bounded_kafka_read_duplicates_nothing(
    ray_cluster, kafka_broker, checkpoint_dir, tmp_path, monkeypatch, moment
):
    """No periodic checkpoint comes (60 s interval): the task dies finishing its
    input or writing the bounded job's final checkpoint, before anything was
    published; the restart reads the topic again and publishes each update once."""
    mark = tmp_path / "fault-mark"
    monkeypatch.setenv("WEIR_FAULT", moment)
    monkeypatch.setenv("WEIR_FAULT_MARK", str(mark))
    n = 20_000
    inputs = INPUTS[:n]
    source, sink = _topic(kafka_broker, 4), _topic(kafka_broker, 2)
    _fill(kafka_broker, source, inputs, 4)
    env = _env(checkpoint_dir, p=2, interval_ms=60_000)
    _running_sum_job(env, kafka_broker, source, sink)
    result = env.execute(f"kafka-final-{moment}")
    assert mark.read_text() == moment and result.restarts >= 1
    verdict = check_running_sums([tuple(r) for r in _read_committed(kafka_broker, sink)], inputs)
    assert (verdict.lost, verdict.duplicated, verdict.keys_wrong, verdict.outputs) == (0, 0, 0, n)


def test_the_kafka_example_counts_words_exactly_once(ray_cluster, kafka_broker, tmp_path):
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [
            sys.executable,
            str(root / "examples" / "kafka_word_count.py"),
            "--bootstrap",
            kafka_broker.bootstrap,
            "--demo",
            "--input-topic",
            "example-lines",
            "--output-topic",
            "example-counts",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        'final counts: {"batch": 1, "be": 2, "is": 1, "not": 1, "or": 2, "question": 1, "stream": 1, "that": 1, "the": 1, "to": 4}'
        in out.stdout
    )

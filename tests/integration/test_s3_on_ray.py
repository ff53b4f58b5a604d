"""A job on S3 on the test session's Ray cluster: checkpoint storage and the
FileSink on moto's S3 server (a real HTTP endpoint, named in the URIs' query
options; the actors get their credentials from the cluster's environment), while
task actors and the job coordinator are killed. Lost 0, duplicated 0."""

from __future__ import annotations

import random

import pytest

from tests.chaos import keyed_sum_with_kills, kill_coordinator, kill_random_task

pytestmark = pytest.mark.ray

RECORDS = 200_000


def test_a_job_on_s3_loses_and_duplicates_nothing_when_tasks_and_its_coordinator_are_killed(
    ray_cluster, s3_server, tmp_path
):
    kills: list[str] = []

    def victim(client, rng: random.Random) -> str | None:
        kills.append("coordinator" if len(kills) == 1 else "task")  # the second death is the coordinator's
        return (kill_coordinator if kills[-1] == "coordinator" else kill_random_task)(client, rng)

    run = keyed_sum_with_kills(
        7,
        s3_server.uri("out"),
        s3_server.uri("checkpoints"),
        records=RECORDS,
        kills=3,
        rate=25_000,
        pause_s=(1.0, 1.5),
        victim=victim,
        unpace_gate=str(tmp_path / "kills-done"),  # then the rest at full speed
    )
    assert (run.verdict.lost, run.verdict.duplicated, run.verdict.keys_wrong) == (0, 0, 0), run
    assert run.verdict.outputs == RECORDS
    assert len(run.killed) == 3 and "job coordinator (ray.kill)" in run.killed, run.killed

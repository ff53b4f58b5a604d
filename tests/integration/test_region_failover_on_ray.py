"""Region failover with task actors: kill one pipeline's actor and the other
pipeline's actors keep reading while it is replaced."""

from __future__ import annotations

import pytest

from tests.regions import kill_and_watch, outputs, two_pipelines

pytestmark = pytest.mark.ray


def test_killing_an_actor_restarts_its_region_while_the_other_pipeline_goes_on(ray_cluster, tmp_path):
    env = two_pipelines(f"file://{tmp_path}/chk", str(tmp_path / "a"), str(tmp_path / "b"))
    client = env.execute_async("ray-regions")
    window = kill_and_watch(client, ("a", 0), "b", probe=lambda: client.info()["restarting_tasks"])
    result = client.wait(180)
    print(
        f"pipeline b read {window.other_after - window.other_before} records in the {window.away_s:.2f} s a/0 was away"
    )
    assert window.other_after > window.other_before, f"pipeline b stood still while a/0 was away: {window}"
    assert outputs(str(tmp_path / "a"), "a") == (0, 0, [])
    assert outputs(str(tmp_path / "b"), "b") == (0, 0, [])
    assert result.restarts == 1
    assert window.probed == ["a/0"], "weir status names the task being restarted"

"""Ray resources per operator and placement."""

from __future__ import annotations

import time

import pytest
import ray

from weir import (
    DiscardingSink,
    InvalidConfigurationError,
    InvalidJobGraphError,
    JobExecutionError,
    JobStatus,
    NoResourceAvailableError,
    RestartStrategy,
    StreamExecutionEnvironment,
)

pytestmark = pytest.mark.ray


def test_operators_get_the_resources_they_ask_for(ray_cluster, checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_placement("pack")
    (
        env.from_generator(lambda i: i, records_per_second=100)
        .name("src")
        .rebalance()
        .map(lambda x: x)
        .name("score")
        .with_resources(num_cpus=0.5)
        .sink_to(DiscardingSink())
    )
    client = env.execute_async("resources")
    try:
        client.savepoint()  # returns once the tasks run
        score = client.task_actor("score", 0)
        source = client.task_actor("src", 0)
        assert ray.get(score.assigned_resources.remote())["CPU"] == 0.5
        assert ray.get(source.assigned_resources.remote())["CPU"] == 0.1  # the default share
    finally:
        client.cancel()


@pytest.mark.parametrize(
    "ask,text",
    [
        (dict(num_gpus=1), "asks for num_cpus=0.1, num_gpus=1 per task"),
        (dict(resources={"ssd": 1}), "asks for num_cpus=0.1, ssd=1 per task"),
        (dict(num_cpus=64), "asks for num_cpus=64 per task"),
    ],
)
def test_a_request_no_node_can_meet_is_refused_at_submission(ray_cluster, checkpoint_dir, ask, text):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_sequence(0, 9).map(lambda x: x).name("score").with_resources(**ask).sink_to(DiscardingSink())
    with pytest.raises(
        InvalidJobGraphError,
        match=r"operator 'score' \(in 'Source: sequence -> score -> Sink: DiscardingSink'\) asks for",
    ) as info:
        env.execute("infeasible")
    assert text in str(info.value) and "which no node of this Ray cluster has (nodes offer: CPU=" in str(info.value)


def test_bad_resource_values_and_placements_name_the_setting():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match="resource num_gpus=-1"):
        env.from_sequence(0, 1).map(lambda x: x).with_resources(num_gpus=-1)
    with pytest.raises(InvalidConfigurationError, match="placement='everywhere'"):
        env.set_placement("everywhere")


@ray.remote
class _Hog:
    def ready(self) -> bool:
        return True


def _hog_the_free_cpus():
    """Actors holding all but a sliver of the free CPUs: the cluster could host a
    task asking for one CPU, but not now. CPUs freed meanwhile (the pool retiring
    the idle slots of the test before) are taken too, until none were for 2 s:
    a hog of the first moment's free CPUs alone let such a task in."""
    hogs = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 2.0:
        free = ray.available_resources().get("CPU", 0) - 0.05
        if free >= 0.05:
            hogs.append(_Hog.options(num_cpus=round(free, 4)).remote())
            ray.get(hogs[-1].ready.remote())
            quiet_since = time.monotonic()
        time.sleep(0.1)
    return hogs


def test_a_job_the_cluster_has_no_room_for_fails_naming_what_it_asks(ray_cluster, checkpoint_dir):
    hogs = _hog_the_free_cpus()
    try:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
        env.set_restart_strategy(RestartStrategy.no_restart()).set_slot_request_timeout(2000)
        env.from_sequence(0, 9).map(lambda x: x).name("score").with_resources(num_cpus=1).sink_to(DiscardingSink())
        with pytest.raises(JobExecutionError) as info:
            env.execute("no-room")
        assert isinstance(info.value.cause, NoResourceAvailableError)
        assert "found no room on the Ray cluster within the slot request timeout of 2 s" in str(info.value)
        assert (
            "operator 'score' (in 'Source: sequence -> score -> Sink: DiscardingSink') asks for num_cpus=1 per task; free now: num_cpus="
            in str(info.value)
        )
    finally:
        for hog in hogs:
            ray.kill(hog)


def test_cancel_reaches_a_job_waiting_for_room(ray_cluster, checkpoint_dir):
    hogs = _hog_the_free_cpus()
    try:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
        env.from_sequence(0, 9).map(lambda x: x).name("score").with_resources(num_cpus=1).sink_to(DiscardingSink())
        client = env.execute_async("waiting-for-room")  # the default timeout is 5 minutes
        time.sleep(1.0)
        assert client.get_job_status() is JobStatus.RUNNING  # its tasks wait for room
        client.cancel(timeout_s=5)  # raises TimeoutError when the cancel does not reach it
        assert client.get_job_status() is JobStatus.CANCELED
    finally:
        for hog in hogs:
            ray.kill(hog)

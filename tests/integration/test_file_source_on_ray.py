"""A watched folder on a real local Ray cluster: files keep arriving while the
source's and the sum's task actors are killed; the unit test's job and checker."""

from __future__ import annotations

import pytest

from tests.unit.jobs.test_file_source import run_with_kills
from weir import RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import FileSource

pytestmark = pytest.mark.ray


def test_files_arriving_while_task_actors_are_killed_are_read_exactly_once(ray_cluster, checkpoint_dir, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.2))
    v = run_with_kills(env, tmp_path, FileSource, executor=None, timeout_s=300)
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v

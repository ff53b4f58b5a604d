"""A task actor's process ends abruptly at a chosen moment (``WEIR_FAULT``, an
``os._exit`` like SIGKILL): while aligning barriers, while writing its snapshot,
while finishing. The job restarts once and its output stays exact."""

from __future__ import annotations

import pytest

from tests.checker import check_running_sums
from weir import JobStatus, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed

pytestmark = pytest.mark.ray

N = 150_000


@pytest.mark.parametrize("moment", ["task-aligning", "task-writing-snapshot", "task-finishing"])
def test_a_task_dying_at_a_chosen_moment_loses_and_duplicates_nothing(
    ray_cluster, checkpoint_dir, out_dir, tmp_path, monkeypatch, moment
):
    mark = tmp_path / "fault-mark"
    monkeypatch.setenv("WEIR_FAULT", moment)
    monkeypatch.setenv("WEIR_FAULT_MARK", str(mark))
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (
        env.from_generator(lambda i: (i % 100, i), count=N, records_per_second=50_000)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir))
    )
    result = env.execute(f"dies-{moment}")
    assert mark.read_text() == moment  # a task did die there
    assert result.status is JobStatus.FINISHED and result.restarts == 1
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 100, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v

"""Jobs whose checkpoints and FileSink live on S3 (moto's server, a real HTTP
endpoint named in the URIs' query options), on the in-process executor: tasks
killed mid-run lose and duplicate nothing, and a savepoint asked for without a
path lands on S3 and restores. On object storage a rename is a copy: a FileSink
commit copies each pending file to its visible name, and a restore that finds
the copy already made leaves it (the commit is idempotent)."""

from __future__ import annotations

import pytest

from tests.checker import check_running_sums
from tests.kills import kill_each_after_checkpoints
from tests.unit.jobs.test_exactly_once_edges import N
from tests.unit.jobs.test_exactly_once_edges import _job as _keyed_sum
from weir import JobStatus
from weir.connectors.files import read_committed


@pytest.fixture
def s3(s3_server):
    return s3_server.uri("checkpoints"), s3_server.uri("out")


def test_a_keyed_sum_on_s3_storage_into_an_s3_file_sink_is_exact_with_tasks_killed(s3, tmp_path):
    checkpoints, out = s3
    gate = tmp_path / "killed"  # half the input flows at 8,000 a second, then waits until both kills landed
    client = _keyed_sum(checkpoints, out, rate=8_000, interval_ms=300, gate=str(gate)).execute_async(
        "s3-kills", executor="local"
    )
    kill_each_after_checkpoints(client, "reduce", checkpoints=2)
    gate.touch()
    result = client.wait(120)
    assert result.status is JobStatus.FINISHED and result.restarts == 2
    v = check_running_sums(map(tuple, read_committed(out)), ((i % 50, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v


def test_a_savepoint_without_a_path_lands_on_s3_and_restores(s3, tmp_path):
    checkpoints, out = s3
    client = _keyed_sum(checkpoints, out, interval_ms=300, gate=str(tmp_path / "never-opened")).execute_async(
        "s3-savepoint", executor="local"
    )
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" for s in c.checkpoints()), 60)
    location = client.savepoint()
    path, query = checkpoints.split("?")
    assert location.startswith(f"{path}/s3-savepoint/savepoints/savepoint-") and location.endswith("?" + query)
    client.cancel()
    resumed = _keyed_sum(checkpoints, out, savepoint=location, rate=None).execute("s3-savepoint", executor="local")
    assert resumed.status is JobStatus.FINISHED
    rows = read_committed(out)
    assert {k: max(t for kk, t in rows if kk == k) for k in range(50)} == {k: sum(range(k, N, 50)) for k in range(50)}

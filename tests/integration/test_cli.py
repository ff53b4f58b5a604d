"""The weir CLI against the test session's Ray cluster, as a user runs it."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from weir import DiscardingSink, JobStatus, StreamExecutionEnvironment
from weir.actors.cli import main

pytestmark = pytest.mark.ray


# The `weir` command the install put beside this Python (pyproject's [project.scripts]).
WEIR = os.path.join(os.path.dirname(sys.executable), "weir")


def weir_process(address: str, *args: str) -> subprocess.CompletedProcess:
    """``weir`` as a user's shell runs it: the installed entry point, a process of
    its own (``run`` executes the user's script in it). Only where the process is
    what a test shows: each costs 2.4-3.1 s of CPU importing and joining Ray, and
    a job it runs gets fresh task processes."""
    env = {**os.environ, "RAY_ADDRESS": address}
    return subprocess.run([WEIR, *args], env=env, capture_output=True, text=True, timeout=120)


# What Ray prints on this test driver's stdout for the cluster's processes ("(raylet) WARNING:
# ..."), caught with the command's output when the command runs in this process.
RAY_FORWARDED = re.compile(r"^(\x1b\[\d+m)?\((raylet|pid=|[A-Za-z_]+ pid=)")


def weir(address: str, *args: str) -> subprocess.CompletedProcess:
    """``weir`` run in this process (a command that only talks to the cluster
    behaves the same; a new Python process with Ray costs seconds per call).
    ``run`` executes the script here too, on this driver's task processes; the
    environment it sets for the script is put back afterwards."""
    environ = dict(os.environ)
    with CliRunner().isolation(env={"RAY_ADDRESS": address}) as (out, err, _):
        sys.argv, argv = ["weir", *args], sys.argv
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        finally:
            sys.argv = argv
            sys.stdout.flush()  # a script's print() (`run`) waits in the text layer, unlike click.echo's
            sys.stderr.flush()
            for key in os.environ.keys() - environ.keys():  # what `run` set for its script
                del os.environ[key]
            os.environ.update(environ)
        printed = "".join(line for line in out.getvalue().decode().splitlines(True) if not RAY_FORWARDED.match(line))
        return subprocess.CompletedProcess(["weir", *args], code, printed, err.getvalue().decode())


@pytest.fixture
def running_job(ray_cluster, checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_generator(lambda i: (i % 5, 1), records_per_second=5_000).key_by(lambda kv: kv[0]).sum(1).name(
        "count"
    ).sink_to(DiscardingSink())
    client = env.execute_async("cli-job")
    deadline = time.monotonic() + 60
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    yield client
    if not client.status().is_terminal:
        client.cancel()


def test_list_status_checkpoints_pool_errors_kill_cancel(ray_cluster, running_job, tmp_path):
    """Every command on one running job, the ones that change it last (a job of
    its own per command costs a deploy and a first checkpoint each)."""
    listed = json.loads(weir(ray_cluster, "--json", "list").stdout)
    assert {"job": "cli-job", "status": "RUNNING"}.items() <= next(j for j in listed if j["job"] == "cli-job").items()

    table = weir(ray_cluster, "status", "cli-job").stdout
    assert "RUNNING" in table and "count/1" in table and "records_in" in table

    chks = json.loads(weir(ray_cluster, "--json", "checkpoints", "cli-job").stdout)
    assert any(c["status"] == "COMPLETED" and c["size_bytes"] > 0 for c in chks)

    picture = json.loads(weir(ray_cluster, "--json", "graph", "cli-job", "-o", str(tmp_path / "g.svg")).stdout)
    svg = open(picture["graph"]).read()
    assert svg.startswith("<svg") and ">count</text>" in svg and ">hash</text>" in svg

    # The pool shows leased and idle task actors and refuses to stop under a running job.
    shown = json.loads(weir(ray_cluster, "--json", "pool").stdout)
    assert "cli-job" in shown["jobs"]
    assert sum(s["leased"] for s in shown["shapes"]) >= 4, shown  # 2 sources and 2 counts
    assert shown["settings"]["reuse"] is True
    stop = weir(ray_cluster, "pool", "stop")
    assert stop.returncode == 1
    assert "jobs are running on the pool:" in stop.stderr and "cli-job" in stop.stderr, stop.stderr

    # The errors a user sees.
    missing = weir(ray_cluster, "status", "no-such-job")
    assert missing.returncode == 1
    assert "Error: no job named 'no-such-job' on this Ray cluster (see `weir list`)" in missing.stderr
    bad_task = weir(ray_cluster, "kill", "cli-job", "count", "7")
    assert bad_task.returncode == 1
    assert "job 'cli-job' has no task count/7 running (the job has no such task); its tasks:" in bad_task.stderr

    killed = weir(ray_cluster, "--json", "kill", "cli-job", "count", "1")
    assert json.loads(killed.stdout) == {"killed": "cli-job/count/1"}
    deadline = time.monotonic() + 60
    while running_job.info()["restarts"] < 1 or running_job.status() is not JobStatus.RUNNING:
        assert time.monotonic() < deadline, running_job.info()
        time.sleep(0.2)

    out = weir(ray_cluster, "--json", "cancel", "cli-job")
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 60
    while running_job.status() is not JobStatus.CANCELED:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert json.loads(weir(ray_cluster, "--json", "status", "cli-job").stdout)["status"] == "CANCELED"


def test_run_submits_a_script_and_its_process_prints_no_deprecation_warning(ray_cluster, tmp_path):
    """The installed `weir` runs the script in a process of its own with the
    default parallelism it was given (weir's own is 1). Every job's coordinator
    printed Ray's `actor_id` deprecation warning into that process's output."""
    script = tmp_path / "job.py"
    script.write_text(
        "from weir import StreamExecutionEnvironment, DiscardingSink\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_sequence(1, 1000).map(lambda x: x).sink_to(DiscardingSink())\n"
        "r = env.execute('cli-run')\n"
        "print('parallelism', env.get_parallelism(), r.status.value)\n"
    )
    out = weir_process(ray_cluster, "run", "--parallelism", "2", str(script))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "parallelism 2 FINISHED" in out.stdout
    assert "DeprecationWarning" not in out.stdout + out.stderr, out.stdout + out.stderr


JOB = """
import sys
from weir import StreamExecutionEnvironment
from weir.connectors.files import FileSink
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(200)
env.get_checkpoint_config().set_checkpoint_storage(sys.argv[2])
(env.from_generator(lambda i: (i % 10, i), count=40_000, records_per_second=float(sys.argv[3])).uid("gen")
    .key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sums")
    .sink_to(FileSink(sys.argv[1])).uid("out"))
print("STATUS", env.execute("cli-sp").status.value)
"""


def test_savepoint_stop_and_run_from_savepoint(ray_cluster, tmp_path, checkpoint_dir):
    from tests.checker import check_running_sums
    from weir.connectors.files import read_committed
    from weir.runtime.executor import JobStatus

    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = str(tmp_path / "out")
    env = {**os.environ, "RAY_ADDRESS": ray_cluster}
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "weir.actors.cli",
            "run",
            "--parallelism",
            "2",
            str(script),
            out,
            checkpoint_dir,
            "1000",
        ],  # 40 s of input: the stop lands before its end
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            chk = weir(ray_cluster, "--json", "checkpoints", "cli-sp")
            if chk.returncode == 0 and any(c["status"] == "COMPLETED" for c in json.loads(chk.stdout)):
                break
            assert time.monotonic() < deadline, chk.stderr
            time.sleep(0.3)
        sp1 = json.loads(weir(ray_cluster, "--json", "savepoint", "cli-sp").stdout)  # no path: the job's default folder
        assert sp1["savepoint"].startswith(f"{checkpoint_dir}/cli-sp/savepoints/savepoint-")
        assert pathlib.Path(sp1["savepoint"].removeprefix("file://"), "_metadata").exists()
        stop = weir(ray_cluster, "--json", "stop", "cli-sp", "--savepoint-path", str(tmp_path / "sp2"))
        assert stop.returncode == 0, stop.stderr
        stopped = json.loads(stop.stdout)
        assert stopped["status"] == JobStatus.SUSPENDED.value
        assert "STATUS SUSPENDED" in first.communicate(timeout=120)[0]
    finally:
        first.kill()
    again = weir(ray_cluster, "stop", "cli-sp")
    assert again.returncode == 1 and "Error: job 'cli-sp' is SUSPENDED: no savepoint or stop now" in again.stderr

    resumed = weir(  # in this process: what it shows is the restore, not a new driver
        ray_cluster,
        "run",
        "--parallelism",
        "3",
        "--from-savepoint",
        stopped["savepoint"],
        str(script),
        out,
        checkpoint_dir,
        "1e9",
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "STATUS FINISHED" in resumed.stdout
    v = check_running_sums(map(tuple, read_committed(out)), ((i % 10, i) for i in range(40_000)))
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v

    missing = weir(
        ray_cluster, "run", "--from-savepoint", str(tmp_path / "nope"), str(script), out, checkpoint_dir, "1e9"
    )
    assert missing.returncode == 1
    assert f"Error: checkpoint file file://{tmp_path}/nope/_metadata is unusable: missing" in missing.stderr


def test_stop_with_drain_and_no_path_ends_finished_with_a_retained_checkpoint(ray_cluster, running_job, checkpoint_dir):
    out = weir(ray_cluster, "--json", "stop", "cli-job", "--drain")
    assert out.returncode == 0, out.stderr
    stopped = json.loads(out.stdout)
    assert stopped["status"] == "FINISHED"
    assert stopped["savepoint"].startswith(checkpoint_dir + "/cli-job/") and "/chk-" in stopped["savepoint"]
    assert os.path.exists(stopped["savepoint"][len("file://") :] + "/_metadata")


def test_scale_changes_parallelism_of_a_running_job(ray_cluster, running_job):
    out = weir(ray_cluster, "--json", "scale", "cli-job", "count=3")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["parallelism"] == {"count": 3} and answer["pause_s"] > 0
    assert sorted(t for t in running_job.tasks() if t.startswith("cli-job/count/")) == [
        f"cli-job/count/{i}" for i in range(3)
    ]
    bad = weir(ray_cluster, "scale", "cli-job", "nope=2")
    assert bad.returncode == 1 and "has no operator named 'nope'" in bad.stderr

"""Many jobs on one Ray cluster, as users meet them: drivers in separate processes
(another notebook, another user) on the test session's cluster, one name
submitted twice at once, two jobs on one output folder, a coordinator restart
after a rescale. Each test failed on the code before applications were kept
apart (2026-11-25): the second driver's records went through the first one's
patched ``json.dumps``, both submissions of one name ran, and the second job on
a folder deleted the first one's pending files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import ray

from tests.checker import check_running_sums
from weir import JobStatus, StreamExecutionEnvironment
from weir.actors.executor import RayJobClient
from weir.actors.pool import get_pool
from weir.connectors.files import FileSink, read_committed
from weir.runtime.errors import JobAlreadyRunningError, JobLoadError, OutputInUseError

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


class Driver:
    """A driver process of its own on the session's cluster: it runs ``code`` and
    then waits until :meth:`finish` (a notebook that stays open)."""

    def __init__(self, address: str, code: str) -> None:
        script = textwrap.dedent(code) + "\nprint('DRIVER-DONE', flush=True)\nimport sys; sys.stdin.read()\n"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**os.environ, "RAY_ADDRESS": address},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def wait_done(self, timeout_s: float = 120) -> list[str]:
        """Its output up to the point where it waits; fails with its stderr if it died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.strip() == "DRIVER-DONE":
                return self.lines
            self.lines.append(line.rstrip("\n"))
        self.proc.kill()
        raise AssertionError(f"driver did not finish: {self.lines}\n{self.proc.stderr.read()[-4000:]}")

    def finish(self) -> str:
        """Let it exit; returns its stderr."""
        _, err = self.proc.communicate("", timeout=60)
        return err


_MEDDLE = """
    import json, os, threading, time
    from weir import StreamExecutionEnvironment
    from weir.connectors.files import FileSink

    def meddle(i):
        # What one application's code may leave in its process: a patched
        # library, an environment variable, a thread that outlives the job.
        if not hasattr(json, "patched_by_a"):
            dumps = json.dumps
            json.dumps = lambda obj, *a, **k: dumps({{"patched by A": obj}}, *a, **k)
            json.patched_by_a = True
            os.environ["WEIR_TEST_SET_BY_A"] = "1"
            threading.Thread(target=time.sleep, args=(3600,), name="spy-of-a", daemon=True).start()
        return [i, os.getpid()]

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_collection(list(range(200))).map(meddle).sink_to(FileSink({out!r}, format="jsonl"))
    print("A", env.execute("meddling-a").status.name, flush=True)
"""


def _probe(i: int) -> list:
    import json
    import os
    import threading

    return [
        i,
        os.getpid(),
        os.environ.get("WEIR_TEST_SET_BY_A"),
        any(t.name == "spy-of-a" for t in threading.enumerate()),
        hasattr(json, "patched_by_a"),
    ]


def test_another_drivers_job_never_runs_in_the_processes_of_the_first(ray_cluster, tmp_path):
    a = Driver(ray_cluster, _MEDDLE.format(out=str(tmp_path / "a")))
    try:
        assert a.wait_done() == ["A FINISHED"]
        a_pids = {pid for _, pid in read_committed(str(tmp_path / "a"))}  # the FileSink encodes without json.dumps
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        env.from_collection(list(range(200))).map(_probe).sink_to(FileSink(str(tmp_path / "b"), format="jsonl"))
        assert env.execute("probing-b").status is JobStatus.FINISHED
        rows = read_committed(str(tmp_path / "b"))
        assert all(isinstance(r, list) for r in rows), f"B's rows went through A's json.dumps: {rows[:2]}"
        assert sorted(r[0] for r in rows) == list(range(200))
        assert [r for r in rows if r[2:] != [None, False, False]] == [], "B saw A's variable, thread or patch"
        assert not {r[1] for r in rows} & a_pids, "B's tasks ran in A's processes"
    finally:
        a.finish()


def test_an_ended_drivers_processes_retire(ray_cluster, tmp_path):
    a = Driver(ray_cluster, _MEDDLE.format(out=str(tmp_path / "a")))
    a.wait_done()
    pool = get_pool()
    owners = ray.get(pool.slot_owners.remote())
    a_apps = set(owners.values()) - {None, ray.get_runtime_context().get_job_id()}
    assert a_apps, f"A's slots are not A's: {owners}"
    a.finish()
    deadline = time.monotonic() + 30
    while set(ray.get(pool.slot_owners.remote()).values()) & a_apps:
        assert time.monotonic() < deadline, "the ended driver's idle processes are still in the pool"
        time.sleep(0.25)


_SUBMIT_AT_ONCE = """
    import os, time
    from weir import StreamExecutionEnvironment
    from weir.runtime.errors import JobAlreadyRunningError
    from weir.connectors.files import FileSink
    from weir.actors.cluster import ensure_ray

    ensure_ray()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.from_generator(lambda i: i, count=10_000_000, records_per_second=1000).sink_to(FileSink({out!r}, format="jsonl"))
    while not os.path.exists({go!r}):
        time.sleep(0.001)
    try:
        env.execute_async("twice-at-once")
        print("STARTED", flush=True)
    except JobAlreadyRunningError as exc:
        print("REFUSED", exc, flush=True)
"""


def test_one_name_submitted_twice_at_once_runs_once_and_the_other_is_told_why(ray_cluster, tmp_path):
    go = tmp_path / "go"
    drivers = [
        Driver(ray_cluster, _SUBMIT_AT_ONCE.format(out=str(tmp_path / f"out-{i}"), go=str(go))) for i in range(2)
    ]
    try:
        time.sleep(8)  # both connected and waiting (a driver joins the cluster in a few seconds)
        go.touch()
        said = sorted(" ".join(d.wait_done()) for d in drivers)
        client = RayJobClient.attach("twice-at-once")
        client.wait_until(lambda c: c.status() is JobStatus.RUNNING, 60)  # CREATED while it deploys
        client.cancel()
    finally:
        for d in drivers:
            d.finish()
    assert said[1] == "STARTED", said
    assert said[0].startswith("REFUSED a job named 'twice-at-once' is already running on this Ray cluster (run "), said
    assert "`weir cancel twice-at-once`" in said[0] and "pid" in said[0], said


def _keyed_sum(env: StreamExecutionEnvironment, n: int, rate: int, out: str) -> None:
    (
        env.from_generator(lambda i: (i % 10, i), count=n, records_per_second=rate)
        .key_by(lambda kv: kv[0])
        .sum(1)
        .name("total")
        .sink_to(FileSink(out, format="jsonl"))
    )


def _streaming_env(checkpoint_dir: str, parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    return env


def _first_checkpoint(client, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        assert time.monotonic() < deadline, client.checkpoints()
        time.sleep(0.05)


def _exact(out: str, n: int) -> None:
    v = check_running_sums(map(tuple, read_committed(out)), ((i % 10, i) for i in range(n)))
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v


def _stall(client):
    """The coordinator stops answering for a while (SIGSTOP); returns the resume."""
    pid = ray.get(client.coordinator.__ray_call__.remote(lambda _: os.getpid()))
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


def _kill(client):
    """The coordinator dies; a standby takes the job over."""
    ray.kill(client.coordinator)
    return lambda: None


@pytest.mark.parametrize("interrupt", [_stall, _kill], ids=["stalled", "killed"])
def test_a_name_resubmitted_while_its_coordinator_does_not_answer_is_refused(
    ray_cluster, checkpoint_dir, out_dir, interrupt
):
    """Before, the pool asked the old coordinator for the job's status, took a
    time-out (a stalled or restarting coordinator) for FAILED, and started a
    second instance of the job."""
    n = 30_000
    env = _streaming_env(checkpoint_dir)
    _keyed_sum(env, n, 6_000, out_dir)
    client = env.execute_async(f"interrupted-{interrupt.__name__[1:]}")
    _first_checkpoint(client)
    resume = interrupt(client)
    try:
        again = _streaming_env(checkpoint_dir)
        _keyed_sum(again, n, 6_000, out_dir + "-again")
        with pytest.raises(JobAlreadyRunningError, match=f"a job named '{client.job_name}' is already running"):
            again.execute_async(client.job_name)
    finally:
        resume()
    assert client.wait(120).status is JobStatus.FINISHED
    _exact(out_dir, n)
    assert not os.path.exists(out_dir + "-again")


def test_a_second_job_on_a_running_jobs_folder_is_refused_before_it_writes(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    """A fork restored from the running job's savepoint writes into the same folder:
    before, each job's cleanup deleted the other's pending files and one failed
    for good with 'pending file ... vanished'."""
    n = 20_000
    env = _streaming_env(checkpoint_dir)
    _keyed_sum(env, n, 5_000, out_dir)
    client = env.execute_async("folder-owner")
    _first_checkpoint(client)
    savepoint = client.savepoint(str(tmp_path / "savepoints"))
    before = sorted(os.listdir(out_dir))
    fork = _streaming_env(checkpoint_dir)
    fork.restore_from_savepoint(savepoint)
    _keyed_sum(fork, n, 5_000, out_dir)
    with pytest.raises(
        OutputInUseError,
        match=(
            rf"sink 'Sink: FileSink' of job 'folder-fork' writes to folder {out_dir}, which running job 'folder-owner' "
            r"\(run [0-9a-f]+, submitted at .* by .*\) writes to; an output belongs to one running job, and nothing was written"
        ),
    ):
        fork.execute_async("folder-fork")
    assert sorted(os.listdir(out_dir)) >= before
    assert client.wait(120).status is JobStatus.FINISHED
    _exact(out_dir, n)
    # Once the owner has ended, the folder is free again.
    later = _streaming_env(checkpoint_dir)
    later.from_collection([(0, 1)]).sink_to(FileSink(out_dir, format="jsonl"))
    assert later.execute("folder-later").status is JobStatus.FINISHED


def test_a_job_the_cluster_cannot_load_frees_its_name_and_folder_and_the_fixed_one_runs_at_once(
    ray_cluster, checkpoint_dir, out_dir, tmp_path, monkeypatch
):
    """A helper module only the driver can import: the submit fails naming it, and
    the resubmit after the fix runs (before: JobAlreadyRunningError for the pool's life)."""
    helpers = tmp_path / "driver_only"
    helpers.mkdir()
    (helpers / "weir_driver_only_helper.py").write_text("def plus_one(kv):\n    return kv[0], kv[1] + 1\n")
    monkeypatch.syspath_prepend(str(helpers))
    import weir_driver_only_helper

    def job(fn):
        env = _streaming_env(checkpoint_dir, parallelism=1)
        env.from_collection([(1, 2), (3, 4)]).map(fn).sink_to(FileSink(out_dir))
        return env

    with pytest.raises(
        JobLoadError,
        match="job 'unloadable' could not be loaded on the cluster: its code imports module 'weir_driver_only_helper'",
    ):
        job(weir_driver_only_helper.plus_one).execute("unloadable")
    fixed = job(lambda kv: (kv[0], kv[1] + 1)).execute("unloadable")
    assert fixed.status is JobStatus.FINISHED
    assert sorted(map(tuple, read_committed(out_dir))) == [(1, 3), (3, 5)]


def test_a_second_execute_in_a_notebook_runs_only_what_was_built_since(ray_cluster, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_collection(list(range(100))).sink_to(FileSink(str(tmp_path / "first"), format="jsonl"))
    env.execute("cell-1")
    env.from_collection(list(range(100, 150))).sink_to(FileSink(str(tmp_path / "second"), format="jsonl"))
    env.execute("cell-2")
    assert sorted(read_committed(str(tmp_path / "first"))) == list(range(100))
    assert sorted(read_committed(str(tmp_path / "second"))) == list(range(100, 150))


def test_a_restarted_coordinator_keeps_the_last_completed_rescale(ray_cluster, checkpoint_dir, out_dir):
    n = 40_000
    env = _streaming_env(checkpoint_dir)
    _keyed_sum(env, n, 5_000, out_dir)
    client = env.execute_async("rescaled-then-restarted")
    _first_checkpoint(client)
    client.rescale({"total": 3})
    assert client.info()["parallelism"]["total"] == 3
    ray.kill(client.coordinator)
    deadline = time.monotonic() + 60
    while not client.info()["coordinator_recovered"] or client.status() is not JobStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.info()["parallelism"]["total"] == 3, (
        "the coordinator that took the job over went back to the old parallelism"
    )
    assert client.wait(120).status is JobStatus.FINISHED
    _exact(out_dir, n)


def test_two_unnamed_jobs_of_a_notebook_run_side_by_side(ray_cluster, tmp_path):
    """Two cells that execute_async() without a name: both were 'weir-job', and the
    second was refused with JobAlreadyRunningError. Each now has a name of its own."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    clients = []
    try:
        for cell in range(2):
            env.from_generator(lambda k: k, count=10_000_000, records_per_second=1000).sink_to(
                FileSink(str(tmp_path / f"cell-{cell}"), format="jsonl")
            )
            clients.append(env.execute_async())
        for client in clients:
            client.wait_until(lambda c: c.status() is JobStatus.RUNNING)
        assert clients[0].status() is clients[1].status() is JobStatus.RUNNING
        assert clients[0].job_name != clients[1].job_name
    finally:
        for client in clients:
            client.cancel()


def test_a_job_submitted_from_another_thread_of_the_same_driver_is_refused_too(ray_cluster, tmp_path):
    """Two cells of one notebook (or two threads) submitting one name at once."""
    outcomes: list[str] = []

    def submit(i: int) -> None:
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
        env.from_generator(lambda k: k, count=10_000_000, records_per_second=1000).sink_to(
            FileSink(str(tmp_path / f"out-{i}"), format="jsonl")
        )
        try:
            env.execute_async("threads-at-once")
            outcomes.append("started")
        except JobAlreadyRunningError:
            outcomes.append("refused")

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    RayJobClient.attach("threads-at-once").cancel()
    assert sorted(outcomes) == ["refused", "refused", "refused", "started"]

"""FLIP-147 and FLIP-34/45 on a real Ray cluster: checkpoints after sources finish,
recovery that skips finished operators, stop/resume with rescaling, drain."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import ray

from tests.checker import check_running_sums
from tests.final_faults import batch_keyed_sum, committed_totals, expected_totals
from tests.pausing import GatedGenerator, PacedUntilGate
from weir import JobStatus, MapFunction, RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.operators import StreamOperator

pytestmark = pytest.mark.ray

SHORT = [(k, 1) for k in range(20)]
LONG_N = 40_000


class _MarksOpen(MapFunction):
    """Leaves a file in ``folder`` each time a subtask opens it."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def open(self, runtime_context) -> None:
        open(
            os.path.join(self.folder, f"opened-{runtime_context.get_index_of_this_subtask()}-{uuid.uuid4().hex}"), "w"
        ).close()

    def map(self, value):
        return value


def _two_sources(checkpoint_dir: str, out_dir: str, gate: str, opened_dir: str | None = None):
    """The shape of FLIP-147's Figure 3: sources of different lengths feeding one
    two-input task (a union of two edges), then a two-phase-commit sink; the long
    source reads half its records, then waits for the file ``gate``; the short
    source's map marks each open() in ``opened_dir``."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.2))
    short = env.from_collection(SHORT).uid("short")
    if opened_dir is not None:
        short = short.map(_MarksOpen(opened_dir)).uid("short-map")
    # The long source cannot finish before the test opens the gate: the short
    # source's end, the checkpoints after it and a kill all come while it runs.
    long = env.from_source(GatedGenerator(lambda i: (i % 20, 1), LONG_N, gate, LONG_N // 4), source_name="long")
    long = long.uid("long")
    short.union(long).key_by(lambda kv: kv[0]).sum(1).uid("sum").sink_to(FileSink(out_dir)).uid("sink")
    return env


def _verdict(out_dir):
    return check_running_sums(map(tuple, read_committed(out_dir)), SHORT + [(i % 20, 1) for i in range(LONG_N)])


def _short_source_exited(client) -> bool:
    states = [m["state"] for m in client.metrics() if m["task"].startswith("source-collection")]
    return len(states) == 2 and all(s == "FINISHED" for s in states)


def _completed_after(client, checkpoint_id: int) -> int:
    return sum(c["status"] == "COMPLETED" and c["checkpoint_id"] > checkpoint_id for c in client.checkpoints())


def _wait(predicate, client, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert not client.status().is_terminal and time.monotonic() < deadline, client.checkpoints()
        time.sleep(0.05)


def test_checkpoints_go_on_after_a_source_finished_and_every_record_is_committed_once(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    gate = tmp_path / "gate"
    client = _two_sources(checkpoint_dir, out_dir, str(gate)).execute_async("figure-3")
    _wait(lambda: _short_source_exited(client), client)
    finished_at = max((c["checkpoint_id"] for c in client.checkpoints()), default=0)
    _wait(lambda: _completed_after(client, finished_at) >= 2, client)
    gate.touch()
    result = client.wait(120)
    assert result.status is JobStatus.FINISHED
    v = _verdict(out_dir)
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v


def test_a_kill_after_some_tasks_finished_recovers_without_rerunning_them(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    opened, gate = tmp_path / "opened", tmp_path / "gate"
    opened.mkdir()
    client = _two_sources(checkpoint_dir, out_dir, str(gate), str(opened)).execute_async("finished-then-kill")
    _wait(lambda: _short_source_exited(client), client)
    first = max((c["checkpoint_id"] for c in client.checkpoints()), default=0)
    _wait(lambda: _completed_after(client, first) >= 1, client)
    ray.kill(client.task_actor("sum", 0))
    gate.touch()
    result = client.wait(120)
    assert result.restarts == 1
    assert sorted(n.split("-")[1] for n in os.listdir(opened)) == ["0", "1"], (
        "a fully finished operator was opened again"
    )
    v = _verdict(out_dir)
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v


def _generator_job(checkpoint_dir, out_dir, parallelism, savepoint=None, n=60_000, gate=None):
    """With a ``gate``, each source subtask reads 5,000 records, then waits for that
    file: a stop lands mid-stream however slowly the job starts."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    if savepoint:
        env.restore_from_savepoint(savepoint)
    gen = lambda i: (i % 100, i)  # noqa: E731
    source = (
        env.from_generator(gen, count=n)
        if gate is None
        else env.from_source(GatedGenerator(gen, n, gate, 5_000), source_name="generator")
    )
    (
        source.uid("gen")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .uid("sums")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def test_stop_and_resume_at_2_then_3_then_1_equals_an_uninterrupted_run(ray_cluster, checkpoint_dir, out_dir, tmp_path):
    n = 60_000
    savepoint = None
    for step, p in enumerate([2, 3]):
        job = _generator_job(checkpoint_dir, out_dir, p, savepoint, n, gate=str(tmp_path / "never"))
        client = job.execute_async(f"resume-{step}")
        _wait(lambda client=client: any(c["status"] == "COMPLETED" for c in client.checkpoints()), client)
        savepoint = client.stop(str(tmp_path / f"sp-{step}"), drain=False)
        assert client.wait(60).status is JobStatus.SUSPENDED
        assert len(read_committed(out_dir)) < n
    last = _generator_job(checkpoint_dir, out_dir, 1, savepoint, n).execute("resume-2")
    assert last.status is JobStatus.FINISHED
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 100, i) for i in range(n)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, n), v


def test_a_suspended_job_with_two_event_time_sources_resumes_on_ray_as_if_never_stopped(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    """The lifecycle's suspend rule on Ray (tests/unit/jobs/test_lifecycle_jobs.py has
    it in-process): a source channel that stopped first keeps holding the window
    task's watermark, so no window fires half full before the savepoint."""
    from tests.unit.jobs.test_lifecycle_jobs import _env, _expected, _windows_job

    env = _windows_job(_env(checkpoint_dir), out_dir, gate=str(tmp_path / "never"))
    env.get_config().set_auto_watermark_interval(1)
    client = env.execute_async("suspend-sources")
    _wait(lambda: read_committed(out_dir), client)  # some windows fired and were committed
    savepoint = client.stop(str(tmp_path / "sp"), drain=False)
    assert client.wait(60).status is JobStatus.SUSPENDED
    before = len(read_committed(out_dir))
    resumed = _windows_job(_env(checkpoint_dir), out_dir)
    resumed.restore_from_savepoint(savepoint)
    assert resumed.execute("suspend-sources").status is JobStatus.FINISHED
    rows = sorted(tuple(r) for r in read_committed(out_dir))
    assert 0 < before < len(rows) and rows == _expected()


class _Recorder(StreamOperator):
    """Writes the lifecycle calls it sees to the file named by WEIR_TEST_EVENTS."""

    def _note(self, event: str) -> None:
        with open(os.environ["WEIR_TEST_EVENTS"] + f".{self.ctx.subtask}", "a") as f:
            f.write(event + "\n")

    def process_batch(self, records, timestamps=None):
        self.output.collect(records, timestamps)

    def process_watermark(self, watermark):
        if watermark.timestamp == MAX_WATERMARK:
            self._note(f"MAX_WATERMARK:{self.name}")
        super().process_watermark(watermark)

    def end_input(self, input_index):
        self._note(f"end_input({input_index}):{self.name}")

    def finish(self):
        self._note(f"finish:{self.name}")


def test_stop_with_drain_delivers_max_watermark_then_end_input_and_finish_to_every_operator_of_a_chain(
    ray_cluster, checkpoint_dir, out_dir, tmp_path
):
    events = str(tmp_path / "events")
    os.environ["WEIR_TEST_EVENTS"] = events  # reaches the task actors through the pickled operator factory below
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)

    def make(name, uid, path=events):
        os.environ["WEIR_TEST_EVENTS"] = path
        return _Recorder(name, uid)

    (
        env.from_generator(lambda i: i, records_per_second=2_000)
        .key_by(lambda i: i % 7)
        .transform("first", make)
        .transform("second", make)
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("drain")
    _wait(lambda: any(c["status"] == "COMPLETED" for c in client.checkpoints()), client)
    client.stop(str(tmp_path / "sp"), drain=True)
    assert client.wait(60).status is JobStatus.FINISHED
    for subtask in (0, 1):
        assert open(f"{events}.{subtask}").read().split() == [
            "MAX_WATERMARK:first",
            "MAX_WATERMARK:second",
            "end_input(0):first",
            "finish:first",
            "end_input(0):second",
            "finish:second",  # each of the chain, in order
        ]


def test_windows_on_ray_are_exact_after_a_task_actor_is_killed(ray_cluster, checkpoint_dir, out_dir):
    from tests.unit.jobs.test_window_jobs import _env, reference, window_job

    client = window_job(_env(checkpoint_dir), 5, "sliding", out_dir, rate=5_000).execute_async("ray-windows")
    _wait(lambda: sum(c["status"] == "COMPLETED" for c in client.checkpoints()) >= 2, client)
    client.kill_task("window-process", 1)
    result = client.wait(120)
    assert result.restarts == 1
    rows = [tuple(r) for r in read_committed(out_dir)]
    assert len(rows) == len(set(rows)) and set(rows) == reference(5, "sliding")


def test_rescale_2_4_1_on_ray_is_exact_and_prints_the_pause(ray_cluster, checkpoint_dir, out_dir, tmp_path):
    from tests.unit.jobs.test_local_rescale import _job, _wait_for_checkpoint

    # Up to 10 s of input at 20,000/s: a rescale waits, with the job running, for the
    # processes of its new tasks (seconds on a loaded 2-core machine), and the job
    # must outlast both; after them the rest runs out at full speed.
    n, gate = 200_000, str(tmp_path / "rescaled")
    # tests/unit/jobs/test_local_rescale.py's job, paced until the gate
    env = _job(checkpoint_dir, out_dir, source=PacedUntilGate(lambda i: (i % 100, i), n, 20_000, gate))
    client = env.execute_async("ray-rescale")
    for parallelism in ({"enrich": 4, "totals": 4}, {"enrich": 1, "totals": 1}):
        _wait_for_checkpoint(client, max([c["checkpoint_id"] for c in client.checkpoints()], default=0))
        pause = client.rescale(parallelism)
        print(f"rescaled to {parallelism}: not processing for {pause:.2f}s")
        assert sum(t.startswith("ray-rescale/totals/") for t in client.tasks()) == parallelism["totals"]
    open(gate, "w").close()
    result = client.wait(120)
    assert result.restarts == 0
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 100, i) for i in range(n)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, n), v


@pytest.mark.parametrize("trigger", ["close", "commit", "kill"])
def test_a_batch_job_failing_over_after_its_final_checkpoint_commits_each_total_once_on_ray(
    ray_cluster, checkpoint_dir, out_dir, tmp_path, monkeypatch, trigger
):
    """As tests/unit/jobs/test_batch_mode.py's test of the same name, with task
    actors: ``kill`` ends a task's process once it was told the final checkpoint
    completed, before its sink commits."""
    mark = str(tmp_path / "failed-once")
    if trigger == "kill":
        monkeypatch.setenv("WEIR_FAULT", "task-committing")
        monkeypatch.setenv("WEIR_FAULT_MARK", mark)
    result = batch_keyed_sum(checkpoint_dir, out_dir, trigger, mark).execute(f"final-{trigger}")
    assert os.path.exists(mark)  # the fault happened
    assert result.status is JobStatus.FINISHED and result.restarts == 1
    assert committed_totals(out_dir) == expected_totals()

"""The task lifecycle in whole jobs (in-process executor, and the job master driven
by hand): suspend with several event-time sources, fully and partially finished
operators on restore, union list state, a task finishing under a trigger."""

from __future__ import annotations

import collections

import pytest

from tests.pausing import GatedGenerator
from tests.unit.jobs.test_exactly_once_edges import _StubGateway
from weir import (
    DiscardingSink,
    JobStatus,
    ListStateDescriptor,
    MapFunction,
    RestartStrategy,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.errors import CheckpointFailureReason, InvalidJobGraphError
from weir.runtime.jobmaster import JobMaster
from weir.runtime.letters import Request, TriggerSavepoint
from weir.runtime.master_options import MasterOptions
from weir.runtime.off_loop import inline
from weir.runtime.restore import restore_plan
from weir.runtime.sources import GeneratorSource, IndexSplit
from weir.runtime.task import TaskResult, TaskState


def _env(checkpoint_dir, parallelism=2, interval_ms=50):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.05))
    return env


def _completed(client, more_than=0):
    return sum(c["status"] == "COMPLETED" for c in client.checkpoints()) > more_than


def _wait(predicate, client, timeout_s=30.0):
    client.wait_until(lambda c: predicate(), timeout_s)


# ---------------------------------------------------------------- suspend with several event-time sources
N = 4_000


def _windows_job(env, out_dir, gate=None):
    """Two event-time sources far apart in event time (b runs 5× ahead of a), a
    union, and 100 ms tumbling windows counting each key's records. With a
    ``gate``, each source subtask reads about a quarter of its records, then
    waits for that file: a stop lands mid-stream however slowly the job starts."""

    def source(name, scale):
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[1])
        if gate is None:
            return env.from_generator(lambda i: (name, i * scale), count=N, watermark_strategy=strategy).uid(name)
        # Half a window past a quarter: the stop finds a window of "a" half full.
        gated = GatedGenerator(lambda i: (name, i * scale), N, gate, N // 4 // env.get_parallelism() + 50)
        return env.from_source(gated, strategy, name).uid(name)

    def count(key, ctx, elements):
        return [(key, ctx.window().start, len(list(elements)))]

    (
        source("a", 1)
        .union(source("b", 5))
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(100))
        .process(count)
        .uid("windows")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def _expected():
    out = collections.Counter()
    for name, scale in (("a", 1), ("b", 5)):
        for i in range(N):
            out[(name, i * scale // 100 * 100)] += 1
    return sorted((k, start, n) for (k, start), n in out.items())


@pytest.mark.parametrize("trial", range(3))
def test_a_suspended_job_with_several_event_time_sources_resumes_as_if_never_stopped(
    tmp_path, checkpoint_dir, out_dir, trial
):
    """The sources stop one after the other; the one stopped first must keep
    holding the window task's watermark, or windows fire half full before the
    savepoint and the rest of their records come late after the resume."""
    env = _windows_job(_env(checkpoint_dir), out_dir, gate=str(tmp_path / "never"))
    env.get_config().set_auto_watermark_interval(1)  # PyFlink's call
    client = env.execute_async("suspend-sources", executor="local")
    _wait(lambda: read_committed(out_dir), client)  # windows of the first quarter fired and were committed
    savepoint = client.stop(str(tmp_path / "sp"), drain=False)
    assert client.wait(30).status is JobStatus.SUSPENDED
    before = len(read_committed(out_dir))
    resumed = _windows_job(_env(checkpoint_dir), out_dir)
    resumed.restore_from_savepoint(savepoint)
    assert resumed.execute("suspend-sources", executor="local").status is JobStatus.FINISHED
    rows = sorted(tuple(r) for r in read_committed(out_dir))
    assert 0 < before < len(rows), "the stop should land mid-stream"
    assert rows == _expected()


# ---------------------------------------------------------------- fully finished operators
class _CountsOpens(MapFunction):
    opened = 0

    def open(self, runtime_context):
        type(self).opened += 1

    def map(self, value):
        return value


def test_operators_that_fully_finished_are_not_opened_again_after_a_failover(checkpoint_dir, out_dir):
    _CountsOpens.opened = 0
    env = _env(checkpoint_dir)
    short = env.from_collection([(k, 1) for k in range(10)]).uid("short").map(_CountsOpens()).uid("short-map")
    long = env.from_generator(lambda i: (i % 10, 1), records_per_second=2_000).uid("long")
    short.union(long).key_by(lambda kv: kv[0]).sum(1).uid("sum").sink_to(FileSink(out_dir)).uid("out")
    client = env.execute_async("finished-then-failover", executor="local")
    _wait(
        lambda: [m["state"] for m in client.metrics() if m["task"].startswith("source-collection")] == ["FINISHED"] * 2,
        client,
    )
    first = max(c["checkpoint_id"] for c in client.checkpoints())
    _wait(lambda: any(c["status"] == "COMPLETED" and c["checkpoint_id"] > first for c in client.checkpoints()), client)
    assert _CountsOpens.opened == 2
    client.kill_task("sum", 0)
    _wait(lambda: client.restarts() == 1 and _completed(client, 3), client)
    client.cancel()
    assert _CountsOpens.opened == 2, "a fully finished operator was opened again"


def test_a_restore_that_puts_a_new_operator_in_front_of_a_fully_finished_one_is_refused():
    def graph(extra: bool):
        env = StreamExecutionEnvironment.get_execution_environment()
        s = env.from_collection([1, 2]).uid("src")
        if extra:
            s = s.map(lambda x: x).uid("new")
        s.map(lambda x: x).uid("done").sink_to(DiscardingSink()).uid("sink")
        return env.get_job_graph("refuse")

    old = graph(False)
    metadata = {
        "operators": {
            op.uid: {
                "name": op.name,
                "max_parallelism": v.max_parallelism,
                "handles": [None],
                "fully_finished": op.uid != "sink",
                "has_state": False,
            }
            for v in old.vertices.values()
            for op in v.operators
        }
    }
    assert restore_plan(metadata, old, False)["done"].fully_finished
    with pytest.raises(
        InvalidJobGraphError,
        match=r"operator 'Map' \(uid 'done'\) had fully finished in the snapshot, but operator 'Map' \(uid 'new'\) in front of it is new",
    ):
        restore_plan(metadata, graph(True), False)


# ---------------------------------------------------------------- partially finished operators
class _Uneven(GeneratorSource):
    """Two splits: ten records, and one that never ends; so one subtask finishes early."""

    def __init__(self):
        super().__init__(lambda i: i, None, 400)

    def create_splits(self, parallelism):
        return [IndexSplit(0, 0, 10), IndexSplit(1, 10, None)]


class _Remembers(MapFunction):
    """Keeps each record it saw in operator list state (union, or split evenly)."""

    restored: list[list[int]] = []

    def __init__(self, union: bool):
        self.union = union

    def open(self, runtime_context):
        descriptor = ListStateDescriptor("seen", Types.INT())
        get = runtime_context.get_union_list_state if self.union else runtime_context.get_list_state
        self.seen = get(descriptor)
        type(self).restored.append(sorted(self.seen.get()))

    def map(self, value):
        if value < 12:
            self.seen.add(value)
        return value


def _partially_finishing(checkpoint_dir, union, savepoint=None, parallelism=2):
    env = _env(checkpoint_dir, parallelism)
    if savepoint:
        env.restore_from_savepoint(savepoint)
    (
        env.from_source(_Uneven(), source_name="uneven")
        .uid("uneven")
        .map(_Remembers(union))
        .uid("remembers")
        .sink_to(DiscardingSink())
        .uid("sink")
    )
    return env.execute_async(f"partial-{union}", executor="local")


def _source_states(client):
    return sorted(m["state"] for m in client.metrics() if m["task"].startswith("source-uneven"))


def test_union_list_state_of_a_partially_finished_operator_declines_its_checkpoints(checkpoint_dir):
    _Remembers.restored = []
    client = _partially_finishing(checkpoint_dir, union=True)
    _wait(lambda: _source_states(client) == ["FINISHING", "RUNNING"], client)
    reason = CheckpointFailureReason.UNION_STATE_PARTIALLY_FINISHED.message
    _wait(lambda: any(c["status"] == "ABORTED" and reason in c["reason"] for c in client.checkpoints()), client)
    assert _source_states(client) == ["FINISHING", "RUNNING"], (
        "no checkpoint completes, so the finished subtask cannot exit"
    )
    client.cancel()


def test_list_state_of_a_partially_finished_operator_is_restored_as_in_a_rescale(checkpoint_dir, tmp_path):
    """FLIP-147: the operator's state is what its running subtasks hold (an exited
    subtask's work is done and committed), split over the subtasks of the restore
    as a rescale splits it (here onto three)."""
    _Remembers.restored = []
    client = _partially_finishing(checkpoint_dir, union=False)
    _wait(lambda: _source_states(client) == ["FINISHED", "RUNNING"], client)
    savepoint = client.stop(str(tmp_path / "sp"), drain=False)
    assert client.wait(30).status is JobStatus.SUSPENDED
    assert sorted(_Remembers.restored) == [[], []]
    resumed = _partially_finishing(checkpoint_dir, union=False, savepoint=savepoint, parallelism=3)
    _wait(lambda: len(_Remembers.restored) == 5, resumed)
    resumed.cancel()
    assert sorted(_Remembers.restored[2:]) == [[], [10], [11]]


# ---------------------------------------------------------------- a task that finishes under a trigger
def test_a_task_that_finishes_while_a_trigger_is_in_flight_aborts_that_checkpoint_at_once(checkpoint_dir, tmp_path):
    env = _env(checkpoint_dir, interval_ms=600_000)
    env.from_collection(list(range(10))).sink_to(DiscardingSink())
    gateway = _StubGateway()
    master = JobMaster(env.get_job_graph("finishes-under-trigger"), gateway, MasterOptions(storage_io=inline))
    master.start()
    master.mailbox.put_control(TriggerSavepoint(str(tmp_path / "sp"), Request()))
    master.run_until_idle()
    (first,) = master.coordinator.pending
    finished = gateway.keys[0]
    gateway.exits = [(finished, TaskResult(TaskState.FINISHED))]
    master.run_until_idle()
    assert first not in master.coordinator.pending
    entry = master.coordinator.history[first]
    assert entry.status.value == "ABORTED" and entry.reason.startswith(
        CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK.message
    ), entry
    (retry,) = master.coordinator.pending  # the savepoint asked for is tried again without the finished task
    assert finished not in master.coordinator.pending[retry].plan.to_ack

"""Live rescaling on the in-process executor: exactly-once through 2 -> 4 -> 1."""

from __future__ import annotations

import pytest

from tests.checker import check_running_sums
from tests.unit.jobs.test_exactly_once_edges import _StubGateway
from weir import DiscardingSink, InvalidJobGraphError, JobStatus, StreamExecutionEnvironment, WeirError
from weir.connectors.files import FileSink, read_committed
from weir.runtime.clock import ManualClock
from weir.runtime.letters import EventFromOperator
from weir.runtime.sources import RequestSplit

N = 40_000


def _job(checkpoint_dir, out_dir, n=N, source=None):
    """``source``: a Source of ``(i % 100, i)`` in place of the paced generator."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_parallelism(8)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    records = (
        env.from_generator(lambda i: (i % 100, i), count=n, records_per_second=20_000)
        if source is None
        else env.from_source(source, source_name="generator")
    )
    (
        records.map(lambda kv: kv)
        .name("enrich")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .name("totals")
        .sink_to(FileSink(out_dir))
    )
    return env


def _wait_for_checkpoint(client, after: int = 0):
    client.wait_until(
        lambda c: any(s["status"] == "COMPLETED" and s["checkpoint_id"] > after for s in c.checkpoints()), 300
    )


def test_rescale_2_4_1_while_running_is_exact(checkpoint_dir, out_dir):
    client = _job(checkpoint_dir, out_dir).execute_async("rescale", executor="local")
    pauses = []
    for parallelism in ({"enrich": 4, "totals": 4}, {"enrich": 1, "totals": 1}):
        _wait_for_checkpoint(client, max([c["checkpoint_id"] for c in client.checkpoints()], default=0))
        pauses.append(client.rescale(parallelism))
        print(f"rescaled to {parallelism}: not processing for {pauses[-1]:.3f}s")
        tasks = client.tasks()
        assert sum(t.startswith("totals/") for t in tasks) == parallelism["totals"], tasks
    result = client.wait(60)
    assert result.status is JobStatus.FINISHED and result.restarts == 0
    assert all(p > 0 for p in pauses)
    v = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 100, i) for i in range(N)))
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, N), v


def test_rescale_errors_name_the_operator_and_the_limit(checkpoint_dir, out_dir):
    client = _job(checkpoint_dir, out_dir).execute_async("rescale-errors", executor="local")
    try:
        with pytest.raises(InvalidJobGraphError, match="has no operator named 'nope'; its operators: .*enrich.*totals"):
            client.rescale({"nope": 2})
        with pytest.raises(
            InvalidJobGraphError, match="operator 'totals': parallelism 9 is above its max parallelism 8"
        ):
            client.rescale({"totals": 9})
        assert client.status() is JobStatus.RUNNING
    finally:
        client.cancel()


def test_a_late_letter_from_a_subtask_the_rescale_removed_is_ignored(checkpoint_dir):
    """A split request still in the mailbox from source subtask 1 of the attempt
    before a rescale to 1 must not reach the new enumerator (it has no subtask 1)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(100).get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_generator(lambda i: i, records_per_second=1_000).uid("numbers").sink_to(DiscardingSink())
    client = env.execute_async("late-letter", executor="local")
    _wait_for_checkpoint(client)
    master = client._master
    source, old_attempt = master.graph.sources[0], master.attempt
    client.rescale({"numbers": 1})
    master.mailbox.put_control(EventFromOperator(old_attempt, (source.id, 1), "numbers", RequestSplit()))
    _wait_for_checkpoint(client, max(c["checkpoint_id"] for c in client.checkpoints()))
    assert (master.status, master.restarts.count, master.life.failure) == (JobStatus.RUNNING, 0, None)
    client.cancel()


class _SlowSlots(_StubGateway):
    """A gateway whose slots for the rescaled job come up when the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.up = False
        self.reserved: list[dict[str, int]] = []

    def reserve(self, graph) -> bool:
        self.reserved.append({v.name: v.parallelism for v in graph.vertices.values()})
        return self.up


def test_a_rescale_stops_the_job_only_once_its_new_tasks_slots_are_up(checkpoint_dir):
    """The job processes on while the slots start (a process start is seconds on a
    small machine); then it stops at a checkpoint and redeploys."""
    from weir.runtime.jobmaster import JobMaster
    from weir.runtime.letters import Request, RescaleJob
    from weir.runtime.master_options import MasterOptions
    from weir.runtime.off_loop import inline

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_sequence(0, 9).key_by(lambda i: i).reduce(lambda a, b: a + b).name("totals").sink_to(DiscardingSink())
    clock = ManualClock()
    gateway = _SlowSlots()
    master = JobMaster(env.get_job_graph("waits-for-slots"), gateway, MasterOptions(clock=clock.now, storage_io=inline))
    master.start()
    master.mailbox.put_control(RescaleJob({"totals": 3}, Request()))
    master.run_until_idle()
    clock.set(1.0)
    master.run_until_idle()
    assert (master.status, master.coordinator.pending) == (JobStatus.RUNNING, {}), "it stopped before its slots were up"
    assert gateway.reserved[-1]["totals"] == 3
    again = RescaleJob({"totals": 4}, Request())
    master.mailbox.put_control(again)
    master.run_until_idle()
    with pytest.raises(WeirError, match="is being rescaled already"):
        again.request.wait(1)
    gateway.up = True
    master.run_until_idle()
    assert master.status is JobStatus.STOPPING and master.coordinator.pending


def test_a_rescale_whose_slots_do_not_come_up_soon_stops_the_job_anyway(checkpoint_dir):
    from weir.runtime.jobmaster import JobMaster
    from weir.runtime.letters import Request, RescaleJob
    from weir.runtime.master_options import MasterOptions
    from weir.runtime.off_loop import inline
    from weir.runtime.stopping import RESCALE_WAIT_S

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_sequence(0, 9).key_by(lambda i: i).reduce(lambda a, b: a + b).name("totals").sink_to(DiscardingSink())
    clock = ManualClock()
    master = JobMaster(env.get_job_graph("never-up"), _SlowSlots(), MasterOptions(clock=clock.now, storage_io=inline))
    master.start()
    master.mailbox.put_control(RescaleJob({"totals": 3}, Request()))
    master.run_until_idle()
    clock.set(RESCALE_WAIT_S - 0.1)
    master.run_until_idle()
    assert master.status is JobStatus.RUNNING
    clock.set(RESCALE_WAIT_S)
    master.run_until_idle()
    assert master.status is JobStatus.STOPPING

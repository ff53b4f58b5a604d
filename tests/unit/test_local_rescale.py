"""Live rescaling on the in-process executor: exactly-once through 2 -> 4 -> 1."""

from __future__ import annotations

import threading

import pytest

from connectors.files import FileSink, read_committed
from runtime import DiscardingSink, InvalidJobGraphError, JobStatus, StreamExecutionEnvironment
from runtime.jobmaster import EventFromOperator
from runtime.sources import RequestSplit
from tests.checker import check_running_sums

N = 40_000


def _job(checkpoint_dir, out_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_parallelism(8)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    (env.from_generator(lambda i: (i % 100, i), count=N, records_per_second=20_000)
        .map(lambda kv: kv).name("enrich")
        .key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).name("totals")
        .sink_to(FileSink(out_dir)))
    return env


def _wait_for_checkpoint(client, after: int = 0):
    while not any(c["status"] == "COMPLETED" and c["checkpoint_id"] > after for c in client.checkpoints()):
        assert not client.status().is_terminal
        threading.Event().wait(0.01)


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
        with pytest.raises(InvalidJobGraphError, match="operator 'totals': parallelism 9 is above its max parallelism 8"):
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
    assert (master.status, master.restarts, master.failure) == (JobStatus.RUNNING, 0, None)
    client.cancel()

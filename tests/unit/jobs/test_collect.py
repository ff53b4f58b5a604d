"""``execute_and_collect``: records back in the driver while the job runs, only as
checkpoints commit them, so a failover shows none twice; ``limit`` and closing
cancel the job. On the in-process executor (tests/integration/test_collect_on_ray.py
runs the same on Ray)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.checker import check_running_sums
from weir import (
    CloseableIterator,
    InvalidConfigurationError,
    JobExecutionError,
    JobStatus,
    RestartStrategy,
    StreamExecutionEnvironment,
)
from weir.runtime.collect import CollectSink, LocalCollectChannel
from weir.runtime.testing import OperatorHarness


def _env(checkpoint_dir, interval_ms=50, p=2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    if interval_ms:
        env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.01))
    return env


def _wait_ended(client, timeout_s=30):
    client.wait_until(lambda c: c.status().is_terminal, timeout_s)


def test_the_sink_publishes_a_checkpoints_records_only_when_it_completes_and_again_after_a_restore():
    channel = LocalCollectChannel()
    h = OperatorHarness.sink(CollectSink(channel.publisher()))
    h.process(1, 2)
    snapshot = h.snapshot(1)
    h.process(3)
    assert channel.poll(0) == []  # nothing is committed before its checkpoint completes
    h.notify_complete(1)
    [(first_id, records)] = channel.poll(0)
    assert records == [1, 2]
    h.close()
    # A restore from checkpoint 1 commits its records again, under the same id;
    # record 3 was never committed and is gone with the failed attempt.
    restored = OperatorHarness.sink(CollectSink(channel.publisher()), restore=[snapshot])
    assert channel.poll(0) == [(first_id, [1, 2])]
    restored.close()
    channel.close()


def test_a_bounded_job_collects_every_record_once(checkpoint_dir):
    env = _env(checkpoint_dir)
    with (
        env.from_collection(range(10_000))
        .map(lambda i: i * 3)
        .execute_and_collect("collect-all", executor="local") as results
    ):
        assert isinstance(results, CloseableIterator)
        assert sorted(results) == [i * 3 for i in range(10_000)]
        assert results.job_client.status() is JobStatus.FINISHED


def test_records_arrive_while_an_endless_job_runs_and_closing_cancels_it(checkpoint_dir):
    env = _env(checkpoint_dir, p=1)
    results = env.from_generator(lambda i: i, records_per_second=2_000).execute_and_collect(
        "collect-stream", executor="local"
    )
    with results:
        first = [next(results) for _ in range(300)]
        assert results.job_client.status() is JobStatus.RUNNING
    assert first == list(range(300))  # one source and one sink subtask: in order, none missing
    _wait_ended(results.job_client)
    assert results.job_client.status() is JobStatus.CANCELED
    with pytest.raises(StopIteration):
        next(results)


def test_limit_returns_a_list_of_the_first_records_and_cancels_the_job(checkpoint_dir):
    env = _env(checkpoint_dir, p=1)
    before = {t.name for t in threading.enumerate()}
    assert env.from_generator(lambda i: i * i).execute_and_collect("collect-limit", limit=50, executor="local") == [
        i * i for i in range(50)
    ]
    deadline = time.monotonic() + 10
    while any(t.name.startswith("jobmaster-collect-limit") for t in threading.enumerate() if t.name not in before):
        assert time.monotonic() < deadline, "the endless job still runs after its limit was reached"
        threading.Event().wait(0.01)


def test_a_limit_above_the_records_of_a_bounded_job_returns_them_all(checkpoint_dir):
    env = _env(checkpoint_dir, p=1)
    assert env.from_collection(["a", "b"]).execute_and_collect(limit=5, executor="local") == ["a", "b"]


@pytest.mark.parametrize("limit", [0, -1, 2.5, "3"])
def test_a_limit_that_is_not_a_positive_whole_number_is_refused(checkpoint_dir, limit):
    env = _env(checkpoint_dir)
    with pytest.raises(InvalidConfigurationError, match="execute_and_collect"):
        env.from_collection([1]).execute_and_collect(limit=limit, executor="local")


def _failing_once(marker, at):
    def f(i):
        if i == at and not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError(f"record {at}, once")
        return (i % 10, i)

    return f


def test_a_failover_shows_no_record_twice_and_loses_none(checkpoint_dir, tmp_path):
    marker, go = str(tmp_path / "raised"), str(tmp_path / "go")  # tasks run copies of functions: files

    def fail_once_the_driver_has_records(i):
        if i == 5_000 and not os.path.exists(marker):
            deadline = time.monotonic() + 20
            while not os.path.exists(go):  # the driver has shown records: they must not come twice
                assert time.monotonic() < deadline
                threading.Event().wait(0.005)
            open(marker, "w").close()
            raise ValueError("record 5000, once")
        return (i % 10, i)

    env = _env(checkpoint_dir)
    env.set_batch_size(128)
    n = 6_000  # paced, so checkpoints commit records before the failure
    stream = (
        env.from_generator(lambda i: i, count=n, records_per_second=20_000)
        .map(fail_once_the_driver_has_records)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with stream.execute_and_collect("collect-failover", executor="local") as results:
        collected = []
        for r in results:
            collected.append(r)
            if len(collected) == 1:
                open(go, "w").close()
        assert results.job_client.wait().restarts == 1
    verdict = check_running_sums(collected, ((i % 10, i) for i in range(n)))
    assert (verdict.lost, verdict.duplicated, verdict.keys_wrong, verdict.outputs) == (0, 0, 0, n)


def test_without_checkpointing_a_bounded_job_delivers_at_its_end_exactly_once_also_after_a_failover(
    checkpoint_dir, tmp_path
):
    marker = str(tmp_path / "raised")
    env = _env(checkpoint_dir, interval_ms=None)
    stream = env.from_collection(range(5_000)).map(_failing_once(marker, 3_000))
    with stream.execute_and_collect("collect-no-checkpoints", executor="local") as results:
        collected = sorted(results)
        result = results.job_client.wait()
    assert os.path.exists(marker) and result.restarts == 1
    assert result.completed_checkpoints == 1  # the final one: it committed everything
    assert collected == sorted((i % 10, i) for i in range(5_000))


def test_without_checkpointing_an_endless_job_is_refused_naming_the_setting_and_the_source():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match="checkpoint interval_ms.*Source: generator never ends"):
        env.from_generator(lambda i: i).map(str).execute_and_collect(executor="local")


def test_a_job_that_fails_for_good_raises_after_the_committed_records(checkpoint_dir):
    def fail_late(i):
        if i >= 3_000:
            raise ZeroDivisionError("no luck")
        return i

    env = _env(checkpoint_dir, p=1)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.set_batch_size(100)
    paced = env.from_generator(lambda i: i, count=5_000, records_per_second=10_000)  # checkpoints come between
    results = paced.map(fail_late).execute_and_collect("collect-fails", executor="local")
    collected = []
    with pytest.raises(JobExecutionError, match="no luck"):
        for r in results:
            collected.append(r)
    assert collected == list(range(len(collected)))  # a committed prefix, in order, once
    assert collected, "the checkpoints before the failure committed records"


def test_collect_runs_beside_the_environments_other_sinks_and_does_not_stay_behind(checkpoint_dir, tmp_path):
    from weir.connectors.files import FileSink, read_committed

    env = _env(checkpoint_dir, p=1)
    env.from_collection([1, 2, 3]).sink_to(FileSink(str(tmp_path / "files")))
    assert env.from_collection(["x"]).execute_and_collect(limit=1, executor="local") == ["x"]
    assert sorted(read_committed(str(tmp_path / "files"))) == [1, 2, 3]
    env.from_collection([4]).sink_to(FileSink(str(tmp_path / "more")))  # the next execute runs only this
    assert [t.name for t in env.get_job_graph().sinks] == ["Sink: FileSink"]


def test_closing_an_iterator_whose_job_record_is_gone_does_not_raise():
    """Leaving a ``with`` block after the job's coordinator forgot it (it ended
    long ago) raised in close(), hiding whatever ended the block."""
    from weir.runtime.collect import CloseableIterator
    from weir.runtime.errors import WeirError

    class Forgotten:
        cancelled = False

        def status(self):
            raise WeirError("job 'gone' ended long ago (its record is gone)")

        def cancel(self):
            self.cancelled = True

    client = Forgotten()
    with pytest.raises(KeyError, match="the block's own error"):
        with CloseableIterator(client, LocalCollectChannel()):
            raise KeyError("the block's own error")
    assert not client.cancelled


def test_an_iterator_dropped_without_close_cancels_its_job(checkpoint_dir):
    """A notebook cell that re-assigns ``results = ....execute_and_collect()`` drops
    the last iterator without closing it. Its endless job ran on, and the records
    it committed piled up in the driver's queue with no one to read them."""
    import gc

    env = _env(checkpoint_dir, p=1)
    results = env.from_generator(lambda i: i, records_per_second=2_000).execute_and_collect(
        "collect-dropped", executor="local"
    )
    assert next(results) == 0
    client = results.job_client
    del results
    gc.collect()
    _wait_ended(client)
    assert client.status() is JobStatus.CANCELED

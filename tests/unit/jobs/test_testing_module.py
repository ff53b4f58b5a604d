"""weir.runtime.testing for whole jobs: the manual clock, the testing source and
its markers, the collecting sink, and waiting for a job without sleeping."""

from __future__ import annotations

import gc
import pickle

import pytest

from weir import RestartStrategy, StreamExecutionEnvironment
from weir.actors.executor import RayExecutor
from weir.runtime.errors import InvalidJobGraphError, WeirError
from weir.runtime.executor import JobStatus
from weir.runtime.local import LocalExecutor
from weir.runtime.testing import ManualClock, TestingSink, TestingSource


def test_a_manual_clock_moves_only_when_told_and_only_forward():
    clock = ManualClock(5.0)
    assert clock.now() == 5.0 and clock.advance(0.5) == 5.5 and clock.now() == 5.5
    clock.set(7.0)
    with pytest.raises(ValueError, match="forward only"):
        clock.set(6.0)
    with pytest.raises(ValueError, match="forward only"):
        clock.advance(-1)
    assert clock.now() == 7.0


def _env(checkpoint_dir: str, interval_ms: int = 0) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    if interval_ms:
        env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    return env


def test_a_testing_source_feeds_its_items_in_order_into_a_testing_sink(checkpoint_dir):
    env = _env(checkpoint_dir)
    sink = TestingSink()
    env.from_source(TestingSource(list(range(100))), source_name="numbers").map(lambda i: i * 2).sink_to(sink)
    env.execute("in-order", executor="local")
    assert sorted(sink.out) == [2 * i for i in range(100)]


def test_a_savepoint_at_a_pause_holds_the_items_before_it_and_a_resume_reads_the_rest(checkpoint_dir, tmp_path):
    pause = TestingSource.PAUSE()
    source, sink = TestingSource([1, 2, 3, pause, 4, 5]), TestingSink()
    env = _env(checkpoint_dir)
    env.from_source(source, source_name="numbers").uid("numbers").sink_to(sink).uid("out")
    client = env.execute_async("pause", executor="local")
    assert pause.reached.wait(30)
    savepoint = client.stop(str(tmp_path / "sp"))
    assert client.status() is JobStatus.SUSPENDED and sorted(sink.out) == [1, 2, 3]  # a stop's savepoint commits
    pause.resume()
    env = _env(checkpoint_dir)
    env.restore_from_savepoint(savepoint)
    env.from_source(source, source_name="numbers").uid("numbers").sink_to(sink).uid("out")
    env.execute("pause-resumed", executor="local")
    # The resumed job commits the savepoint's records again: the same sink keeps them once.
    assert sorted(sink.out) == [1, 2, 3, 4, 5]


def test_an_abort_marker_fails_the_job_once_and_the_sink_still_holds_each_record_once(checkpoint_dir):
    abort = TestingSource.ABORT()
    items = list(range(50)) + [abort] + list(range(50, 100))
    sink = TestingSink()
    env = _env(checkpoint_dir, interval_ms=20)
    env.set_restart_strategy(RestartStrategy.fixed_delay(2, 0))
    env.from_source(TestingSource(items), source_name="numbers").sink_to(sink)
    client = env.execute_async("abort", executor="local")
    client.wait(60)
    assert abort.triggered and client.restarts() == 1
    assert sorted(sink.out) == list(range(100))


def test_wait_for_and_wait_until_wait_for_what_the_job_does(checkpoint_dir):
    pause = TestingSource.PAUSE()
    sink = TestingSink()
    clock = ManualClock()
    env = _env(checkpoint_dir, interval_ms=3_600_000)  # hourly: only the manual clock brings one on
    env.from_source(TestingSource([1, 2, pause, 3]), source_name="numbers").sink_to(sink)
    client = LocalExecutor(clock).submit(env.get_job_graph("wait"))
    assert pause.reached.wait(30)
    clock.advance(3_600)
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" for s in c.checkpoints()))
    assert sorted(sink.wait_for(2)) == [1, 2]
    with pytest.raises(TimeoutError, match="TestingSink holds 2 records, not 3, after 0.01s"):
        sink.wait_for(3, timeout_s=0.01)
    pause.resume()
    assert sorted(sink.wait_for(3)) == [1, 2, 3]
    client.wait(30)
    with pytest.raises(WeirError, match="ended FINISHED before the condition held"):
        client.wait_until(lambda c: False)


def test_the_ray_executor_refuses_testing_sources_and_sinks_naming_them_before_it_starts_anything(checkpoint_dir):
    env = _env(checkpoint_dir)
    env.from_source(TestingSource([1]), source_name="numbers").sink_to(TestingSink())
    with pytest.raises(
        InvalidJobGraphError,
        match=r"job 'on-ray': 'Source: numbers', 'Sink: TestingSink' keep their records in the process",
    ):
        RayExecutor().submit(env.get_job_graph("on-ray"))


def test_a_testing_sink_pickled_is_the_same_sink_in_this_process_and_refused_in_another():
    sink = TestingSink()
    assert pickle.loads(pickle.dumps(sink)) is sink
    data = pickle.dumps(sink)
    del sink
    gc.collect()  # the sink is its own publisher: a cycle
    with pytest.raises(WeirError, match="a TestingSink lives in the process of the test that made it"):
        pickle.loads(data)

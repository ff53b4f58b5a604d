"""#17 items 5, 6 and 9 on Ray: map_batches and a window function over an
incremental aggregate stay exact when a task actor is killed; TTL state written
by one job and restored by another, in other processes, has expired by then."""

from __future__ import annotations

import collections
import time

import pytest

from weir import (
    AggregateFunction,
    DiscardingSink,
    JobStatus,
    KeyedProcessFunction,
    ProcessWindowFunction,
    RestartStrategy,
    StateTtlConfig,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from weir.connectors.files import FileSink, read_committed

pytestmark = pytest.mark.ray


def _env(checkpoint_dir: str, p: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.2))
    return env


def _kill_once_checkpointed(client, vertex: str) -> None:
    deadline = time.monotonic() + 60
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        assert time.monotonic() < deadline and not client.status().is_terminal
        time.sleep(0.05)
    client.kill_task(vertex, 0)


def _double(df):
    return df.assign(y=df["x"] * 2)


def test_map_batches_is_exact_after_a_killed_actor(ray_cluster, checkpoint_dir, out_dir):
    n = 40_000
    env = _env(checkpoint_dir)
    (
        env.from_generator(lambda i: {"id": i, "x": i % 13}, count=n, records_per_second=10_000)
        .set_parallelism(1)
        .rebalance()
        .map_batches(_double, batch_size=500, batch_format="pandas", batch_timeout_ms=None)
        .name("batches")
        .map(lambda r: (r["id"], r["y"]))
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("ray-map-batches-kill", executor="ray")
    _kill_once_checkpointed(client, "batches")
    assert client.wait(180).restarts >= 1
    assert sorted(map(tuple, read_committed(out_dir))) == [(i, i % 13 * 2) for i in range(n)]


class Total(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + value[1]

    def get_result(self, acc):
        return acc


class WithKey(ProcessWindowFunction):
    def process(self, key, context, elements):
        (total,) = elements
        yield key, total


def test_a_window_function_over_an_aggregate_is_exact_after_a_killed_actor(ray_cluster, checkpoint_dir, out_dir):
    n = 40_000
    env = _env(checkpoint_dir)
    (
        env.from_generator(lambda i: (f"k{i % 7}", i), count=n, records_per_second=10_000)
        .set_parallelism(1)
        .key_by(lambda r: r[0])
        .count_window(100)
        .aggregate(Total(), window_function=WithKey())
        .name("windows")
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("ray-window-function-kill", executor="ray")
    _kill_once_checkpointed(client, "windows")
    assert client.wait(180).restarts >= 1
    per_key = collections.defaultdict(list)
    for i in range(n):
        per_key[f"k{i % 7}"].append(i)
    want = [(k, sum(vs[j : j + 100])) for k, vs in per_key.items() for j in range(0, len(vs) - 99, 100)]
    assert sorted(map(tuple, read_committed(out_dir))) == sorted(want)


class Remember(KeyedProcessFunction):
    """Writes each record's key with a 1 s TTL; a record ("read", key) yields what is left."""

    def open(self, ctx):
        d = ValueStateDescriptor("seen")
        d.enable_time_to_live(StateTtlConfig.new_builder(1_000).build())
        self.seen = ctx.get_state(d)

    def process_element(self, value, ctx):
        op, key = value
        if op == "write":
            self.seen.update(key)
        else:
            yield key, self.seen.value()


def test_ttl_state_restored_in_new_processes_has_expired_by_then(ray_cluster, checkpoint_dir, out_dir, tmp_path):
    env = _env(checkpoint_dir)
    (
        env.from_generator(lambda i: ("write", f"k{i % 5}"), records_per_second=100)
        .uid("writes")
        .key_by(lambda r: r[1])
        .process(Remember())
        .uid("remember")
        .sink_to(DiscardingSink())
    )
    client = env.execute_async("ray-ttl-write", executor="ray")
    where = client.stop(str(tmp_path / "sp"))
    assert client.status() is JobStatus.SUSPENDED
    time.sleep(1.2)  # processing time: the TTL runs on the wall clock, in every process alike
    env = _env(checkpoint_dir)
    env.restore_from_savepoint(where, allow_non_restored_state=True)
    (
        env.from_collection([("read", f"k{i}") for i in range(5)])
        .uid("reads")
        .key_by(lambda r: r[1])
        .process(Remember())
        .uid("remember")
        .sink_to(FileSink(out_dir))
    )
    env.execute("ray-ttl-read", executor="ray")
    assert sorted(map(tuple, read_committed(out_dir))) == [(f"k{i}", None) for i in range(5)]

"""Async I/O as Flink has it (weir.runtime.async_io): the queue of calls in flight
stays full across batches, results never pass a watermark, and records whose
calls were in flight at a checkpoint are called again after a failover, with
exact output; ordered and unordered, on the in-process executor."""

from __future__ import annotations

import asyncio
import collections

import pytest

from tests.kills import kill_each_after_checkpoints
from weir import (
    AsyncDataStream,
    AsyncFunction,
    RestartStrategy,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed

N = 400


class SlowLookup(AsyncFunction):
    """Answers (key, value * 10) after 20 ms."""

    async def async_invoke(self, value):
        await asyncio.sleep(0.02)
        return [(value[0], value[1] * 10)]


def _env(checkpoint_dir: str) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


def _source(env, rate=1_000):
    """Records (i % 7, i) stamped i ms, a few at a time (the rate keeps batches small)."""
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r[1])
    return env.from_generator(lambda i: (i % 7, i), count=N, records_per_second=rate, watermark_strategy=ws)


class OneSlowCall(AsyncFunction):
    """Record 0's call takes a second; the others 5 ms. Each later call notes
    whether record 0's was still running when it began."""

    slow_running = False
    began_beside_it: list[int] = []

    async def async_invoke(self, value):
        if value[1] == 0:
            OneSlowCall.slow_running = True
            await asyncio.sleep(1.0)
            OneSlowCall.slow_running = False
        else:
            if OneSlowCall.slow_running:
                OneSlowCall.began_beside_it.append(value[1])
            await asyncio.sleep(0.005)
        return [(value[0], value[1] * 10)]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_slow_call_does_not_hold_up_the_records_after_it_and_results_never_pass_a_watermark(
    checkpoint_dir, out_dir, ordered
):
    """Before, a batch's calls ran together and the task waited for the slowest
    before it took the next batch: no call began while record 0's ran."""
    OneSlowCall.began_beside_it = []
    env = _env(checkpoint_dir)
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    results = wait(_source(env), OneSlowCall(), 5_000, capacity=1_000)
    # Per 100 ms of event time: had a watermark passed a result, the window would miss it (late, dropped).
    (
        results.key_by(lambda r: r[0])
        .window(TumblingEventTimeWindows.of(100))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir))
    )
    env.execute("async-overlap", executor="local")
    totals: collections.Counter = collections.Counter()
    for i in range(N):
        totals[i % 7] += i * 10
    committed: collections.Counter = collections.Counter()
    for key, total in read_committed(out_dir):
        committed[key] += total
    assert committed == totals
    assert len(OneSlowCall.began_beside_it) > N // 2  # at 1,000 records/s, most come within the slow call's second


@pytest.mark.parametrize("ordered", [True, False])
def test_records_in_flight_at_a_checkpoint_are_called_again_after_a_failover_and_the_output_is_exact(
    checkpoint_dir, out_dir, ordered
):
    env = _env(checkpoint_dir)
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    wait(_source(env, rate=300), SlowLookup(), 5_000, capacity=16).sink_to(FileSink(out_dir))  # 1.3 s of input
    client = env.execute_async("async-failover", executor="local")
    kill_each_after_checkpoints(client, "source-generator", subtasks=(0,), checkpoints=3)
    assert client.wait(60).restarts == 1
    got = sorted(tuple(r) for r in read_committed(out_dir))
    assert got == sorted((i % 7, i * 10) for i in range(N))

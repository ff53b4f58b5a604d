"""Window and interval joins on a real local Ray cluster, with a task actor of
each join killed mid-way: the committed pairs equal a plain-Python reference,
none lost and none twice."""

from __future__ import annotations

import collections
import threading

import pytest

from weir import JoinFunction, ProcessJoinFunction, RestartStrategy, StreamExecutionEnvironment
from weir.common import Duration, WatermarkStrategy
from weir.common.watermark_strategy import TimestampAssigner
from weir.connectors.files import FileSink, read_committed
from weir.datastream.window import TumblingEventTimeWindows

pytestmark = pytest.mark.ray

N, KEYS, WINDOW_MS, LOWER, UPPER = 12_000, 40, 100, -5, 5


class AtSecond(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[1]


def _order(i: int) -> tuple[str, int]:
    return f"k{i % KEYS}", i


def _payment(i: int) -> tuple[str, int]:
    return f"k{(i * 7) % KEYS}", i + 2


class Pair(JoinFunction):
    def join(self, first, second):
        return first[0], first[1], second[1]


class Within(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        yield left[0], left[1], right[1]


def _streams(checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.2))
    stamps = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(AtSecond())
    orders = env.from_generator(_order, N, records_per_second=4_000, watermark_strategy=stamps)
    payments = env.from_generator(_payment, N, records_per_second=4_000, watermark_strategy=stamps)
    return env, orders, payments


def _reference(within) -> collections.Counter:
    by_key = collections.defaultdict(list)
    for i in range(N):
        by_key[_payment(i)[0]].append(_payment(i)[1])
    return collections.Counter((key, ts, p) for key, ts in map(_order, range(N)) for p in by_key[key] if within(ts, p))


def _run_with_kill(env, name, vertex, out):
    client = env.execute_async(name)
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):
        assert not client.status().is_terminal, "the job ended before the kill"
        threading.Event().wait(0.05)
    client.kill_task(vertex, 1)
    result = client.wait(180)
    assert result.restarts >= 1
    return collections.Counter(map(tuple, read_committed(out)))


def test_a_window_join_on_ray_is_exact_through_a_kill(ray_cluster, checkpoint_dir, out_dir):
    env, orders, payments = _streams(checkpoint_dir)
    joined = orders.join(payments).where(lambda o: o[0]).equal_to(lambda p: p[0])
    joined.window(TumblingEventTimeWindows.of(WINDOW_MS)).apply(Pair()).sink_to(FileSink(out_dir))
    got = _run_with_kill(env, "window-join", "join", out_dir)
    assert got == _reference(lambda o, p: o // WINDOW_MS == p // WINDOW_MS)


def test_an_interval_join_on_ray_is_exact_through_a_kill(ray_cluster, checkpoint_dir, out_dir):
    env, orders, payments = _streams(checkpoint_dir)
    keyed = orders.key_by(lambda o: o[0]).interval_join(payments.key_by(lambda p: p[0]))
    keyed.between(LOWER, UPPER).process(Within()).sink_to(FileSink(out_dir))
    got = _run_with_kill(env, "interval-join", "intervaljoin", out_dir)
    assert got == _reference(lambda o, p: o + LOWER <= p <= o + UPPER)

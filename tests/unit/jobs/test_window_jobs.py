"""Window jobs on the in-process executor: random out-of-order data against a
plain-Python reference, with a failover in the middle; drain; suspend and resume."""

from __future__ import annotations

import collections
import random

import pytest

from weir import (
    EventTimeSessionWindows,
    JobStatus,
    RestartStrategy,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from weir.connectors.files import FileSink, read_committed

N, KEYS, STEP, DISORDER = 3_000, 7, 10, 400


def event(seed: int, i: int) -> tuple[str, int, int]:
    """(key, timestamp, value): timestamps rise by STEP per record but each may lag
    up to DISORDER behind, so the stream is out of order by at most DISORDER."""
    rng = random.Random(seed * 1_000_003 + i)
    return (f"k{rng.randrange(KEYS)}", i * STEP - rng.randrange(DISORDER + 1), rng.randrange(100))


def describe(key, ctx, elements):
    w = ctx.window()
    return [(key, w.start, w.end, len(elements), sum(v for _, _, v in elements))]


ASSIGNERS = {
    "tumbling": TumblingEventTimeWindows.of(1_000),
    "sliding": SlidingEventTimeWindows.of(1_000, 250),
    "session": EventTimeSessionWindows.with_gap(60),
}


def reference(seed: int, kind: str) -> set[tuple]:
    by_key: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for i in range(N):
        k, ts, v = event(seed, i)
        by_key[k].append((ts, v))
    out = set()
    for k, evs in by_key.items():
        evs.sort()
        if kind == "session":
            groups: list[list[tuple[int, int]]] = []
            for ts, v in evs:
                if groups and ts - groups[-1][-1][0] <= 60:
                    groups[-1].append((ts, v))
                else:
                    groups.append([(ts, v)])
            out |= {(k, g[0][0], g[-1][0] + 60, len(g), sum(v for _, v in g)) for g in groups}
            continue
        size, slide = (1_000, 1_000) if kind == "tumbling" else (1_000, 250)
        windows: dict[int, list[int]] = collections.defaultdict(list)
        for ts, v in evs:
            last = ts - ts % slide
            for start in range(last, ts - size, -slide):
                windows[start].append(v)
        out |= {(k, s, s + size, len(vs), sum(vs)) for s, vs in windows.items()}
    return out


def final_per_window(rows) -> set[tuple]:
    """A session that grew after it fired fires again with the same start: keep the last."""
    last = {}
    for r in rows:
        last[(r[0], r[1])] = tuple(r)
    return set(last.values())


def window_job(env, seed, kind, out_dir, rate=None, count=N):
    ws = WatermarkStrategy.for_bounded_out_of_orderness(DISORDER).with_timestamp_assigner(lambda e: e[1])
    (
        env.from_generator(lambda i: event(seed, i), count=count, records_per_second=rate, watermark_strategy=ws)
        .uid("events")
        .key_by(lambda e: e[0])
        .window(ASSIGNERS[kind])
        .process(describe)
        .uid("windows")
        .sink_to(FileSink(out_dir))
        .uid("out")
    )
    return env


def _env(checkpoint_dir, parallelism=2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.01))
    env.set_auto_watermark_interval(20)
    return env


def _completed(client) -> int:
    return sum(c["status"] == "COMPLETED" for c in client.checkpoints())


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session"])
@pytest.mark.parametrize("seed", [1, 2])
def test_windows_match_the_reference_with_a_failover_in_the_middle(checkpoint_dir, out_dir, kind, seed):
    print(f"seed={seed} kind={kind}")
    client = window_job(_env(checkpoint_dir), seed, kind, out_dir, rate=6_000).execute_async(
        f"windows-{kind}", executor="local"
    )
    client.wait_until(lambda c: _completed(c) >= 2)
    client.kill_task("window-process", seed % 2)
    result = client.wait(60)
    assert result.restarts == 1
    rows = [tuple(r) for r in read_committed(out_dir)]
    if kind != "session":
        assert len(rows) == len(set(rows)), "a window fired twice"
    assert final_per_window(rows) == reference(seed, kind)


def test_stop_with_drain_fires_every_open_window(tmp_path, checkpoint_dir, out_dir):
    client = window_job(_env(checkpoint_dir), 3, "tumbling", out_dir, rate=3_000, count=None).execute_async(
        "drain-windows", executor="local"
    )
    client.wait_until(lambda c: _completed(c) >= 2)
    client.stop(str(tmp_path / "sp"), drain=True)
    result = client.wait(30)
    assert result.status is JobStatus.FINISHED
    rows = [tuple(r) for r in read_committed(out_dir)]
    # Every record read before the stop is in exactly one fired window, the open ones included.
    read = sum(m["records_in"] for m in result.metrics if m["task"].startswith("source"))
    assert read > 0 and sum(r[3] for r in rows) == read


def test_suspend_keeps_open_windows_and_a_resumed_job_finishes_them(tmp_path, checkpoint_dir, out_dir):
    client = window_job(_env(checkpoint_dir), 4, "sliding", out_dir, rate=3_000).execute_async(
        "suspend-windows", executor="local"
    )
    client.wait_until(lambda c: _completed(c) >= 2)
    savepoint = client.stop(str(tmp_path / "sp"))
    assert client.wait(30).status is JobStatus.SUSPENDED
    before = len(read_committed(out_dir))
    env = _env(checkpoint_dir, parallelism=3)
    env.restore_from_savepoint(savepoint)
    window_job(env, 4, "sliding", out_dir).execute("suspend-windows-2", executor="local")
    rows = [tuple(r) for r in read_committed(out_dir)]
    assert 0 < before < len(rows)
    assert len(rows) == len(set(rows)) and set(rows) == reference(4, "sliding")


def test_windows_fire_while_one_source_is_idle(checkpoint_dir, out_dir):
    from tests.unit.jobs.test_event_time import _Silent

    env = _env(checkpoint_dir, parallelism=1)
    ts = lambda e: e[1]  # noqa: E731
    silent = env.from_source(
        _Silent(),
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ts).with_idleness(200),
        "silent",
    )
    clicks = env.from_generator(
        lambda i: ("ann", i * 100, 1),
        records_per_second=1_000,
        watermark_strategy=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ts),
    )
    clicks.union(silent).key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(10_000)).process(describe).sink_to(
        FileSink(out_dir)
    )
    client = env.execute_async("idle-windows", executor="local")
    client.wait_until(lambda c: bool(read_committed(out_dir)))  # a window fires only if the silent source is left out
    client.cancel()
    assert tuple(read_committed(out_dir)[0]) == ("ann", 0, 10_000, 100, 100)

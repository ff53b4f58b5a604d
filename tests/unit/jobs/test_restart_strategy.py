"""The restart strategy: Flink's delays, its resets and weir's, and the default a
job gets. The rules are plain functions of a :class:`RestartBackoff`, driven by
hand with the clock as a number; the jobs at the end run in-process."""

from __future__ import annotations

import os
import random

import pytest

from tests.unit.jobs.test_lifecycle_jobs import _wait
from weir import (
    InvalidConfigurationError,
    JobExecutionError,
    JobStatus,
    MapFunction,
    RestartStrategy,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.config import restart_strategy_for
from weir.runtime.restarts import RestartBackoff

# Flink's exponential delay without jitter, from 0.1 s doubling to 1 s.
EXP = RestartStrategy.exponential_delay(None, 0.1, 2.0, 1.0, jitter=0.0, reset_backoff_threshold_s=60.0)


def _delays(backoff: RestartBackoff, failures: list[float]) -> tuple[RestartBackoff, list[float]]:
    """Fail at each of these clock times (each after the restart before it was due);
    the delays of the restarts."""
    delays = []
    for now in failures:
        nxt = backoff.failed(now, 0.5)
        assert nxt is not None, f"the job failed at {now}"
        delays.append(round(nxt.restart_at - now, 9))
        backoff = nxt
    return backoff, delays


def test_exponential_delays_double_from_the_initial_one_up_to_the_cap():
    assert [EXP.delay_before(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    _, delays = _delays(RestartBackoff(EXP), [0.0, 1.0, 2.0, 3.0, 4.0, 6.0])
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [RestartStrategy.fixed_delay(3, 2).delay_before(n) for n in (1, 2, 3)] == [2, 2, 2]


def test_jitter_moves_a_delay_by_up_to_its_share_either_way_and_never_below_the_initial_delay():
    jittered = RestartStrategy.exponential_delay(None, 0.1, 2.0, 1.0, jitter=0.1)
    assert [jittered.delay_before(3, draw) for draw in (0.0, 0.5, 1.0)] == pytest.approx([0.36, 0.4, 0.44])
    assert jittered.delay_before(1, 0.0) == 0.1  # as Flink: jitter does not restart sooner than the initial delay
    assert (
        jittered.delay_before(4, 1.0) == pytest.approx(0.88) and jittered.delay_before(5, 1.0) == 1.0
    )  # the cap holds
    # The job master draws from its restart_jitter: a seed replays the delays.
    seed = 1234
    runs = []
    for _ in range(2):
        rng, backoff, delays = random.Random(seed), RestartBackoff(jittered), []
        for now in (0.0, 1.0, 2.0):
            backoff = backoff.failed(now, rng.random())
            delays.append(backoff.restart_at - now)
        runs.append(delays)
    assert runs[0] == runs[1] != pytest.approx([0.1, 0.2, 0.4]), f"seed {seed}"
    assert all(lo <= d <= hi for d, (lo, hi) in zip(runs[0], [(0.1, 0.11), (0.18, 0.22), (0.36, 0.44)])), f"seed {seed}"


def test_a_delay_far_past_the_cap_does_not_overflow():
    assert EXP.delay_before(5_000) == 1.0


def test_without_a_limit_the_job_restarts_however_often_it_fails():
    backoff, now = RestartBackoff(EXP), 0.0
    for n in range(1_000):
        nxt = backoff.failed(now, 0.5)
        assert nxt is not None, f"failure {n + 1} failed the job"
        backoff, delay, now = nxt, nxt.restart_at - now, nxt.restart_at + 1  # each a second after the restart before it
    assert backoff.attempts == 1_000 and delay == pytest.approx(1.0)


def test_a_bounded_exponential_delay_fails_the_job_after_its_attempts_in_a_row():
    bounded = RestartBackoff(RestartStrategy.exponential_delay(2, 0.1, 2.0, 1.0, jitter=0.0))
    backoff, _ = _delays(bounded, [0.0, 1.0])
    assert backoff.failed(2.0, 0.5) is None


def test_after_running_the_reset_threshold_without_failing_the_backoff_starts_over():
    backoff, delays = _delays(RestartBackoff(EXP), [0.0, 1.0, 2.0])
    assert delays == [0.1, 0.2, 0.4] and backoff.restart_at == 2.4
    not_yet = backoff.failed(2.4 + 59.9, 0.5)
    assert not_yet is not None and not_yet.attempts == 4 and not_yet.restart_at == pytest.approx(2.4 + 59.9 + 0.8)
    reset = backoff.failed(2.4 + 60.0, 0.5)  # 60 s since the latest restart was due
    assert reset is not None and reset.attempts == 1 and reset.restart_at == pytest.approx(2.4 + 60.0 + 0.1)
    # A bounded strategy counts its attempts since the reset, as Flink's.
    bounded = RestartBackoff(
        RestartStrategy.exponential_delay(2, 0.1, 2.0, 1.0, jitter=0.0, reset_backoff_threshold_s=60.0)
    )
    bounded, _ = _delays(bounded, [0.0, 1.0])
    assert bounded.failed(2.0, 0.5) is None and bounded.failed(1.2 + 60.0, 0.5) is not None


def test_a_second_checkpoint_after_a_restart_that_began_after_the_first_completed_resets_the_backoff():
    backoff, _ = _delays(RestartBackoff(EXP), [0.0, 1.0, 2.0])  # attempts 3, restarted at 2.4
    first = backoff.checkpoint_completed(started=2.5, now=2.6)
    assert first.attempts == 3, "a checkpoint right after the restart may hold only what the tasks restored"
    overlapping = first.checkpoint_completed(started=2.55, now=2.7)
    assert overlapping.attempts == 3, "it began before the first completed: no proof the tasks ran on"
    reset = first.checkpoint_completed(started=2.6, now=3.1)
    assert reset.attempts == 0
    after, delays = _delays(reset, [3.5])
    assert delays == [0.1] and after.attempts == 1
    # A failure before the second checkpoint (a record that fails every time) escalates.
    again, delays = _delays(first, [3.0])
    assert delays == [0.8] and again.checkpoint_completed(3.9, 4.0).checkpoint_completed(4.0, 4.1).attempts == 0


def test_fixed_delay_counts_restarts_over_the_whole_life_and_checkpoints_do_not_reset_it():
    backoff = RestartBackoff(RestartStrategy.fixed_delay(3, 0.5))
    for n in range(3):
        backoff = backoff.failed(10_000.0 * n, 0.0)  # hours apart, checkpoints in between
        assert backoff is not None
        backoff = backoff.checkpoint_completed(backoff.restart_at + 1, backoff.restart_at + 2)
        backoff = backoff.checkpoint_completed(backoff.restart_at + 3, backoff.restart_at + 4)
        assert backoff.restart_at == 10_000.0 * n + 0.5  # no jitter
    assert backoff.failed(50_000.0, 0.5) is None


def test_failures_while_a_restart_is_on_its_way_join_it():
    """Other regions failing before the first one's restart was due (a node lost
    with several tasks) count as one attempt, as Flink merges them."""
    backoff, _ = _delays(RestartBackoff(EXP), [0.0])
    joined = backoff.failed(0.05, 0.5)
    assert joined == backoff and joined.restart_at == 0.1
    later = backoff.failed(0.15, 0.5)
    assert later is not None and later.attempts == 2 and later.restart_at == pytest.approx(0.35)
    fixed = RestartBackoff(RestartStrategy.fixed_delay(3, 0.5)).failed(0.0, 0.5)
    assert fixed is not None and fixed.failed(0.1, 0.5).attempts == 2  # fixed delay counts each, as Flink's


def test_without_a_strategy_set_the_default_depends_on_checkpointing():
    with_checkpoints = restart_strategy_for(None, checkpointing=True)
    assert with_checkpoints == RestartStrategy(None, 0.1, 2.0, 60.0, 0.1, 3600.0)
    assert restart_strategy_for(None, checkpointing=False) == RestartStrategy.fixed_delay(3, 0.5)
    chosen = RestartStrategy.fixed_delay(7, 1)
    assert restart_strategy_for(chosen, checkpointing=True) is chosen

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).print()
    assert env.get_job_graph().execution.restart_strategy is None  # resolved by the job master, on the graph it runs
    # BATCH mode runs without periodic checkpoints, and so with the fixed default.
    env.enable_checkpointing(100).set_runtime_mode(RuntimeExecutionMode.BATCH)
    graph = env.get_job_graph()
    assert restart_strategy_for(
        graph.execution.restart_strategy, graph.checkpointing.enabled
    ) == RestartStrategy.fixed_delay(3, 0.5)


@pytest.mark.parametrize(
    "make,setting",
    [
        (lambda: RestartStrategy.exponential_delay(jitter=1.5), "restart jitter"),
        (lambda: RestartStrategy.exponential_delay(jitter=-0.1), "restart jitter"),
        (lambda: RestartStrategy.exponential_delay(reset_backoff_threshold_s=0), "restart reset_backoff_threshold_s"),
        (lambda: RestartStrategy.exponential_delay(2.5), "restart max_attempts"),
        (lambda: RestartStrategy.exponential_delay(3, 0.5, 0.5), "restart multiplier"),
    ],
)
def test_invalid_restart_settings_are_refused_by_name(make, setting):
    with pytest.raises(InvalidConfigurationError) as info:
        make()
    assert info.value.setting == setting


# ---------------------------------------------------------------- in jobs

N = 2_000


class FailsAtFirst(MapFunction):
    """Raises on record ``at`` the first ``times`` times it is read (across
    restarts: the count is kept in files)."""

    def __init__(self, folder: str, at: int, times: int) -> None:
        self.folder, self.at, self.times = folder, at, times

    def map(self, value: int) -> int:
        if value == self.at:
            failures = len(os.listdir(self.folder))
            if failures < self.times:
                open(os.path.join(self.folder, str(failures)), "w").close()
                raise ValueError(f"failure {failures + 1} at record {value}")
        return value


def _failing_job(tmp_path, times: int, checkpoint_ms: int | None) -> StreamExecutionEnvironment:
    folder = tmp_path / "failures"
    folder.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/chk")
    if checkpoint_ms is not None:
        env.enable_checkpointing(checkpoint_ms)
    (
        env.from_generator(lambda i: i, count=N, records_per_second=5_000)
        .map(FailsAtFirst(str(folder), 1_000, times))
        .sink_to(FileSink(str(tmp_path / "out")))
    )
    return env


def test_with_checkpoints_and_no_strategy_set_a_job_outlives_more_than_three_failures(tmp_path):
    """The default used to be fixed_delay(3): the 4th failure failed the job."""
    result = _failing_job(tmp_path, times=4, checkpoint_ms=50).execute("outlives", executor="local")
    assert result.status is JobStatus.FINISHED and result.restarts == 4
    assert sorted(read_committed(str(tmp_path / "out"))) == list(range(N))


def test_without_checkpoints_and_no_strategy_set_the_job_fails_after_three_restarts(tmp_path):
    with pytest.raises(JobExecutionError) as info:
        _failing_job(tmp_path, times=5, checkpoint_ms=None).execute("fails", executor="local")
    assert "failed after 3 restart(s) (restart strategy allows 3): " in str(info.value)
    assert "failure 4 at record 1000" in str(info.value)


def test_a_bounded_exponential_delay_names_its_limit_when_the_job_fails(tmp_path):
    env = _failing_job(tmp_path, times=5, checkpoint_ms=None)  # no checkpoint resets the backoff
    env.set_restart_strategy(RestartStrategy.exponential_delay(2, 0.01, 2.0, 0.1))
    with pytest.raises(JobExecutionError) as info:
        env.execute("bounded", executor="local")
    assert (
        "failed after 2 restart(s) (restart strategy allows 2 in a row, counted since its backoff last reset): "
        in str(info.value)
    )


def _completed(client) -> int:
    return sum(c["status"] == "COMPLETED" for c in client.checkpoints())


def test_kills_a_checkpoint_apart_never_use_up_a_strategy_that_allows_one_in_a_row(tmp_path):
    """Each kill comes once two checkpoints completed after the previous restart:
    the backoff reset each time, so one attempt between resets is enough."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(20).get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/chk")
    env.set_restart_strategy(RestartStrategy.exponential_delay(1, 0.01, 2.0, 0.1))
    env.from_generator(lambda i: i, count=N, records_per_second=1_000).name("nums").sink_to(
        FileSink(str(tmp_path / "out"))
    )
    client = env.execute_async("kills", executor="local")
    kills = 4
    for n in range(kills):
        _wait(lambda: "nums/0" in client.tasks(), client)
        done = _completed(client)
        _wait(lambda done=done: _completed(client) >= done + 2, client)
        client.kill_task("nums", 0)
        _wait(lambda n=n: client.restarts() == n + 1, client)
    result = client.wait(60)
    assert result.status is JobStatus.FINISHED and result.restarts == kills
    assert sorted(read_committed(str(tmp_path / "out"))) == list(range(N))

from __future__ import annotations

import os

import pytest

from weir import InvalidConfigurationError, RestartStrategy, StreamExecutionEnvironment
from weir.runtime import sources
from weir.runtime.clock import ManualClock


def test_negative_checkpoint_interval_names_the_setting():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match=r"checkpoint interval_ms=-5: must be positive"):
        env.enable_checkpointing(-5)


def test_unknown_storage_scheme_names_the_setting():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match=r"checkpoint storage='nosuch://bucket/x'"):
        env.get_checkpoint_config().set_checkpoint_storage("nosuch://bucket/x")


@pytest.mark.parametrize(
    "call,setting",
    [
        (lambda env: env.set_parallelism(0), "parallelism"),
        (lambda env: env.set_max_parallelism(-1), "max_parallelism"),
        (lambda env: env.get_checkpoint_config().set_checkpoint_timeout(0), "checkpoint timeout_ms"),
        (lambda env: env.set_task_cpus(0), "task_cpus"),
        (lambda env: env.set_restart_strategy("always"), "restart strategy"),
        (lambda env: env.get_config().set_auto_watermark_interval(0), "auto watermark interval_ms"),
        (lambda env: env.from_generator(lambda i: i, records_per_second=0), "from_generator: records_per_second"),
    ],
)
def test_invalid_settings_are_refused_by_name(call, setting):
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError) as info:
        call(env)
    assert info.value.setting == setting


def test_restart_delays():
    assert [RestartStrategy.fixed_delay(3, 2).delay_before(i) for i in (1, 2, 3)] == [2, 2, 2]
    exp = RestartStrategy.exponential_delay(5, 0.5, 2, 3)
    assert [exp.delay_before(i) for i in (1, 2, 3, 4)] == [0.5, 1, 2, 3]


@pytest.mark.parametrize(
    "call,setting",
    [
        (lambda env: env.enable_checkpointing(0.5), "checkpoint interval_ms"),
        (lambda env: env.set_parallelism(2.5), "parallelism"),
        (lambda env: env.set_batch_size(0.9), "batch_size"),
        (lambda env: env.set_buffer_timeout(0.5), "buffer_timeout_ms"),
        (lambda env: env.get_checkpoint_config().set_num_retained_checkpoints(1.5), "num_retained_checkpoints"),
        (lambda env: RestartStrategy.fixed_delay(2.5, 1), "restart_attempts"),
    ],
)
def test_a_fraction_where_a_whole_number_is_meant_is_refused_not_truncated(call, setting):
    """Issue #13 item 7: 0.5 ms used to become 0 (a checkpoint as often as possible)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match="must be a whole number") as info:
        call(env)
    assert info.value.setting == setting
    env.set_parallelism(3.0)  # a float that is whole is fine
    assert env.get_parallelism() == 3


def test_the_default_checkpoint_storage_is_this_users_alone(tmp_path, monkeypatch):
    """Issue #16: it was one folder in the shared temp folder, world-readable, where
    anyone could plant a checkpoint for a job to restore."""
    import stat
    import tempfile

    from weir.runtime.config import default_checkpoint_storage

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    uri = default_checkpoint_storage()
    folder = tmp_path / f"weir-{os.getuid()}"
    assert uri == f"file://{folder}/checkpoints"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    if os.getuid() == 0:  # root can hand the folder to someone else, as an attacker would have made it
        os.chown(folder, 12345, 12345)
        with pytest.raises(InvalidConfigurationError, match=r"is not a folder of this user's \(owner uid 12345"):
            default_checkpoint_storage()


def test_get_config_is_pyflinks_execution_config():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_config().set_auto_watermark_interval(50).set_parallelism(3)
    assert (env.get_config().get_auto_watermark_interval(), env.get_parallelism()) == (50, 3)


def test_a_rate_limit_lets_records_go_as_time_passes_and_makes_up_a_slow_stretch():
    clock = ManualClock(100.0)
    limit = sources.RateLimit(1_000, clock)
    assert limit.allowance(500) == (0, 0.001)  # the first poll starts the clock
    clock.advance(0.125)
    assert limit.allowance(500) == (125, 0.0)
    limit.spend(125)
    clock.advance(0.5)  # the reader was busy: 500 more are due, and go at once
    assert limit.allowance(1_000) == (500, 0.0)
    limit.spend(500)
    assert limit.allowance(10) == (0, pytest.approx(0.001))


def test_a_replayed_tables_rate_is_shared_by_the_readers_that_have_splits():
    from weir.connectors.spark import ArrowBlockSource, SparkPartition

    partitions = [SparkPartition("raydp-executor-0", "weir", 1, i, "{}", "spark://driver:1") for i in range(2)]
    source = ArrowBlockSource(partitions, records_per_second=1_000)  # two Spark partitions: two splits
    # Four readers, two of them idle: the two that read get half the rate each, not a quarter.
    assert [source.create_reader(i, 4)._limit.per_second for i in range(4)] == [500] * 4
    assert source.create_reader(0, 1)._limit.per_second == 1_000


_NOT_NUMBERS = [float("nan"), float("inf"), float("-inf"), "2", None, True]


@pytest.mark.parametrize("value", _NOT_NUMBERS, ids=repr)
@pytest.mark.parametrize(
    "call,setting",
    [
        (lambda env, v: env.enable_checkpointing(v), "checkpoint interval_ms"),
        (lambda env, v: env.get_checkpoint_config().set_checkpoint_timeout(v), "checkpoint timeout_ms"),
        (lambda env, v: env.get_checkpoint_config().set_min_pause_between_checkpoints(v), "checkpoint min_pause_ms"),
        (lambda env, v: env.get_checkpoint_config().set_max_concurrent_checkpoints(v), "max_concurrent_checkpoints"),
        (lambda env, v: env.get_checkpoint_config().set_num_retained_checkpoints(v), "num_retained_checkpoints"),
        (
            lambda env, v: env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(v),
            "tolerable_checkpoint_failures",
        ),
        (lambda env, v: env.set_parallelism(v), "parallelism"),
        (lambda env, v: env.set_max_parallelism(v), "max_parallelism"),
        (lambda env, v: env.get_config().set_auto_watermark_interval(v), "auto watermark interval_ms"),
        (lambda env, v: env.set_task_cpus(v), "task_cpus"),
        (lambda env, v: env.set_batch_size(v), "batch_size"),
        (lambda env, v: env.set_buffer_timeout(v), "buffer_timeout_ms"),
        (lambda env, v: RestartStrategy.fixed_delay(v, 1), "restart_attempts"),
        (lambda env, v: RestartStrategy.fixed_delay(3, v), "restart delay_s"),
        (lambda env, v: RestartStrategy.exponential_delay(max_attempts=v), "restart max_attempts"),
        (lambda env, v: RestartStrategy.exponential_delay(initial_delay_s=v), "restart initial_delay_s"),
        (lambda env, v: RestartStrategy.exponential_delay(multiplier=v), "restart multiplier"),
        (lambda env, v: RestartStrategy.exponential_delay(max_delay_s=v), "restart max_delay_s"),
        (lambda env, v: RestartStrategy.exponential_delay(jitter=v), "restart jitter"),
        (
            lambda env, v: RestartStrategy.exponential_delay(reset_backoff_threshold_s=v),
            "restart reset_backoff_threshold_s",
        ),
    ],
)
def test_nan_infinity_and_non_numbers_are_refused_by_name(call, setting, value):
    """Issue row 12: enable_checkpointing(nan) raised a bare ValueError, inf an
    OverflowError, and a NaN multiplier or delay was taken (every comparison with
    NaN is False), so the job restarted at once for ever."""
    if value is None and setting == "restart max_attempts":
        pytest.skip('None there means "no limit"')
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError) as info:
        call(env, value)
    assert info.value.setting == setting
    assert str(info.value).startswith(f"invalid setting {setting}={value!r}: must be a ")


def test_a_multiplier_below_one_is_refused_and_numpy_numbers_are_numbers():
    import numpy as np

    with pytest.raises(InvalidConfigurationError, match=r"restart multiplier=0.5: must be a number of at least 1"):
        RestartStrategy.exponential_delay(multiplier=0.5)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(np.int64(4))
    assert env.get_parallelism() == 4 and type(env.get_parallelism()) is int
    assert RestartStrategy.exponential_delay(multiplier=np.float64(1.5)).backoff_multiplier == 1.5

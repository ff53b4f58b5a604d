"""Every kind of user function that raises: the job restarts under its strategy,
then fails with an error naming the function, the operator and (where there is
one) the record, with the user's traceback."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from weir import KeyedProcessFunction, RestartStrategy, StreamExecutionEnvironment, ValueStateDescriptor
from weir.runtime.errors import JobExecutionError
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import Sink, SinkWriter


def boom(x: Any, *rest: Any) -> Any:
    if x == 7 or (isinstance(x, tuple) and x[1] == 7):
        raise ZeroDivisionError("bad seven")
    return x


class _BoomWriter(SinkWriter):
    def write(self, records: list[Any]) -> None:
        for r in records:
            boom(r)


class BoomSink(Sink):
    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _BoomWriter()


def _build(env: StreamExecutionEnvironment, kind: str) -> str:
    """A job whose ``kind`` of function raises on record 7; returns the operator's name."""
    if kind == "source":
        env.from_generator(boom, count=20).name("numbers").sink_to(BoomSink())
        return "numbers"
    nums = env.from_collection(list(range(20)))
    keyed = nums.map(lambda i: ("k", i))
    if kind == "map":
        nums.map(boom).name("op").print()
    elif kind == "flat_map":
        nums.flat_map(lambda i: [boom(i)]).name("op").print()
    elif kind == "filter":
        nums.filter(lambda i: boom(i) is not None).name("op").print()
    elif kind == "key selector":
        nums.key_by(boom).reduce(lambda a, b: a).name("op").print()
    elif kind == "reduce":
        keyed.key_by(lambda t: t[0]).reduce(lambda a, b: boom(b)).name("op").print()
    elif kind == "process":
        keyed.key_by(lambda t: t[0]).process(lambda t, ctx: [boom(t)]).name("op").print()
    elif kind == "sink":
        nums.sink_to(BoomSink())
        return "Sink: BoomSink"
    return "op"


@pytest.mark.parametrize("kind", ["source", "map", "flat_map", "filter", "key selector", "reduce", "process", "sink"])
def test_a_raising_function_restarts_then_fails_naming_operator_and_traceback(checkpoint_dir, kind):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(1, 0))
    operator = _build(env, kind)
    with pytest.raises(JobExecutionError) as info:
        env.execute(f"raises-{kind.replace(' ', '-')}", executor="local")
    message = str(info.value)
    assert "after 1 restart(s)" in message, message
    assert f"of operator '{operator}' raised ZeroDivisionError: bad seven" in message, message
    assert 'raise ZeroDivisionError("bad seven")' in message, message  # the user's traceback
    if kind not in ("source", "sink"):
        assert "on record 7" in message or "on record ('k', 7)" in message, message


class KeepsALock(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.state = ctx.get_state(ValueStateDescriptor("lock"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.state.update(threading.Lock())  # cannot be pickled into a checkpoint
        yield value


def test_state_that_cannot_be_pickled_fails_the_checkpoint_naming_the_task(checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(50)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(1, 0))
    env.from_generator(lambda i: i, count=5_000, records_per_second=5_000).key_by(lambda i: i % 3).process(
        KeepsALock()
    ).name("locker").print()
    with pytest.raises(
        JobExecutionError,
        match=r"task \S+ holds state that cannot be pickled \(TypeError: cannot pickle '_thread.lock' object\)",
    ):
        env.execute("unpicklable-state", executor="local")

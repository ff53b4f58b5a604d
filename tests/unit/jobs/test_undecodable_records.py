"""A record that pickles on the sending task but cannot be unpickled on the
receiving one (a class whose ``__setstate__`` or ``__reduce__`` raises, a module
missing on the receiving side): the job fails with an error that names the
sending operator, the channel and the receiving task, with the user's
exception as its cause."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from weir import RestartStrategy, StreamExecutionEnvironment
from weir.runtime.errors import JobExecutionError, RecordDeserializationError
from weir.runtime.operators import StreamOperator
from weir.runtime.testing import TaskHarness


def _refuse(n: int) -> Any:
    raise ValueError("cannot rebuild me on the receiving side")


class Unrebuildable:
    """Pickles fine; unpickling it raises."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __reduce__(self) -> Any:
        return (_refuse, (self.n,))


def test_a_job_fails_naming_the_sender_the_channel_and_the_receiver(checkpoint_dir: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.no_restart())
    gen = env.from_generator(Unrebuildable, count=3).name("gen").uid("the-gen")
    gen.rebalance().map(lambda r: r).name("op").print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("undecodable", executor="local")
    cause = info.value.__cause__
    assert isinstance(cause, RecordDeserializationError), repr(cause)
    assert str(cause) == (
        "task op/0 cannot unpickle a delivery on its input channel 0 from operator 'the-gen' (task gen/0): "
        "ValueError: cannot rebuild me on the receiving side"
    )
    assert (cause.operator, cause.channel, cause.task) == ("the-gen", 0, "op/0")
    assert isinstance(cause.__cause__, ValueError)
    assert str(cause) in str(info.value)
    travelled = pickle.loads(pickle.dumps(cause))  # as from a task actor to the driver
    assert str(travelled) == str(cause) and isinstance(travelled.__cause__, ValueError)


def test_the_harness_names_the_channel_of_a_second_upstream_subtask(tmp_path: Any) -> None:
    h = TaskHarness([("op", StreamOperator)], channels=2, storage=tmp_path.as_uri(), subtask=1)
    h.deliver(1, [Unrebuildable(1)])
    assert h.result is not None and isinstance(h.result.error, RecordDeserializationError)
    expected = "task task/1 cannot unpickle a delivery on its input channel 1 from task upstream/1:"
    assert str(h.result.error).startswith(expected), str(h.result.error)

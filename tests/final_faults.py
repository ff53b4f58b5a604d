"""A bounded BATCH job that fails once after its final checkpoint, for the tests
that each final value is committed once whatever fails then: a ``close()`` that
raises, a sink commit that raises, or a task killed before it heard that the
final checkpoint completed. Each fault fires once, marked by a file, so that it
reaches task actors in other processes and the restarted job goes on."""

from __future__ import annotations

import collections
import os
from typing import Any

from weir import MapFunction, RestartStrategy, RuntimeExecutionMode, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import SinkWriter

KEYS = 100
RECORDS = 2_000


def first_time(mark: str) -> bool:
    """True the first time it is asked for ``mark`` (a file it creates)."""
    try:
        os.close(os.open(mark, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


class CloseFailsOnce(MapFunction):
    def __init__(self, mark: str) -> None:
        self.mark = mark

    def map(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        if first_time(self.mark):
            raise RuntimeError("close() fails once")


class _CommitFailsOnce(SinkWriter):
    def __init__(self, writer: SinkWriter, mark: str) -> None:
        self._writer, self._mark = writer, mark

    def write(self, records: list[Any]) -> None:
        self._writer.write(records)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return self._writer.prepare_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        if committables and first_time(self._mark):
            raise OSError("a transient error in the final commit")
        self._writer.commit(committables)

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        self._writer.checkpoint_completed(checkpoint_id)

    def close(self) -> None:
        self._writer.close()


class CommitFailsOnce(FileSink):
    """A FileSink whose first commit of something raises."""

    def __init__(self, path: str, mark: str) -> None:
        super().__init__(path)
        self.mark = mark

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _CommitFailsOnce(super().create_writer(ctx), self.mark)


def batch_keyed_sum(checkpoint_dir: str, out_dir: str, trigger: str, mark: str) -> StreamExecutionEnvironment:
    """A keyed sum over ``RECORDS`` records of ``KEYS`` keys in BATCH mode: the
    reduce emits each key's total from ``finish()``, and the sink commits them
    at the final checkpoint. ``trigger``: close, commit, or kill (done by the test)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.01))
    sums = env.from_collection([(i % KEYS, i) for i in range(RECORDS)]).key_by(lambda kv: kv[0]).sum(1)
    if trigger == "close":
        sums = sums.map(CloseFailsOnce(mark))
    sums.sink_to(CommitFailsOnce(out_dir, mark) if trigger == "commit" else FileSink(out_dir))
    return env


def expected_totals() -> list[tuple[int, int]]:
    """Each key's total, once: what the committed output must be."""
    totals: dict[int, int] = collections.defaultdict(int)
    for i in range(RECORDS):
        totals[i % KEYS] += i
    return sorted(totals.items())


def committed_totals(out_dir: str) -> list[tuple[int, int]]:
    return sorted(tuple(r) for r in read_committed(out_dir))

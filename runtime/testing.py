"""Test your own operators and functions without a job, as Flink's operator test
harnesses do. An :class:`OperatorHarness` runs one operator subtask through the
lifecycle a task would (setup, initialize_state, open, process, snapshot, notify,
finish, close) and collects what it emits::

    h = OperatorHarness.keyed_process(MyFunction(), key_selector=lambda r: r["user"])
    assert h.process({"user": "a"}, {"user": "a"}) == [...]
    snap = h.snapshot(1)
    h.close()
    # restore into two subtasks, as after a rescale to parallelism 2
    h0 = OperatorHarness.keyed_process(MyFunction(), lambda r: r["user"], restore=[snap], subtask=0, parallelism=2)
"""

from __future__ import annotations

from typing import Any, Callable

from runtime.events import Watermark
from runtime.functions import as_callable
from runtime.operators import (
    KeyedProcessOperator,
    KeyedReduceOperator,
    MapOperator,
    OperatorContext,
    Output,
    RestoredState,
    StreamOperator,
)
from runtime.sinks import Sink, SinkOperator
from runtime.state import OperatorSnapshot


class _Collect(Output):
    def __init__(self) -> None:
        self.records: list[Any] = []
        self.watermarks: list[int] = []

    def collect(self, records: list[Any]) -> None:
        self.records.extend(records)

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermarks.append(watermark.timestamp)


class OperatorHarness:
    def __init__(
        self,
        operator: StreamOperator,
        restore: list[OperatorSnapshot] | None = None,
        subtask: int = 0,
        parallelism: int = 1,
        max_parallelism: int = 128,
        attempt_id: str = "harness",
    ) -> None:
        self.operator = operator
        self._out = _Collect()
        self._taken = 0
        operator.setup(OperatorContext("harness", operator.name, subtask, parallelism, max_parallelism, attempt_id), self._out)
        restored = RestoredState() if restore is None else RestoredState.from_snapshots(restore, subtask, parallelism)
        operator.initialize_state(restored)
        operator.open()

    # Constructors for the common operators.
    @classmethod
    def map(cls, fn: Any, **kw: Any) -> "OperatorHarness":
        return cls(MapOperator("Map", "map", fn, as_callable(fn, "map", "map()")), **kw)

    @classmethod
    def reduce(cls, fn: Any, key_selector: Callable[[Any], Any], **kw: Any) -> "OperatorHarness":
        return cls(KeyedReduceOperator("Reduce", "reduce", fn, as_callable(fn, "reduce", "reduce()"), key_selector), **kw)

    @classmethod
    def keyed_process(cls, fn: Any, key_selector: Callable[[Any], Any], **kw: Any) -> "OperatorHarness":
        call = as_callable(fn, "process_element", "process()")
        return cls(KeyedProcessOperator("KeyedProcess", "keyed-process", fn, call, key_selector), **kw)

    @classmethod
    def sink(cls, sink: Sink, **kw: Any) -> "OperatorHarness":
        return cls(SinkOperator("Sink", "sink", sink), **kw)

    # Driving it.
    def process(self, *records: Any) -> list[Any]:
        """Feed records as one batch; return what the operator emitted for them."""
        self.operator.records_in += len(records)
        self.operator.process_batch(list(records))
        return self._new_output()

    def watermark(self, timestamp: int) -> list[Any]:
        self.operator.process_watermark(Watermark(timestamp))
        return self._new_output()

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return self.operator.snapshot_state(checkpoint_id)

    def notify_complete(self, checkpoint_id: int) -> None:
        self.operator.notify_checkpoint_complete(checkpoint_id)

    def finish(self) -> list[Any]:
        self.operator.end_input(0)
        self.operator.finish()
        return self._new_output()

    def close(self) -> None:
        self.operator.close()

    @property
    def output(self) -> list[Any]:
        """Everything emitted so far."""
        return list(self._out.records)

    @property
    def watermarks(self) -> list[int]:
        return list(self._out.watermarks)

    def _new_output(self) -> list[Any]:
        new = self._out.records[self._taken :]
        self._taken = len(self._out.records)
        return new

"""Test your own operators and tasks without a job, as Flink's test harnesses do.
:class:`TaskHarness` drives a whole task (alignment, finishing, the exit gate) by
hand.  An :class:`OperatorHarness` runs one operator subtask through the
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

from runtime.errors import CheckpointFailureReason
from runtime.events import CheckpointBarrier, Watermark, WatermarkStatus
from runtime.functions import as_callable
from runtime.network import decode, encode
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
from runtime.state import OperatorSnapshot, SnapshotSummary
from runtime.storage import StateHandle
from runtime.task import (
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    StreamTask,
    TaskDeployment,
    TaskResult,
    TriggerCheckpoint,
)


class _Collect(Output):
    def __init__(self) -> None:
        self.records: list[Any] = []
        self.timestamps: list[int | None] = []
        self.watermarks: list[int] = []
        self.statuses: list[bool] = []
        self.side_records: dict[str, list[Any]] = {}

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self.records.extend(records)
        self.timestamps.extend([None] * len(records) if timestamps is None else timestamps)

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermarks.append(watermark.timestamp)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self.statuses.append(status.idle)

    def collect_side(self, tag: str, records: list[Any], timestamps: list[int] | None = None) -> None:
        self.side_records.setdefault(tag, []).extend(records)


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
    def process(self, *records: Any, timestamps: list[int] | None = None) -> list[Any]:
        """Feed records as one batch (with event timestamps, if given); return what
        the operator emitted for them."""
        self.operator.records_in += len(records)
        self.operator.process_batch(list(records), timestamps)
        return self._new_output()

    def processing_time(self, now_ms: int) -> list[Any]:
        """Fire the processing-time timers due at ``now_ms``."""
        self.operator.on_processing_time(now_ms)
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

    def side_output(self, tag: str) -> list[Any]:
        """Everything emitted to side output ``tag`` so far."""
        return list(self._out.side_records.get(tag, []))

    @property
    def timestamps(self) -> list[int | None]:
        """The event timestamp of each record in :attr:`output`."""
        return list(self._out.timestamps)

    def _new_output(self) -> list[Any]:
        new = self._out.records[self._taken :]
        self._taken = len(self._out.records)
        return new


class _HarnessPorts:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int, list[Any]]] = []  # (output, channel, messages)
        self.acks: list[tuple[int, StateHandle, dict[str, SnapshotSummary]]] = []
        self.declines: list[tuple[int, CheckpointFailureReason, str]] = []
        self.ended_input = False
        self.operator_events: list[tuple[str, Any]] = []     # to coordinators: (operator uid, event)
        self.acknowledged_events: list[tuple[str, int]] = []  # from coordinators, handled
        self.backpressured_s = 0.0

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        self.sent.append((output, channel, decode(payload)))

    def drain_outputs(self) -> None:
        pass

    def acknowledge_checkpoint(self, checkpoint_id: int, handle: StateHandle, operators: dict[str, SnapshotSummary]) -> None:
        self.acks.append((checkpoint_id, handle, operators))

    def decline_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None:
        self.declines.append((checkpoint_id, reason, detail))

    def report_end_of_input(self) -> None:
        self.ended_input = True

    def send_operator_event(self, operator_uid: str, event: Any) -> None:
        self.operator_events.append((operator_uid, event))

    def acknowledge_operator_event(self, operator_uid: str, event_id: int) -> None:
        self.acknowledged_events.append((operator_uid, event_id))


class TaskHarness:
    """Drive one stream task by hand, on the calling thread, with no executor:
    deliver messages on its input channels, send it control letters, and let it
    handle what it has. It is the same :class:`StreamTask` the executors run::

        h = TaskHarness([("sink", lambda n, u: SinkOperator(n, u, FileSink(path)))], channels=1,
                        storage="file:///tmp/chk")
        h.deliver(0, [1, 2, 3])
        h.deliver(0, EndOfData(drain=True))
        h.deliver(0, h.barrier(42))
        h.notify_complete(42)
        assert h.result.state is TaskState.FINISHED
    """

    def __init__(
        self,
        operators: list[tuple[str, Callable[[str, str], StreamOperator]]],
        channels: int,
        storage: str,
        subtask: int = 0,
        parallelism: int = 1,
        exactly_once: bool = True,
    ) -> None:
        from runtime.config import CheckpointConfig, CheckpointingMode, TransportConfig
        from runtime.graph import JobEdge, JobVertex, OperatorSpec, PartitionSpec

        self.storage = storage
        specs = [OperatorSpec(name, name, make) for name, make in operators]
        vertex = JobVertex("task", " -> ".join(n for n, _ in operators), parallelism, 128, specs, False)
        vertex.inputs = [JobEdge(0, "upstream", "task", PartitionSpec("rebalance"), 0, parallelism, 128, specs[0].name)]
        # One output channel: what the task sends shows up in ``ports.sent``.
        vertex.outputs = [JobEdge(1, "task", "downstream", PartitionSpec("forward"), 0, 1, 128, "downstream")]
        mode = CheckpointingMode.EXACTLY_ONCE if exactly_once else CheckpointingMode.AT_LEAST_ONCE
        deployment = TaskDeployment(
            "harness", "harness", vertex, subtask, [(0, ch) for ch in range(channels)],
            CheckpointConfig(storage=storage, mode=mode), TransportConfig(mailbox_capacity=1 << 30),
        )
        self.ports = _HarnessPorts()
        self.task = StreamTask(deployment, self.ports)
        self._seq = [0] * channels
        self.result: TaskResult | None = None
        self.task.start()

    def barrier(self, checkpoint_id: int) -> CheckpointBarrier:
        return CheckpointBarrier(checkpoint_id, 0, location=f"{self.storage.rstrip('/')}/chk-{checkpoint_id}")

    def deliver(self, channel: int, *messages: Any) -> None:
        """Put one delivery on ``channel``: record lists and events, in order."""
        seq = self._seq[channel]
        self._seq[channel] += 1
        self.task.mailbox.put_data(channel, seq, encode(list(messages), "harness"))
        self._run()

    def trigger(self, checkpoint_id: int) -> None:
        self.task.put_letter(TriggerCheckpoint(self.barrier(checkpoint_id)))
        self._run()

    def notify_complete(self, checkpoint_id: int) -> None:
        self.task.put_letter(NotifyCheckpointComplete(checkpoint_id))
        self._run()

    def notify_aborted(self, checkpoint_id: int) -> None:
        self.task.put_letter(NotifyCheckpointAborted(checkpoint_id))
        self._run()

    def _run(self) -> None:
        if self.result is None:
            self.result = self.task.run_until_idle()
            self.task.wait_for_snapshots()

"""Test your own operators and tasks without a job, as Flink's test harnesses do,
and whole jobs in-process, as Bytewax's testing module does.
:class:`TaskHarness` drives a whole task (alignment, finishing, the exit gate) by
hand; a :class:`SimulatedJob` drives a whole job (its job master and every task)
from one seed. A :class:`TestingSource` feeds a job a list (with markers that
pause it or make it fail once), a :class:`TestingSink` collects what it commits
into a list the test holds, and a :class:`~weir.runtime.clock.ManualClock` moves
time by hand. An :class:`OperatorHarness` runs one operator subtask through the
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

import random
import threading
import uuid
import weakref
from typing import Any, Callable, TypeVar

import cloudpickle

from weir.runtime.checkpointing import TaskKey, task_name
from weir.runtime.clock import ManualClock
from weir.runtime.collect import CollectSink
from weir.runtime.config import RuntimeExecutionMode
from weir.runtime.deployment import Deployment, MasterPorts, OperatorRestore, TaskDeployment
from weir.runtime.errors import CheckpointFailureReason, InvalidJobGraphError, TaskFailedError, WeirError
from weir.runtime.events import CheckpointBarrier, Watermark, WatermarkStatus
from weir.runtime.executor import Committed
from weir.runtime.functions import as_callable
from weir.runtime.graph import JobEdge, JobGraph, JobVertex, OperatorSpec, PartitionSpec, topological
from weir.runtime.job_lifecycle import JobStatus
from weir.runtime.jobmaster import JobMaster
from weir.runtime.letters import (
    Cancel,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorEvent,
    TaskLetter,
    TaskReport,
    TriggerCheckpoint,
)
from weir.runtime.lifecycle import TaskResult, TaskState
from weir.runtime.mailbox import MailboxClosedError
from weir.runtime.master_options import MasterOptions
from weir.runtime.network import decode, encode
from weir.runtime.off_loop import inline
from weir.runtime.operators import (
    KeyedProcessOperator,
    KeyedReduceOperator,
    MapOperator,
    OperatorContext,
    Output,
    RestoredState,
    StreamOperator,
    TwoInputOperator,
)
from weir.runtime.sinks import Sink, SinkOperator
from weir.runtime.sources import IndexSplit, Poll, Source, SourceReader
from weir.runtime.state import OperatorSnapshot, SnapshotSummary
from weir.runtime.storage import StateHandle
from weir.runtime.task import StreamTask


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
        runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING,
        run_id: str = "run",
    ) -> None:
        """``runtime_mode``: the job's, STREAMING or BATCH (see :class:`RuntimeExecutionMode`);
        ``run_id``: the submission it runs for (see :class:`OperatorContext`)."""
        self.operator = operator
        self._out = _Collect()
        self._taken = 0
        ctx = OperatorContext(
            "harness",
            operator.name,
            subtask,
            parallelism,
            max_parallelism,
            attempt_id,
            runtime_mode=runtime_mode,
            run_id=run_id,
        )
        operator.setup(ctx, self._out)
        restored = (
            RestoredState()
            if restore is None
            else RestoredState.from_snapshots(restore, subtask, parallelism, max_parallelism)
        )
        operator.initialize_state(restored)
        operator.open()

    # Constructors for the common operators.
    @classmethod
    def map(cls, fn: Any, **kw: Any) -> "OperatorHarness":
        return cls(MapOperator("Map", "map", fn, as_callable(fn, "map", "map()")), **kw)

    @classmethod
    def reduce(cls, fn: Any, key_selector: Callable[[Any], Any], **kw: Any) -> "OperatorHarness":
        return cls(
            KeyedReduceOperator("Reduce", "reduce", fn, as_callable(fn, "reduce", "reduce()"), key_selector), **kw
        )

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

    def process2(self, *records: Any, timestamps: list[int] | None = None) -> list[Any]:
        """As :meth:`process`, into a two-input operator's second input."""
        assert isinstance(self.operator, TwoInputOperator), f"operator '{self.operator.name}' has one input"
        self.operator.records_in += len(records)
        self.operator.process_batch2(list(records), timestamps)
        return self._new_output()

    def processing_time(self, now_ms: int) -> list[Any]:
        """Fire the processing-time timers due at ``now_ms``."""
        self.operator.on_processing_time(now_ms)
        return self._new_output()

    def watermark(self, timestamp: int) -> list[Any]:
        self.operator.process_watermark(Watermark(timestamp))
        return self._new_output()

    def watermark_status(self, idle: bool) -> list[Any]:
        """The operator's input went idle (or active again)."""
        self.operator.process_watermark_status(WatermarkStatus(idle))
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

    @property
    def watermark_statuses(self) -> list[bool]:
        """Each idleness status the operator emitted: True idle, False active."""
        return list(self._out.statuses)

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
        self.alignments: list[tuple[int, int]] = []  # (checkpoint id, alignment ms) of each ack
        self.declines: list[tuple[int, CheckpointFailureReason, str]] = []
        self.ended_input = False
        self.operator_events: list[tuple[str, Any]] = []  # to coordinators: (operator uid, event)
        self.acknowledged_events: list[tuple[str, int]] = []  # from coordinators, handled
        self.backpressured_s = 0.0

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        self.sent.append((output, channel, decode(payload)))

    def drain_outputs(self) -> None:
        pass

    def acknowledge_checkpoint(
        self, checkpoint_id: int, handle: StateHandle, operators: dict[str, SnapshotSummary], alignment_ms: int
    ) -> None:
        self.acks.append((checkpoint_id, handle, operators))
        self.alignments.append((checkpoint_id, alignment_ms))

    def decline_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None:
        self.declines.append((checkpoint_id, reason, detail))

    def report_end_of_input(self) -> None:
        self.ended_input = True

    def send_operator_event(self, operator_uid: str, event: Any) -> None:
        self.operator_events.append((operator_uid, event))

    def acknowledge_operator_event(self, operator_uid: str, event_id: int) -> None:
        self.acknowledged_events.append((operator_uid, event_id))


def _harness_vertex(
    operators: list[tuple[str, Callable[[str, str], StreamOperator]]], parallelism: int, two_inputs: bool
) -> JobVertex:
    """The harnessed task's vertex: the chain, fed by one input edge (two for a
    two-input head), and one output channel, so what it sends shows up in ``ports.sent``."""
    specs = [OperatorSpec(name, name, make) for name, make in operators]
    vertex = JobVertex("task", " -> ".join(n for n, _ in operators), parallelism, 128, specs, False)
    vertex.inputs = [JobEdge(0, "upstream", "task", PartitionSpec("rebalance"), 0, parallelism, 128, specs[0].name)]
    if two_inputs:
        vertex.inputs.append(
            JobEdge(2, "upstream-2", "task", PartitionSpec("rebalance"), 1, parallelism, 128, specs[0].name)
        )
    vertex.outputs = [JobEdge(1, "task", "downstream", PartitionSpec("forward"), 0, 1, 128, "downstream")]
    return vertex


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
        second_input_channels: int = 0,
        restore: dict[str, OperatorRestore] | None = None,
    ) -> None:
        """``channels`` input channels, and for a two-input operator
        ``second_input_channels`` more (numbered after them) of its second input;
        ``restore``: where each operator's state comes from (by operator name,
        which is also its uid here), as a job master's restore plan says."""
        from weir.runtime.config import CheckpointConfig, CheckpointingMode, TransportConfig

        self.storage = storage
        vertex = _harness_vertex(operators, parallelism, bool(second_input_channels))
        mode = CheckpointingMode.EXACTLY_ONCE if exactly_once else CheckpointingMode.AT_LEAST_ONCE
        deployment = TaskDeployment(
            "harness",
            "harness",
            vertex,
            subtask,
            [(0, ch) for ch in range(channels)] + [(2, ch) for ch in range(second_input_channels)],
            CheckpointConfig(storage=storage, mode=mode),
            TransportConfig(mailbox_capacity=1 << 30),
            dict(restore or {}),
        )
        self.ports = _HarnessPorts()
        self.task = StreamTask(deployment, self.ports)
        self._seq = [0] * (channels + second_input_channels)
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

    def processing_time(self, now_ms: int) -> None:
        """The wall clock reads ``now_ms``: fire the processing-time timers due."""
        if self.result is None:
            self.result = self.task.fire_processing_timers(now_ms)

    def cancel(self) -> None:
        self.task.put_letter(Cancel())
        self._run()

    @property
    def records_sent(self) -> list[Any]:
        """Every record the task sent downstream, in order."""
        return [r for _, _, messages in self.ports.sent for m in messages if type(m) is list for r in m]

    def notify_aborted(self, checkpoint_id: int) -> None:
        self.task.put_letter(NotifyCheckpointAborted(checkpoint_id))
        self._run()

    def _run(self) -> None:
        if self.result is None:
            self.result = self.task.run_until_idle()
            self.task.wait_for_snapshots()


# ---------------------------------------------------------------- a simulated job
class SimulatedNetwork:
    """Messages in flight, delivered one at a time in an order the seed picks:
    the deliveries of one channel in the order they were sent (one connection),
    everything else in any order (Ray calls from several threads may overtake)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        # (kind, target, channel lane or None, deliver)
        self.in_flight: list[tuple[str, Any, Any, Callable[[], None]]] = []

    def post(self, kind: str, target: Any, deliver: Callable[[], None], lane: Any = None) -> None:
        self.in_flight.append((kind, target, lane, deliver))

    def deliver_one(self) -> None:
        heads: dict[Any, int] = {}
        for n, (_, _, lane, _) in enumerate(self.in_flight):
            heads.setdefault(lane if lane is not None else ("any", n), n)
        _, _, _, deliver = self.in_flight.pop(self.rng.choice(sorted(heads.values())))
        deliver()

    def lose(self, n: int) -> tuple[str, Any]:
        """Drop message ``n`` (an operator event lost with its connection)."""
        kind, target, _, _ = self.in_flight.pop(n)
        return kind, target


class _SimPorts(MasterPorts):
    """A task's reports and deliveries, through the simulated network."""

    def __init__(self, sim: "SimulatedJob", d: Deployment) -> None:
        super().__init__(d)
        self._sim, self._d = sim, d
        self.backpressured_s = 0.0

    def post(self, letter: TaskReport) -> None:
        self._sim.net.post("to-master", None, lambda: self._sim.master.mailbox.put_control(letter))

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        target, target_channel = self._d.routes[output][channel]
        if self._sim.attempts.get(target) != self._d.attempt:
            raise MailboxClosedError(f"task {task_name(target)} is gone")  # a broken connection: the sender fails over

        def deliver() -> None:
            task = self._sim.tasks.get(target)
            if task is None or self._sim.attempts.get(target) != self._d.attempt:
                return  # the receiver's attempt is gone: it refuses the connection
            task.mailbox.put_data(target_channel, seq, payload)
            self._sim.after(target, task.run_until_idle())

        self._sim.net.post("data", target, deliver, lane=(self._d.key, output, channel, self._d.attempt))

    def drain_outputs(self) -> None:
        pass


class SimulatedJob:
    """A real :class:`JobMaster` and real :class:`StreamTask` s, driven by hand on
    the calling thread from one seed, so that a race found once replays by seed::

        sim = SimulatedJob(env.get_job_graph("race"), seed=7)
        assert sim.run() is JobStatus.FINISHED

    It is the job master's gateway. Each step the seed picks one of: deliver a
    message in flight (any control letter or report, the next delivery of a
    channel), poll a source task, advance the clock and let the job master handle
    its letters, or (up to ``max_failures`` times) kill a task or lose an operator
    event on its way. Storage work runs inline; tasks hold no thread. Records may
    cross channels from a source's task (a poll flushes its buffers); a task that
    is not a source must end in its chained sink."""

    def __init__(
        self, graph: JobGraph, seed: int, event_valve: bool = True, max_failures: int = 3, failure_rate: float = 0.015
    ) -> None:
        self.rng = random.Random(seed)
        self.net = SimulatedNetwork(self.rng)
        self.now = 0.0
        graph.execution.transport.mailbox_capacity = 1 << 30  # a delivery never blocks the one thread
        self.master = JobMaster(
            graph,
            self,
            MasterOptions(
                clock=lambda: self.now,
                event_valve=event_valve,
                storage_io=inline,
                coordinator_io=inline,
                restart_jitter=random.Random(seed),
            ),
        )
        self.max_failures, self.failure_rate = max_failures, failure_rate
        self.tasks: dict[TaskKey, StreamTask] = {}
        self.attempts: dict[TaskKey, int] = {}
        self.exits: list[tuple[TaskKey, TaskResult]] = []
        self.failures = 0
        self.region_restarts = 0

    # ------------------------------------------------------------ TaskGateway
    def deploy(self, deployments: list[Deployment]) -> None:
        self.region_restarts += len(deployments) < len(self.master.graph.task_names())
        for d in deployments:  # each its own copy of the user functions, as on a task actor
            self.tasks[d.key] = StreamTask(cloudpickle.loads(cloudpickle.dumps(d.task)), _SimPorts(self, d))
            self.attempts[d.key] = d.attempt
        for d in deployments:
            self.tasks[d.key].start()

    def send(self, task: TaskKey, letter: TaskLetter) -> None:
        attempt = self.attempts.get(task)

        def deliver() -> None:
            t = self.tasks.get(task)
            if t is None or attempt != self.attempts.get(task):
                return  # the task is gone; its exit was reported
            try:
                t.put_letter(letter)
            except MailboxClosedError:
                return
            self.after(task, t.run_until_idle())

        self.net.post("event" if isinstance(letter, OperatorEvent) else type(letter).__name__, task, deliver)

    def kill(self, tasks: frozenset[TaskKey]) -> None:
        self.tasks = {k: t for k, t in self.tasks.items() if k not in tasks}
        self.attempts = {k: a for k, a in self.attempts.items() if k not in tasks}
        self.exits = [e for e in self.exits if e[0] not in tasks]

    def kill_all(self) -> None:
        self.kill(frozenset(self.attempts))

    def stop_deploying(self) -> None:
        pass

    def reserve(self, graph: JobGraph) -> bool:
        return True  # tasks run in this process: nothing to start

    def poll_exits(self) -> list[tuple[TaskKey, TaskResult]]:
        out, self.exits = self.exits, []
        return out

    def on_exit(self, wake: Callable[[], None]) -> None:
        pass  # the test drives the job master: it polls at each step

    def metrics(self) -> list[dict[str, Any]]:
        return []

    # ------------------------------------------------------------ driving
    def after(self, key: TaskKey, result: TaskResult | None) -> None:
        """What a task did when it last ran: its snapshots are written (the one
        thread waits for them), or it ended."""
        if result is None:
            task = self.tasks.get(key)
            if task is not None:
                task.wait_for_snapshots()
            return
        self.tasks.pop(key, None)
        self.exits.append((key, result))

    def fail(self, key: TaskKey, why: str) -> None:
        self.tasks.pop(key, None)
        self.exits.append((key, TaskResult(TaskState.FAILED, TaskFailedError(task_name(key), why))))
        self.failures += 1

    def step(self) -> None:
        r = self.rng.random()
        sources = sorted(k for k in self.tasks if self.master.graph.vertices[k[0]].is_source)
        if r < 0.5 and self.net.in_flight:
            self.net.deliver_one()
        elif r < 0.75 and sources:
            key = self.rng.choice(sources)
            self.after(key, self.tasks[key].poll_source())
        elif r < 1 - self.failure_rate or self.failures >= self.max_failures or not self.tasks:
            self.now += self.rng.uniform(0.0, 0.03)
            self.master.run_until_idle()
        else:
            events = [
                n
                for n, (kind, target, _, _) in enumerate(self.net.in_flight)
                if kind == "event" and target in self.tasks
            ]
            if events and self.rng.random() < 0.5:
                _, key = self.net.lose(self.rng.choice(events))
                self.fail(key, "an operator event to it was lost")
            else:
                self.fail(self.rng.choice(sorted(self.tasks)), "killed")

    def run(self, max_steps: int = 200_000) -> JobStatus:
        """Start the job and step until it ends (or ``max_steps``); its status."""
        self.master.start()
        for _ in range(max_steps):
            if self.master.status.is_terminal:
                break
            self.step()
        return self.master.status


# ---------------------------------------------------------------- a job's input and output, in-process
T = TypeVar("T")

# The testing source and sink of this process, by id: a job's copies of them
# (the executor pickles what it deploys) are the test's own objects again.
_IN_PROCESS: "weakref.WeakValueDictionary[str, _InProcess]" = weakref.WeakValueDictionary()


class _InProcess:
    """An object that a job's tasks share with the test that made it: pickled, it
    is its id, and unpickled in this process it is the same object again. Only
    the in-process executor runs a job with one (:func:`refuse_in_process_operators`)."""

    def __init__(self) -> None:
        self._id = uuid.uuid4().hex
        _IN_PROCESS[self._id] = self

    def __reduce__(self) -> tuple[Any, ...]:
        return _in_process, (type(self).__name__, self._id)


def _in_process(kind: str, object_id: str) -> "_InProcess":
    found = _IN_PROCESS.get(object_id)
    if found is None:
        raise WeirError(f"a {kind} lives in the process of the test that made it; run its job there: executor='local'")
    return found


def refuse_in_process_operators(graph: JobGraph) -> None:
    """For executors that run tasks in other processes (Ray's): raise
    :class:`InvalidJobGraphError` naming the operators of ``graph`` whose source
    or sink lives in this process (a :class:`TestingSource`, a :class:`TestingSink`)."""
    ends = [t for t in topological(graph.sinks) if t.is_source or t in graph.sinks]
    ops = [t.make_operator(t.name, t.effective_uid) for t in ends]
    names = [op.name for op in ops if isinstance(getattr(op, "source", None) or getattr(op, "sink", None), _InProcess)]
    if names:
        raise InvalidJobGraphError(
            f"job '{graph.name}': {', '.join(repr(n) for n in names)} keep their records in the process of the test "
            "that made them (weir.runtime.testing), where tasks in other processes cannot reach them: "
            "run the job in-process, with executor='local'"
        )


class TestingSource(_InProcess, Source[T]):
    """The items of a list, in order, read by one subtask, as a source of a job
    run in-process (Bytewax's ``TestingSource``). Its position is checkpointed:
    after a failover or from a savepoint it goes on from where the checkpoint
    was. Markers among the items emit nothing:

    - ``TestingSource.PAUSE()``: the source stops here until the test calls
      ``resume()``; ``reached`` is set when it got there, i.e. every item before
      it was emitted (checkpoints go on meanwhile);
    - ``TestingSource.ABORT()``: the source fails here the first time it gets
      here (a :class:`TestingSource.Aborted` error, failing over as any failure
      does), and reads past it after.

    Bounded: the job finishes after the last item::

        pause = TestingSource.PAUSE()
        env.from_source(TestingSource([1, 2, pause, 3]), source_name="numbers")
    """

    __test__ = False  # not a pytest test class

    class Aborted(WeirError):
        """What an ``ABORT`` marker raises."""

    class PAUSE:
        PAUSED_POLL_S = 0.005  # how often a paused source looks again (a letter wakes its task sooner)

        def __init__(self) -> None:
            self.reached = threading.Event()
            self._resumed = threading.Event()

        def resume(self) -> None:
            self._resumed.set()

    class ABORT:
        def __init__(self) -> None:
            self.triggered = False

    def __init__(self, items: list[Any]) -> None:
        super().__init__()
        self.items = list(items)

    def size_hint(self) -> int | None:
        return sum(not isinstance(i, _MARKERS) for i in self.items)

    def create_splits(self, parallelism: int) -> list[Any]:
        return [IndexSplit(0, 0, len(self.items))]

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        return _TestingReader(self.items)


class _TestingReader(SourceReader):
    def __init__(self, items: list[Any]) -> None:
        self._items = items
        self._split: IndexSplit | None = None

    def add_splits(self, splits: list[Any]) -> None:
        if splits:  # its one split (or none: a restore into another subtask)
            (self._split,) = splits

    def snapshot_splits(self) -> list[Any]:
        return [] if self._split is None else [self._split]

    def poll(self, max_records: int) -> Poll:
        s, items = self._split, self._items
        if s is None or s.next == len(items):
            return Poll([], end=True)
        i = s.next
        if isinstance(items[i], TestingSource.PAUSE):
            if not items[i]._resumed.is_set():
                items[i].reached.set()
                return Poll([], wait_s=items[i].PAUSED_POLL_S)
            i += 1
        elif isinstance(items[i], TestingSource.ABORT):
            if not items[i].triggered:
                items[i].triggered = True
                raise TestingSource.Aborted(f"the ABORT marker at item {i} of a TestingSource")
            i += 1
        records: list[Any] = []
        while i < len(items) and len(records) < max_records and not isinstance(items[i], _MARKERS):
            records.append(items[i])
            i += 1
        self._split = IndexSplit(s.split_id, i, s.end)
        return Poll(records, split_id=s.split_id)


_MARKERS = (TestingSource.PAUSE, TestingSource.ABORT)


class TestingSink(_InProcess, CollectSink):
    """Collects what a job run in-process commits into ``out``, a list the test
    holds (Bytewax's ``TestingSink``). Exactly once, as ``execute_and_collect``:
    a subtask's records go into ``out`` when the checkpoint that covers them
    completes, and never twice, whatever fails over; a bounded job's last ones
    at its final checkpoint. An unbounded job therefore needs periodic
    checkpoints to show anything. ``wait_for(n)`` waits until ``out`` holds
    ``n`` records. Any parallelism; each subtask's records in their order."""

    __test__ = False  # not a pytest test class

    def __init__(self, out: list[Any] | None = None) -> None:
        super().__init__()
        CollectSink.__init__(self, self)
        self.out: list[Any] = [] if out is None else out
        self._published: set[str] = set()
        self._changed = threading.Condition()

    def publish(self, committed: list[Committed]) -> None:
        with self._changed:
            for committed_id, records in committed:
                if committed_id not in self._published:  # else a restore committed it again
                    self._published.add(committed_id)
                    self.out.extend(records)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = 30) -> list[Any]:
        """Block until ``out`` holds at least ``count`` records; ``out``. Raises
        TimeoutError naming what it holds after ``timeout_s``."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.out) >= count, timeout_s):
                raise TimeoutError(f"TestingSink holds {len(self.out)} records, not {count}, after {timeout_s}s")
            return self.out


__all__ = [
    "ManualClock",
    "OperatorHarness",
    "SimulatedJob",
    "TaskHarness",
    "TestingSink",
    "TestingSource",
    "refuse_in_process_operators",
]

"""Deployment planning: what the job master deploys where, as plain data built by
plain functions, and the gateway that carries it out (Ray actors in
``weir.actors``, threads in :mod:`weir.runtime.local`).
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

from weir.runtime.checkpointing import TaskKey
from weir.runtime.config import CheckpointConfig, RuntimeExecutionMode, TransportConfig
from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.graph import JobGraph, JobVertex
from weir.runtime.letters import (
    Ack,
    Decline,
    Deployed,
    EndOfInput,
    EventAcknowledged,
    EventFromOperator,
    MasterLetter,
    TaskLetter,
    TaskReport,
)
from weir.runtime.lifecycle import TaskResult
from weir.runtime.off_loop import OffLoopThread, inline
from weir.runtime.state import SnapshotSummary
from weir.runtime.state_backend import HashMapStateBackend, StateBackend
from weir.runtime.storage import StateHandle

Route = tuple[TaskKey, int]  # (target task, channel index at the target)


@dataclass
class Deployment:
    """Everything a gateway needs to start one task."""

    key: TaskKey
    attempt: int
    task: TaskDeployment
    routes: list[list[Route]]  # output edge -> channel -> where it goes


@dataclass(frozen=True)
class OperatorRestore:
    """Where one operator's state comes from: the state files of every subtask
    of the vertex that held it in the restored checkpoint."""

    handles: list[StateHandle | None]  # None: that subtask had exited
    fully_finished: bool = False
    keyed_only: bool = False  # no list, union or broadcast state: a subtask reads only the files of its key groups
    checkpoint_id: int | None = None  # the checkpoint restored (None: a savepoint)


@dataclass
class TaskDeployment:
    job_name: str
    attempt_id: str
    vertex: JobVertex
    subtask: int
    input_channels: list[tuple[int, int]]  # channel -> (edge id, upstream subtask)
    checkpointing: CheckpointConfig
    transport: TransportConfig
    restore: dict[str, OperatorRestore] = field(default_factory=dict)  # operator uid -> where from
    runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING  # the job's, resolved
    run_id: str = ""  # the submission's id (JobGraph.run_id)
    state_backend: StateBackend = field(default_factory=HashMapStateBackend)  # where its keyed state lives

    @property
    def name(self) -> str:
        return f"{self.vertex.id}/{self.subtask}"


class TaskGateway(Protocol):
    def deploy(self, deployments: list[Deployment]) -> None:
        """Start these tasks: every task of the job, or a failed-over region's
        (their previous attempt is gone; the other tasks keep running)."""

    def send(self, task: TaskKey, letter: TaskLetter) -> None:
        """Hand a letter to a task of the current attempt (late ones for a task that
        is gone are dropped). An :class:`OperatorEvent` that cannot be delivered is
        reported as that task's failure by ``poll_exits``; the task acknowledges
        one it handled."""

    def kill(self, tasks: frozenset[TaskKey]) -> None:
        """Stop these tasks at once, whatever state they are in; they report nothing more."""

    def kill_all(self) -> None:
        """Stop every task at once, whatever state it is in; none reports anything more."""

    def stop_deploying(self) -> None:
        """The job is cancelled (any thread): a ``deploy`` waiting for room on the
        cluster gives up at once, and so does every later one."""

    def reserve(self, graph: JobGraph) -> bool:
        """Have slots ready for every task of ``graph`` (a rescale will deploy it):
        start what the job's own slots do not cover and return at once; True
        once all are up. The job runs on meanwhile."""

    def poll_exits(self) -> list[tuple[TaskKey, TaskResult]]:
        """Tasks of the current attempt that ended since the last poll, and how."""

    def on_exit(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (from any thread) when a task ends: the job master then
        polls at once, so it need not poll often to see a job's end soon."""

    def metrics(self) -> list[dict[str, Any]]:
        """Per-task counters of the current attempt (see ``StreamTask.metrics``)."""


def plan_deployments(
    graph: JobGraph,
    attempt: int,
    attempt_id: str,
    restore: dict[str, OperatorRestore],
    region: frozenset[TaskKey] | None = None,
) -> list[Deployment]:
    """The deployments of ``attempt`` (its id ``attempt_id`` names the job's
    channels): every task of ``graph``, or only a failed-over ``region``'s, each
    restoring its operators' share of ``restore`` (operator uid -> state, see
    :func:`weir.runtime.restore.restore_plan`)."""
    deployments = [
        Deployment((v.id, i), attempt, _task(graph, v, i, attempt_id, restore), [])
        for v in graph.vertices.values()
        for i in range(v.parallelism)
        if region is None or (v.id, i) in region
    ]
    # A region is closed under channels: every target of its tasks is deployed with them.
    channels = {d.key: d.task.input_channels for d in deployments}
    for d in deployments:
        for e in d.task.vertex.outputs:
            target = graph.vertices[e.target]
            subtasks = [d.key[1]] if e.pointwise else list(range(target.parallelism))
            d.routes.append([((target.id, j), channels[(target.id, j)].index((e.edge_id, d.key[1]))) for j in subtasks])
    return deployments


def _task(
    graph: JobGraph, v: JobVertex, i: int, attempt_id: str, restore: dict[str, OperatorRestore]
) -> TaskDeployment:
    return TaskDeployment(
        job_name=graph.name,
        attempt_id=attempt_id,
        vertex=v,
        subtask=i,
        input_channels=[(e.edge_id, j) for e, j in graph.input_channels((v.id, i))],
        checkpointing=graph.checkpointing,
        transport=graph.execution.transport,
        restore={op.uid: restore[op.uid] for op in v.operators if op.uid in restore},
        runtime_mode=graph.runtime_mode,
        run_id=graph.run_id,
        state_backend=graph.execution.state_backend or HashMapStateBackend(),
    )


class MasterPorts:
    """The half of a task's ports that reports to the job master: each report is
    a letter, and an executor only says how a letter gets there (``post``)."""

    def __init__(self, deployment: Deployment) -> None:
        self._attempt, self._key = deployment.attempt, deployment.key

    def post(self, letter: TaskReport) -> None:
        raise NotImplementedError

    def acknowledge_checkpoint(
        self, checkpoint_id: int, handle: StateHandle, operators: dict[str, SnapshotSummary], alignment_ms: int
    ) -> None:
        self.post(Ack(self._attempt, self._key, checkpoint_id, handle, operators, alignment_ms))

    def decline_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str) -> None:
        self.post(Decline(self._attempt, self._key, checkpoint_id, reason, detail))

    def report_end_of_input(self) -> None:
        self.post(EndOfInput(self._attempt, self._key))

    def send_operator_event(self, operator_uid: str, event: Any) -> None:
        self.post(EventFromOperator(self._attempt, self._key, operator_uid, event))

    def acknowledge_operator_event(self, operator_uid: str, event_id: int) -> None:
        self.post(EventAcknowledged(self._attempt, self._key, operator_uid, event_id))


class DeployedTasks:
    """The tasks of the job's current deployment as the job master knows them: the
    attempt each one's letters must carry (a letter of an earlier attempt is
    stale), which have exited, which ended their input, and which were killed
    while this tick's exits are handled (their exits, polled already, are dropped)."""

    def __init__(self, gateway: TaskGateway, io: Callable[[Callable[[], None]], None] = inline) -> None:
        self._gateway, self._io = gateway, io
        self.in_flight = False  # a deploy runs (off the loop): the gateway is not to be touched
        self.attempts: dict[TaskKey, int] = {}
        self.exited: set[TaskKey] = set()
        self.ended_input: set[TaskKey] = set()
        self.killed: set[TaskKey] = set()

    def deploy(
        self,
        graph: JobGraph,
        attempt: int,
        restore: dict[str, OperatorRestore],
        region: frozenset[TaskKey] | None,
        post: Callable[[MasterLetter], None],
    ) -> None:
        """Deploy ``attempt``: every task of ``graph`` (``region`` None) or a
        failed-over region's, each restoring its share of ``restore``; their letters
        count from now on. The gateway deploys on ``io``, then ``post``s a
        :class:`Deployed` letter to the job master."""
        deployments = plan_deployments(graph, attempt, uuid.uuid4().hex[:12], restore, region)
        if region is None:  # after a rescale, removed subtasks' late letters must not count
            self.attempts.clear()
            self.exited.clear()
            self.ended_input.clear()
        self.attempts.update({d.key: d.attempt for d in deployments})
        self.in_flight = True
        self._io(functools.partial(_deploy, self._gateway, deployments, Deployed(attempt, region, None), post))

    def deploy_done(self) -> None:
        """The deploy's :class:`Deployed` letter came: the gateway may be touched again."""
        self.in_flight = False

    def exits(self, polled: Iterable[tuple[TaskKey, TaskResult]]) -> Iterator[tuple[TaskKey, TaskResult]]:
        """The exits the gateway ``polled``, but those of tasks killed while the
        earlier ones were handled (an exit may fail the job, or a region, over:
        the tasks that kills report nothing more, as the gateway promises)."""
        self.killed = set()
        for key, result in polled:
            if key not in self.killed:
                yield key, result

    def exited_task(self, task: TaskKey) -> None:
        self.exited.add(task)

    def never_deployed(self, regions: Iterable[frozenset[TaskKey]]) -> None:
        """Failed-over ``regions`` that were not redeployed when the job was cancelled count as exited."""
        self.exited.update(*regions)

    def input_ended(self, task: TaskKey) -> None:
        self.ended_input.add(task)

    def close(self) -> None:
        """The job has ended: a deploy still running gives up, and its thread ends."""
        if self.in_flight:
            self._gateway.stop_deploying()
        if isinstance(self._io, OffLoopThread):
            self._io.close()

    def is_current(self, task: TaskKey, attempt: int) -> bool:
        return self.attempts.get(task) == attempt

    def send(self, task: TaskKey, letter: TaskLetter) -> None:
        self._gateway.send(task, letter)

    def reserve(self, graph: JobGraph) -> bool:
        """Slots for every task of ``graph`` (a rescale will deploy it); True once all are up."""
        return self._gateway.reserve(graph)

    def all_exited(self, graph: JobGraph) -> bool:
        return len(self.exited) == len(graph.task_names())

    def sources_ended(self, graph: JobGraph) -> bool:
        sources = [(v.id, i) for v in graph.sources for i in range(v.parallelism)]
        return all(k in self.ended_input or k in self.exited for k in sources)

    def kill(self, tasks: frozenset[TaskKey] | None = None) -> None:
        """Kill these tasks (None: all) at once."""
        if tasks is None:
            self._gateway.kill_all()
            self.killed |= set(self.attempts)
        else:
            self._gateway.kill(tasks)
            self.killed |= tasks

    def restart(self, region: frozenset[TaskKey]) -> None:
        """Kill a failed-over region, to be redeployed later; the others run on."""
        self.kill(region)
        self.exited -= region
        self.ended_input -= region


def _deploy(
    gateway: TaskGateway, deployments: list[Deployment], deployed: Deployed, post: Callable[[MasterLetter], None]
) -> None:
    try:
        gateway.deploy(deployments)
    except Exception as exc:
        deployed = dataclasses.replace(deployed, error=exc)
    post(deployed)

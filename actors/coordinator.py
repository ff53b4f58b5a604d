"""The job coordinator actor: one per job, a named singleton in the ``weir``
namespace. It hosts the :class:`runtime.jobmaster.JobMaster` on a loop thread and
reaches the task actors through :class:`RayGateway`. Remote methods only put
letters into the job master's mailbox or read its state.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray

from actors.cluster import NAMESPACE, actor_runtime_env, task_actor_name
from actors.task_actor import RemoteTaskActor
from runtime.checkpointing import TaskKey
from runtime.errors import InvalidJobGraphError, TaskFailedError
from runtime.events import CheckpointBarrier
from runtime.config import ExecutionConfig
from runtime.graph import JobGraph, JobVertex
from runtime.jobmaster import AskLetter, Deployment, JobMaster, RescaleJob, Request, StopJob, TriggerSavepoint
from runtime.task import Cancel, NotifyCheckpointAborted, NotifyCheckpointComplete, OperatorEvent, TaskResult, TaskState, TriggerCheckpoint

log = logging.getLogger("weir.coordinator")

# Calls a task actor may have running at once: the loop (run), letters and
# metrics, plus every delivery that may wait on a full mailbox (credits per channel).
_BASE_CONCURRENCY = 8


def actor_resources(vertex: JobVertex, execution: ExecutionConfig) -> dict[str, Any]:
    """Ray actor options for a vertex's task actors."""
    asks = dict(vertex.resources)
    options: dict[str, Any] = {
        "num_cpus": asks.pop("num_cpus", execution.task_cpus),
        "scheduling_strategy": "SPREAD" if execution.placement == "spread" else "DEFAULT",
    }
    if "num_gpus" in asks:
        options["num_gpus"] = asks.pop("num_gpus")
    if "memory" in asks:
        options["memory"] = int(asks.pop("memory"))
    if asks:
        options["resources"] = asks
    return options


def check_feasible(graph: JobGraph) -> None:
    """Refuse a job with a task no node of the cluster could ever host."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    names = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
    for v in graph.vertices.values():
        options = actor_resources(v, graph.execution)
        asks = {"CPU": options["num_cpus"], "GPU": options.get("num_gpus", 0), "memory": options.get("memory", 0), **options.get("resources", {})}
        asks = {k: a for k, a in asks.items() if a}
        if not any(all(node.get(k, 0) >= a for k, a in asks.items()) for node in nodes):
            offered = "; ".join(", ".join(f"{k}={n[k]:g}" for k in sorted(n) if not k.startswith("node:")) for n in nodes)
            pretty = ", ".join(f"{next((u for u, r in names.items() if r == k), k)}={a:g}" for k, a in asks.items())
            who = "', '".join(v.resource_owners) or v.name
            raise InvalidJobGraphError(
                f"operator '{who}' asks for {pretty} per task (in '{v.name}'), which no node of this Ray cluster has "
                f"(nodes offer: {offered or 'nothing'})"
            )


class RayGateway:
    def __init__(self, graph: JobGraph, coordinator: Any) -> None:
        self._graph = graph
        self._coordinator = coordinator
        self.actors: dict[TaskKey, Any] = {}
        self._runs: dict[Any, TaskKey] = {}
        self._events: dict[Any, TaskKey] = {}  # operator events on their way

    def deploy(self, deployments: list[Deployment]) -> None:
        # The actor dict is replaced, never changed in place: client calls read it
        # from other threads. Routes stay within the deployed tasks (a region).
        g = self._graph
        actors = {}
        for d in deployments:
            channels = len(d.task.input_channels)
            actors[d.key] = self._create(
                task_actor_name(g.name, *d.key),
                max_concurrency=_BASE_CONCURRENCY + channels * d.task.transport.credits,
                **actor_resources(d.task.vertex, g.execution),
            )
        self.actors = {**self.actors, **actors}
        ray.get([
            actors[d.key].setup.remote(d, [[(actors[t], ch) for t, ch in out] for out in d.routes], self._coordinator)
            for d in deployments
        ])
        self._runs.update({actors[d.key].run.remote(): d.key for d in deployments})

    @staticmethod
    def _create(name: str, **options: Any) -> Any:
        # The name of an actor just killed is freed asynchronously: retry briefly.
        deadline = time.monotonic() + 30
        while True:
            try:
                return RemoteTaskActor.options(name=name, namespace=NAMESPACE, runtime_env=actor_runtime_env(), **options).remote()
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _letter(self, key: TaskKey, letter: Any) -> None:
        actor = self.actors.get(key)
        if actor is not None:
            actor.letter.remote(letter)

    def trigger_checkpoint(self, task: TaskKey, barrier: CheckpointBarrier, stop_drain: bool | None = None) -> None:
        self._letter(task, TriggerCheckpoint(barrier, stop_drain))

    def notify_checkpoint_complete(self, task: TaskKey, checkpoint_id: int) -> None:
        self._letter(task, NotifyCheckpointComplete(checkpoint_id))

    def notify_checkpoint_aborted(self, task: TaskKey, checkpoint_id: int) -> None:
        self._letter(task, NotifyCheckpointAborted(checkpoint_id))

    def cancel(self, task: TaskKey) -> None:
        self._letter(task, Cancel())

    def send_operator_event(self, task: TaskKey, operator_uid: str, event_id: int, event: Any) -> None:
        actor = self.actors.get(task)
        if actor is not None:
            self._events[actor.letter.remote(OperatorEvent(operator_uid, event_id, event))] = task

    def kill(self, tasks: frozenset[TaskKey]) -> None:
        victims = [a for k, a in self.actors.items() if k in tasks]
        self.actors = {k: a for k, a in self.actors.items() if k not in tasks}
        self._runs = {ref: k for ref, k in self._runs.items() if k not in tasks}
        self._events = {ref: k for ref, k in self._events.items() if k not in tasks}
        for actor in victims:
            ray.kill(actor, no_restart=True)

    def kill_all(self) -> None:
        self.kill(frozenset(self.actors))

    def poll_exits(self) -> list[tuple[TaskKey, TaskResult]]:
        out = self._lost_events()
        if not self._runs:
            return out
        ready, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=0)
        for ref in ready:
            key = self._runs.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                detail = "the actor was killed or crashed" if isinstance(exc, ray.exceptions.RayActorError) else str(exc)
                name = task_actor_name(self._graph.name, *key)
                result = TaskResult(TaskState.FAILED, TaskFailedError(name, detail), detail)
            out.append((key, result))
        return out

    def _lost_events(self) -> list[tuple[TaskKey, TaskResult]]:
        """An operator event that could not be delivered fails its task over."""
        if not self._events:
            return []
        ready, _ = ray.wait(list(self._events), num_returns=len(self._events), timeout=0)
        out = []
        for ref in ready:
            key = self._events.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayError as exc:
                name = task_actor_name(self._graph.name, *key)
                out.append((key, TaskResult(TaskState.FAILED, TaskFailedError(name, f"an operator event to it was lost ({type(exc).__name__})"))))
        return out

    def metrics(self) -> list[dict[str, Any]]:
        refs = [a.metrics.remote() for a in self.actors.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5)
        out = []
        for ref in ready:
            try:
                m = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # a dead task has no counters to give
            if m:  # empty before its setup
                out.append(m)
        return out


class JobCoordinator:
    def __init__(self, graph: JobGraph, linger_s: float) -> None:
        self.graph = graph
        context = ray.get_runtime_context()
        self.gateway = RayGateway(graph, context.current_actor)
        # Restarted by Ray after a crash: the task actors died with us; recover
        # the job from the latest completed checkpoint in storage.
        self.master = JobMaster(graph, self.gateway, recovering=context.was_current_actor_reconstructed)
        self._linger_s = linger_s
        threading.Thread(target=self._run, name="jobmaster", daemon=True).start()

    def _run(self) -> None:
        self.master.run()
        # Stay a while so that `weir status` and clients can read the outcome, then
        # leave for good (no_restart: Ray must not bring back an ended job).
        time.sleep(self._linger_s)
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # Letters from tasks (acks, declines, end of input, operator events).
    def post(self, letter: Any) -> None:
        self.master.mailbox.put_control(letter)

    # Calls from clients.
    def cancel(self) -> None:
        self.master.cancel()

    def savepoint(self, path: str | None, timeout_s: float) -> tuple[str, Any]:
        return self._ask(TriggerSavepoint(path, Request()), timeout_s)

    def stop(self, path: str | None, drain: bool, timeout_s: float) -> tuple[str, Any]:
        return self._ask(StopJob(path, drain, Request()), timeout_s)

    def rescale(self, parallelism: dict[str, int], timeout_s: float) -> tuple[str, Any]:
        return self._ask(RescaleJob(parallelism, Request()), timeout_s)

    def _ask(self, letter: AskLetter, timeout_s: float) -> tuple[str, Any]:
        try:
            return "ok", self.master.ask(letter, timeout_s)
        except Exception as exc:
            return "error", exc

    def status(self) -> str:
        return self.master.status.value

    def wait(self, timeout_s: float) -> bool:
        return self.master.wait(timeout_s)

    def result(self) -> tuple[str, Any]:
        try:
            return "ok", self.master.result()
        except Exception as exc:
            return "error", exc

    def info(self) -> dict[str, Any]:
        m = self.master
        return {
            "job": self.graph.name,
            "status": m.status.value,
            "restarts": m.restarts,
            "attempt": m.attempt,
            "coordinator_recovered": m.recovering,  # Ray restarted this coordinator; it recovered the job from storage
            "restarting_tasks": m.restarting_tasks(),  # failed-over regions on their way back
            "duration_s": round((m.ended or m.clock()) - m.started, 3),
            "parallelism": {v.id: v.parallelism for v in m.graph.vertices.values()},
            "completed_checkpoints": sum(1 for s in m.coordinator.history.values() if s.status == "COMPLETED"),
        }

    def checkpoints(self) -> list[dict[str, Any]]:
        return self.master.checkpoint_stats()

    def tasks(self) -> list[str]:
        return [task_actor_name(self.graph.name, *k) for k in list(self.gateway.actors)]

    def metrics(self) -> list[dict[str, Any]]:
        if self.master.status.is_terminal:
            return self.master.final_metrics
        return self.gateway.metrics()


RemoteJobCoordinator = ray.remote(JobCoordinator)

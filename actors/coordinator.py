"""The job coordinator actor: taken from the pool (:mod:`weir.actors.pool`), it hosts a
job's :class:`weir.runtime.jobmaster.JobMaster` on a loop thread and reaches the task
actors through :class:`RayGateway`. Remote methods only put letters into the job
master's mailbox or read its state.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import ray
from ray import cloudpickle  # keeps each function's file name: a user's traceback shows its source lines

from weir.actors.cluster import task_actor_name
from weir.actors.exchange import Endpoint, Route
from weir.actors.ledger import Application, JobAssignment, Shape
from weir.actors.metrics import JobMetrics, report_every_second
from weir.actors.slots import CANCEL_GRACE_S, JobScope, actor_id, find_pool
from weir.runtime.checkpointing import CheckpointStatus, TaskKey, task_name
from weir.runtime.config import ExecutionConfig
from weir.runtime.deployment import Deployment
from weir.runtime.errors import (
    InvalidJobGraphError,
    JobCancelledError,
    JobForgottenError,
    JobLoadError,
    NoResourceAvailableError,
    SlotBusyError,
    TaskFailedError,
)
from weir.runtime.graph import JobGraph, JobVertex
from weir.runtime.jobmaster import JobMaster
from weir.runtime.letters import (
    AskLetter,
    Cancel,
    OperatorEvent,
    Request,
    RescaleJob,
    StopJob,
    TaskLetter,
    TriggerSavepoint,
)
from weir.runtime.lifecycle import TaskResult, TaskState
from weir.runtime.master_options import MasterOptions
from weir.runtime.off_loop import OffLoopThread

log = logging.getLogger("weir.coordinator")

# Calls a task actor may have running at once: its task's loop (run), letters,
# metrics and pings. Deliveries do not come through Ray (see weir.actors.exchange).
SLOT_CONCURRENCY = 16


def actor_resources(resources: dict[str, Any], execution: ExecutionConfig) -> dict[str, Any]:
    """Ray actor options for the task actors of a vertex that asks for ``resources``."""
    asks = dict(resources)
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


def slot_shape(resources: dict[str, Any], execution: ExecutionConfig, runtime_env: dict[str, Any]) -> Shape:
    """The slot a task of a vertex that asks for ``resources`` runs on: its Ray
    options and runtime env (``{}`` and ``ExecutionConfig()``: the slot of a task
    that asks for nothing of its own, which the pool starts ahead of a first job)."""
    return Shape({**actor_resources(resources, execution), "max_concurrency": SLOT_CONCURRENCY}, runtime_env)


def slots_wanted(graph: JobGraph, runtime_env: dict[str, Any]) -> list[tuple[Shape, int]]:
    """How many slots of each shape the job's tasks take."""
    wanted: dict[str, tuple[Shape, int]] = {}
    for v in graph.vertices.values():
        shape = slot_shape(v.resources, graph.execution, runtime_env)
        wanted[shape.key] = (shape, wanted.get(shape.key, (shape, 0))[1] + v.parallelism)
    return list(wanted.values())


_RAY_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def _asks(vertex: JobVertex, execution: ExecutionConfig) -> dict[str, float]:
    """What each task of a vertex asks for, in weir's words (num_cpus, num_gpus,
    memory, custom resources)."""
    options = actor_resources(vertex.resources, execution)
    return {**{k: options[k] for k in _RAY_NAMES if options.get(k)}, **options.get("resources", {})}


def _pretty(amounts: dict[str, float]) -> str:
    return ", ".join(f"{k}={a:g}" for k, a in amounts.items())


def _owners(vertex: JobVertex) -> str:
    """Who in a vertex asks for its resources, as a user named them."""
    owners = "', '".join(vertex.resource_owners) or vertex.name
    return f"operator '{owners}' (in '{vertex.name}')"


def check_feasible(graph: JobGraph) -> None:
    """Refuse a job with a task no node of the cluster could ever host."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    for v in graph.vertices.values():
        asks = _asks(v, graph.execution)
        need = {_RAY_NAMES.get(k, k): a for k, a in asks.items()}
        if not any(all(node.get(k, 0) >= a for k, a in need.items()) for node in nodes):
            offered = "; ".join(_pretty({k: n[k] for k in sorted(n) if not k.startswith("node:")}) for n in nodes)
            raise InvalidJobGraphError(
                f"{_owners(v)} asks for {_pretty(asks)} per task, which no node of this Ray cluster has "
                f"(nodes offer: {offered or 'nothing'})"
            )


class _Unplaced(Exception):
    """Slots that had not answered when a deploy gave up waiting."""

    def __init__(self, keys: list[TaskKey]) -> None:
        self.keys = keys


def _answers(
    calls: dict[TaskKey, Any], until: float, stop: threading.Event
) -> tuple[dict[TaskKey, Any], list[TaskKey]]:
    """Wait for these calls (one per task's slot): the answers, and the tasks
    whose slot was dead. Raises :class:`_Unplaced` with the tasks still waiting
    once ``until`` (a monotonic time) has passed or ``stop`` is set: a slot that
    waits for room on the cluster may wait for ever."""
    waiting = {ref: key for key, ref in calls.items()}
    answers, dead = {}, []
    while waiting:
        left = until - time.monotonic()
        if left <= 0 or stop.is_set():
            raise _Unplaced(sorted(waiting.values()))
        ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=min(0.1, left))
        for ref in ready:
            key = waiting.pop(ref)
            try:
                answers[key] = ray.get(ref)
            except ray.exceptions.RayActorError:
                dead.append(key)
    return answers, dead


class RayGateway:
    """Runs a job's tasks on slots leased from the pool, and keeps the slots for
    the job's life: a task that ended leaves its slot to the job (``_spare``) for
    its next deployment (a restart, a rescale). Tasks stopped by a failover are
    cancelled, not killed, and their slots are reused once the cancelled task has
    returned: a failover needs new processes only for slots that died."""

    def __init__(
        self,
        graph: JobGraph,
        app: Application,
        coordinator: Any,
        pool: Any,
        runtime_env: dict[str, Any],
        env: dict[str, str],
    ) -> None:
        self._graph = graph
        self._app = app  # the application whose slots the job may use
        self._coordinator = coordinator
        self._pool = pool
        self._runtime_env = runtime_env
        self._env = env  # variables the job sets in its task processes
        self.actors: dict[TaskKey, Any] = {}
        self._attempts: dict[TaskKey, int] = {}
        self._runs: dict[Any, TaskKey] = {}
        # run() returned: the slot is free for this job; True: the task finished (not failed or cancelled)
        self._ended: dict[TaskKey, bool] = {}
        self._spare: dict[str, list[Any]] = {}  # shape key -> free slots of this job
        # shape key -> (slot, its run() call, when cancelled) of tasks a failover stopped
        self._cancelling: dict[str, list[tuple[Any, Any, float]]] = {}
        self._shapes: dict[TaskKey, Shape] = {}
        self._events: dict[Any, TaskKey] = {}  # operator events on their way
        self._endpoints: dict[str, Endpoint] = {}  # slot's actor id -> where it takes deliveries
        self._warming: dict[
            Any, tuple[str, Any]
        ] = {}  # endpoint() call -> (shape key, slot) of a reserved slot starting
        self._stopped = threading.Event()  # the job is cancelled: deploys give up
        self._wake: Callable[[], None] = lambda: None
        self._exited = threading.Event()  # a run() call ended since the last poll

    def reserve(self, graph: JobGraph) -> bool:
        """Slots for every task of ``graph`` (a rescale about to deploy it): lease
        what the job's deployed and spare slots of each shape do not cover, as
        spares of the job, and say whether they are all up."""
        for shape, count in slots_wanted(graph, self._runtime_env):
            key = shape.key
            have = (
                sum(self._shapes[k].key == key for k in self.actors)
                + len(self._spare.get(key, []))
                + len(self._cancelling.get(key, []))
                + sum(k == key for k, _ in self._warming.values())
            )
            if count > have:
                for actor in ray.get(self._pool.lease.remote(self._graph.name, self._app, shape, count - have)):
                    self._warming[actor.endpoint.remote()] = (key, actor)
        if self._warming:
            ready, _ = ray.wait(list(self._warming), num_returns=len(self._warming), timeout=0)
            for ref in ready:
                key, actor = self._warming.pop(ref)
                try:
                    self._endpoints[actor_id(actor)] = ray.get(ref)
                    self._spare.setdefault(key, []).append(actor)
                except ray.exceptions.RayActorError:
                    self._drop([actor])  # it died starting: the next call leases another
        return not self._warming

    def deploy(self, deployments: list[Deployment]) -> None:
        """Run these tasks on the job's free slots and on slots leased from the
        pool. A slot found dead at setup (it died idle: its node was lost, or a
        user killed it) is replaced and the setup repeated, a few times, before
        the deployment fails (and the restart strategy takes over). Slots waiting
        for room on the cluster are waited for up to the job's slot request
        timeout, or until the job is cancelled (:meth:`stop_deploying`)."""
        g = self._graph
        until = time.monotonic() + g.execution.slot_request_timeout_ms / 1000
        actors = self._slots_for(deployments)
        attempts = {d.key: d.attempt for d in deployments}
        try:
            for _try in range(3):
                asks = {key: a.endpoint.remote() for key, a in actors.items() if actor_id(a) not in self._endpoints}
                endpoints, dead = _answers(asks, until, self._stopped)
                self._endpoints.update({actor_id(actors[key]): e for key, e in endpoints.items()})
                if not dead:
                    routes = {
                        d.key: [
                            [Route(self._endpoints[actor_id(actors[t])], ch, attempts[t]) for t, ch in out]
                            for out in d.routes
                        ]
                        for d in deployments
                    }
                    setups = {
                        d.key: actors[d.key].setup.remote(d, routes[d.key], (self._coordinator, g.run_id), self._env)
                        for d in deployments
                    }
                    _, dead = _answers(setups, until, self._stopped)
                if not dead:
                    break
                ray.get(self._pool.forget_dead.remote([actors.pop(k) for k in dead]))
                actors.update(self._slots_for([d for d in deployments if d.key in dead]))
            else:
                raise TaskFailedError(
                    task_actor_name(g.name, *dead[0]), "its task actor died at every try to set it up"
                )
        except _Unplaced as unplaced:
            # Slots that started stay with the job; those still waiting for room go.
            for key, actor in actors.items():
                if actor_id(actor) in self._endpoints:
                    self._spare.setdefault(self._shapes[key].key, []).append(actor)
            self._drop([a for a in actors.values() if actor_id(a) not in self._endpoints])
            if self._stopped.is_set():
                raise JobCancelledError(f"job '{g.name}' was cancelled while its tasks were being deployed") from None
            raise self._no_resources(unplaced.keys) from None
        # The actor dict is replaced, never changed in place: client calls read it
        # from other threads. Routes stay within the deployed tasks (a region).
        self.actors = {**self.actors, **actors}
        self._attempts.update({d.key: d.attempt for d in deployments})
        for k in actors:
            self._ended.pop(k, None)
        runs = {actors[d.key].run.remote(d.attempt): d.key for d in deployments}
        self._runs.update(runs)
        for ref in runs:  # the end is heard when it comes, not polled for
            ref.future().add_done_callback(self._on_run_done)

    def _on_run_done(self, _: Any) -> None:
        self._exited.set()
        self._wake()

    def on_exit(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def stop_deploying(self) -> None:
        self._stopped.set()

    def _no_resources(self, keys: list[TaskKey]) -> NoResourceAvailableError:
        g = self._graph
        vertices = [g.vertices[v] for v in sorted({k[0] for k in keys})]
        asks = {v.id: _asks(v, g.execution) for v in vertices}
        available = ray.available_resources()
        free = {k: available.get(_RAY_NAMES.get(k, k), 0.0) for a in asks.values() for k in a}
        return NoResourceAvailableError(
            f"{len(keys)} task(s) of job '{g.name}' ({', '.join(task_name(k) for k in keys[:5])}{' and more' if len(keys) > 5 else ''}) "
            f"found no room on the Ray cluster within the slot request timeout of {g.execution.slot_request_timeout_ms / 1000:g} s: "
            + "; ".join(f"{_owners(v)} asks for {_pretty(asks[v.id])} per task" for v in vertices)
            + f"; free now: {_pretty(free)} (free resources, add nodes, ask for less, or raise set_slot_request_timeout)"
        )

    def _slots_for(self, deployments: list[Deployment]) -> dict[TaskKey, Any]:
        """A slot per deployment: the job's free ones of its shape first, then leased."""
        wanted: dict[str, list[Deployment]] = {}
        shapes: dict[str, Shape] = {}
        for d in deployments:
            shape = slot_shape(d.task.vertex.resources, self._graph.execution, self._runtime_env)
            shapes[shape.key] = shape
            self._shapes[d.key] = shape
            wanted.setdefault(shape.key, []).append(d)
        actors: dict[TaskKey, Any] = {}
        leases = {}
        for key, ds in wanted.items():
            spare = self._spare.get(key, []) + self._returned(key)
            take, self._spare[key] = spare[: len(ds)], spare[len(ds) :]
            actors.update({d.key: actor for d, actor in zip(ds, take)})
            if len(take) < len(ds):
                leases[key] = self._pool.lease.remote(self._graph.name, self._app, shapes[key], len(ds) - len(take))
        for key, ref in leases.items():
            rest = [d for d in wanted[key] if d.key not in actors]
            actors.update({d.key: actor for d, actor in zip(rest, ray.get(ref))})
        return actors

    def send(self, task: TaskKey, letter: TaskLetter) -> None:
        actor = self.actors.get(task)
        if actor is None:
            return
        ref = actor.letter.remote(self._attempts[task], letter)
        if isinstance(letter, OperatorEvent):
            self._events[ref] = task  # one that is lost fails the task over

    def running(self) -> dict[TaskKey, Any]:
        """The actors of the tasks that run now: a task whose ``run()`` returned
        has left its slot to the job as a spare, and killing that kills no task."""
        return {k: a for k, a in self.actors.items() if k not in self._ended}

    def finished(self, task: TaskKey) -> bool:
        """Whether the task finished in its current deployment (one that failed is
        on its way to a failover, not finished)."""
        return self._ended.get(task, False)

    def kill(self, tasks: frozenset[TaskKey]) -> None:
        """Stop these tasks now; they report nothing more. A slot whose task had
        ended stays with the job; a running task is cancelled, and its slot waits
        in ``_cancelling`` for the task to return; a dead slot is forgotten (the
        pool replaces it)."""
        runs = {k: ref for ref, k in self._runs.items()}
        now = time.monotonic()
        dead = []
        for k in tasks:
            actor = self.actors.get(k)
            if actor is None:
                continue
            shape = self._shapes[k].key
            if k in self._ended:
                self._spare.setdefault(shape, []).append(actor)
            elif k in runs:
                actor.letter.remote(self._attempts[k], Cancel())
                self._cancelling.setdefault(shape, []).append((actor, runs[k], now))
            else:  # its run() call failed: the actor died
                dead.append(actor)
        self.actors = {k: a for k, a in self.actors.items() if k not in tasks}
        self._runs = {ref: k for ref, k in self._runs.items() if k not in tasks}
        self._events = {ref: k for ref, k in self._events.items() if k not in tasks}
        for k in tasks:
            self._ended.pop(k, None)
        self._drop(dead)

    def _returned(self, shape: str) -> list[Any]:
        """The slots of cancelled tasks of this shape, once their tasks returned
        (waiting out each one's grace); those that did not return are killed."""
        cancelled = self._cancelling.pop(shape, [])
        if not cancelled:
            return []
        deadline = max(at for _, _, at in cancelled) + CANCEL_GRACE_S
        refs = [ref for _, ref, _ in cancelled]
        ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        back, lost = [], []
        for actor, ref, _ in cancelled:
            if ref not in ready:
                lost.append(actor)
                continue
            try:
                ray.get(ref)
                back.append(actor)
            except ray.exceptions.RayError:
                lost.append(actor)
        self._drop(lost)
        return back

    def _drop(self, actors: list[Any]) -> None:
        """Kill these slots (whatever they run) and have the pool forget them."""
        for actor in actors:
            ray.kill(actor, no_restart=True)
            self._endpoints.pop(actor_id(actor), None)
        if actors:
            self._pool.forget.remote(actors)

    def kill_all(self) -> None:
        self.kill(frozenset(self.actors))

    def give_back(self) -> None:
        """The job has ended: its free slots go back to the pool, reset, before
        the end is reported (a job submitted right after finds them idle)."""
        for shape in list(self._cancelling):
            self._spare.setdefault(shape, []).extend(self._returned(shape))
        spare = [a for slots in self._spare.values() for a in slots] + [a for _, a in self._warming.values()]
        self._spare, self._warming = {}, {}
        if spare:
            ray.get(self._pool.give_back.remote(self._graph.name, spare))

    def poll_exits(self) -> list[tuple[TaskKey, TaskResult]]:
        out = self._lost_events()
        if not self._runs or not self._exited.is_set():
            return out
        self._exited.clear()  # before the wait: a run ending during it wakes the next poll
        ready, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=0)
        for ref in ready:
            key = self._runs.pop(ref)
            try:
                result = ray.get(ref)
                self._ended[key] = result.state is TaskState.FINISHED
            except ray.exceptions.RayError as exc:
                detail = (
                    "the actor was killed or crashed" if isinstance(exc, ray.exceptions.RayActorError) else str(exc)
                )
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
                out.append(
                    (
                        key,
                        TaskResult(
                            TaskState.FAILED,
                            TaskFailedError(name, f"an operator event to it was lost ({type(exc).__name__})"),
                        ),
                    )
                )
        # Reported once: the run() call of a task reported here says no more (its
        # slot is counted dead), or the failover would be counted twice.
        lost = {key for key, _ in out}
        self._runs = {ref: k for ref, k in self._runs.items() if k not in lost}
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


@dataclass
class _HostedJob:
    graph: JobGraph
    master: JobMaster
    gateway: RayGateway
    history: list[dict[str, Any]]  # the exceptions of its earlier incarnations, newest first


class JobCoordinator:
    """Hosts job masters, one running at a time, on a process the pool started
    ahead of time. :meth:`start` gives it a job; when that job has ended, its
    record stays here for ``linger_s`` (``weir status``, clients) while the
    coordinator, reset like a slot, serves its application's next job. When a
    coordinator dies, the pool hands its running job to a standby coordinator
    (one already up, Flink's standby JobManager), started with ``recovering``: it
    has the pool take back the slots of the old attempt (their tasks cancelled,
    or the slots killed when a task does not return) and recovers the job from
    the latest checkpoint in storage, on them. Client calls name the job they are about."""

    # Letters of a recovering coordinator's tasks carry attempts from here on, so
    # none from before the takeover can pass for one of the new attempt.
    ATTEMPTS_PER_INCARNATION = 1_000_000

    def __init__(self) -> None:
        self._jobs: dict[str, _HostedJob] = {}
        self._running: _HostedJob | None = None
        self._scope = JobScope()
        self._pool = find_pool()
        self._metrics = JobMetrics()
        self._gone = threading.Event()  # never set: until_gone() returns only by this process's death
        self._arriving: dict[str, threading.Event] = {}  # jobs being started here: clients' calls wait for them
        report_every_second(self._report_metrics, "metrics")

    def ready(self) -> bool:
        return True

    def until_gone(self) -> None:
        """Answers only when this coordinator has died (with Ray's error): the
        pool's way to learn of it at once and hand its job to another."""
        self._gone.wait()

    def _report_metrics(self) -> None:
        hosted = self._running
        if hosted is None:
            return
        m = hosted.master
        done = [st for st in list(m.coordinator.history.values()) if st.status is CheckpointStatus.COMPLETED]
        last = max(done, key=lambda st: st.checkpoint_id, default=None)
        self._metrics.report(
            hosted.graph.name, m.restarts.count, m.coordinator.completed, None if last is None else vars(last)
        )

    def start(self, assignment: JobAssignment, recovering: bool = False) -> None:
        """Run a job; ``recovering``: take over one whose coordinator died (its
        old attempt's tasks are stopped first, and it resumes from its latest
        checkpoint, or ends as it had recorded)."""
        if self._running is not None:  # the pool hands a coordinator one job at a time
            raise SlotBusyError(
                f"job coordinator busy with job '{self._running.graph.name}', asked to start '{assignment.name}'"
            )
        arrived = self._arriving.setdefault(assignment.name, threading.Event())
        try:
            if recovering:
                ray.get(self._pool.reclaim.remote(assignment.name))
            self._host(assignment, recovering)
        finally:
            arrived.set()
            del self._arriving[assignment.name]

    def _host(self, assignment: JobAssignment, recovering: bool) -> None:
        context = ray.get_runtime_context()
        self._scope.enter(assignment.faults)
        try:
            graph = cloudpickle.loads(assignment.graph)
        except Exception as exc:
            self._scope.leave()  # this process serves the application's next job as if it had not tried
            raise _load_error(assignment.name, exc) from None  # the user's own exception may not unpickle elsewhere
        for parallelism in assignment.rescales:  # a restart keeps the rescales that completed
            graph = graph.rescaled(parallelism)
        gateway = RayGateway(
            graph, assignment.app, context.current_actor, self._pool, context.runtime_env, assignment.faults
        )
        master = JobMaster(
            graph,
            gateway,
            MasterOptions(
                recovering=recovering,
                first_attempt=assignment.incarnation * self.ATTEMPTS_PER_INCARNATION,
                incarnation=assignment.incarnation,
                on_end=lambda status: self._ended(hosted),
                on_failure=lambda: self._pool.exceptions_reported.remote(  # a successor lists them too
                    graph.name, assignment.incarnation, self._own_exceptions(hosted.master)
                ),
                deploy_io=OffLoopThread(graph.name, "task deployment"),
            ),
        )
        hosted = _HostedJob(graph, master, gateway, assignment.history)
        self._jobs[graph.name] = self._running = hosted
        threading.Thread(
            target=self._run, args=(hosted, assignment.linger_s), name=f"jobmaster-{graph.name}", daemon=True
        ).start()

    def _ended(self, hosted: _HostedJob) -> None:
        """Before anyone hears the job ended: the pool no longer counts it as
        running, so this coordinator's death does not bring it back."""
        if self._running is hosted:
            self._running = None
        hosted.gateway.give_back()
        self._scope.leave()
        ray.get(self._pool.job_finished.remote(ray.get_runtime_context().get_actor_id()))

    def _run(self, hosted: _HostedJob, linger_s: float) -> None:
        hosted.master.run()
        name = hosted.graph.name
        # Its record stays a while so that `weir status` and clients can read the outcome.
        timer = threading.Timer(linger_s, self._forget, args=(name, hosted))
        timer.daemon = True
        timer.start()

    def _forget(self, name: str, hosted: _HostedJob) -> None:
        if self._jobs.get(name) is hosted:
            del self._jobs[name]
            self._pool.forget_job.remote(name, ray.get_runtime_context().get_actor_id())

    # A client that followed a job here may ask before its start has done.
    ARRIVAL_WAIT_S = 60.0

    def _job(self, name: str) -> _HostedJob:
        arriving = self._arriving.get(name)
        if arriving is not None:
            arriving.wait(self.ARRIVAL_WAIT_S)
        hosted = self._jobs.get(name)
        if hosted is None:
            raise JobForgottenError(f"job '{name}' ended long ago (its record is gone)")
        return hosted

    # Letters from tasks (acks, declines, end of input, operator events).
    def post(self, run_id: str, letter: Any) -> None:
        hosted = self._running
        if hosted is not None and hosted.graph.run_id == run_id:  # never one for a job that has ended
            hosted.master.mailbox.put_control(letter)

    # Calls from clients.
    def cancel(self, job: str) -> None:
        self._job(job).master.cancel()

    def savepoint(self, job: str, path: str | None, timeout_s: float) -> tuple[str, Any]:
        return self._ask(job, TriggerSavepoint(path, Request()), timeout_s)

    def stop(self, job: str, path: str | None, drain: bool, timeout_s: float) -> tuple[str, Any]:
        return self._ask(job, StopJob(path, drain, Request()), timeout_s)

    def rescale(self, job: str, parallelism: dict[str, int], timeout_s: float) -> tuple[str, Any]:
        answer = self._ask(job, RescaleJob(parallelism, Request()), timeout_s)
        if answer[0] == "ok":  # before the caller hears of it: a coordinator taking the job over deploys it rescaled
            ray.get(self._pool.rescaled.remote(job, parallelism))
        return answer

    def _ask(self, job: str, letter: AskLetter, timeout_s: float) -> tuple[str, Any]:
        try:
            return "ok", self._job(job).master.ask(letter, timeout_s)
        except Exception as exc:
            return "error", exc

    def status(self, job: str) -> str:
        return self._job(job).master.status.value

    def wait(self, job: str, timeout_s: float) -> bool:
        return self._job(job).master.wait(timeout_s)

    def result(self, job: str) -> tuple[str, Any]:
        try:
            return "ok", self._job(job).master.result()
        except Exception as exc:
            return "error", exc

    def info(self, job: str) -> dict[str, Any]:
        m = self._job(job).master
        return {
            "job": job,
            "status": m.status.value,
            "restarts": m.restarts.count,
            "attempt": m.attempt,
            "coordinator_recovered": m.recovering,  # this coordinator took the job over and recovered it from storage
            "restarting_tasks": m.view.restarting_tasks,  # failed-over regions on their way back
            "duration_s": round((m.life.ended or m.clock()) - m.life.started, 3),
            "parallelism": {v.id: v.parallelism for v in m.graph.vertices.values()},
            "completed_checkpoints": m.coordinator.completed,
        }

    def checkpoints(self, job: str) -> list[dict[str, Any]]:
        return self._job(job).master.view.checkpoints

    def tasks(self, job: str) -> list[str]:
        return [task_actor_name(job, *k) for k in self._job(job).gateway.running()]

    def exceptions(self, job: str) -> list[dict[str, Any]]:
        """The failures that restarted or ended the job, newest first (its
        exception history, as Flink's web UI shows it), through the deaths of
        its earlier coordinators."""
        hosted = self._job(job)
        return self._own_exceptions(hosted.master) + hosted.history

    @staticmethod
    def _own_exceptions(m: JobMaster) -> list[dict[str, Any]]:
        now, wall = m.clock(), time.time()
        out = []
        for f in reversed(tuple(m.life.failures)):  # a copy: the loop thread appends
            task = getattr(f.error, "task", None) if f.task is None else task_name(f.task)
            out.append(
                {
                    "at": round(wall - (now - f.at), 3),  # the job master's clock is monotonic
                    "task": task,
                    "attempt": f.attempt,
                    "operator": getattr(f.error, "operator", None),
                    "exception": type(f.error).__name__,
                    "message": str(f.error),
                }
            )
        return out

    def graph_svg(self, job: str) -> str:
        return self._job(job).master.graph.to_svg()  # drawn here: the driver never unpickles user functions

    def task_actor(self, job: str, vertex: str, subtask: int) -> tuple[str, Any]:
        """("running", the Ray actor that runs the task now), or why there is none:
        "deploying" (not deployed yet, or failing over: ask again), "finished", or
        "absent" (the job has no such task)."""
        hosted = self._job(job)
        key = (vertex, subtask)
        actor = hosted.gateway.running().get(key)
        if actor is not None:
            return "running", actor
        if key not in hosted.master.graph.task_names():
            return "absent", None
        return ("finished" if hosted.gateway.finished(key) else "deploying"), None

    def metrics(self, job: str) -> list[dict[str, Any]]:
        hosted = self._job(job)
        if hosted.master.status.is_terminal:
            return hosted.master.final_metrics
        return hosted.gateway.metrics()


def _load_error(job: str, exc: Exception) -> JobLoadError:
    """Why a job's graph did not load here, naming the module when one is missing."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return JobLoadError(
            f"job '{job}' could not be loaded on the cluster: its code imports module '{exc.name}', which the "
            "cluster's processes cannot import. Ship it with the job (ray.init(runtime_env={'py_modules': [...]}) "
            "or a working_dir) or install it on every node, then submit again; nothing of the job started"
        )
    return JobLoadError(
        f"job '{job}' could not be loaded on the cluster: {type(exc).__name__}: {exc} (do the cluster's "
        "libraries match the driver's?); nothing of the job started"
    )


RemoteJobCoordinator = ray.remote(JobCoordinator)

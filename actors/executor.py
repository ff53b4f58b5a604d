"""Submitting jobs to Ray, and clients for running jobs (also from other processes)."""

from __future__ import annotations

import datetime
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import ray
from ray import cloudpickle  # keeps each function's file name: a user's traceback shows its source lines

from weir.actors.cluster import actor_runtime_env, ensure_ray, task_actor_name
from weir.actors.collect import RayCollectChannel
from weir.actors.coordinator import check_feasible, slots_wanted
from weir.actors.ledger import Application, Conflict, JobAssignment
from weir.actors.pool import get_pool
from weir.runtime.errors import (
    JobAlreadyRunningError,
    JobCancelledError,
    JobCoordinatorLostError,
    JobExecutionError,
    JobForgottenError,
    OutputInUseError,
    UnknownTaskError,
    WeirError,
)
from weir.runtime.executor import TASK_WAIT_S, Executor, JobClient, JobExecutionResult, JobStatus
from weir.runtime.graph import JobGraph
from weir.runtime.storage import CheckpointStorage
from weir.runtime.testing import refuse_in_process_operators

if TYPE_CHECKING:
    from weir.actors.ui import JobFrame

DEFAULT_LINGER_S = 300.0


class JobNotFoundError(WeirError, LookupError):
    """No job of that name on the cluster (any more)."""


class RayJobClient(JobClient):
    def __init__(self, job_name: str, coordinator: Any, storage: CheckpointStorage | None = None) -> None:
        """``storage``: the run's checkpoint storage, where its end is recorded (the
        submitting client has it): status() and wait() still answer from there
        once the coordinator has forgotten the job."""
        self.job_name = job_name
        self._coordinator = coordinator
        self._storage = storage

    # A coordinator that died hands its job to another within a second or two
    # (the pool's standby); a client follows the job there for this long.
    FOLLOW_S = 30.0

    def _ask(self, method: str, *args: Any, timeout_s: float | None = 60) -> Any:
        """Call ``method`` of the job's coordinator (with the job's name first).
        When that coordinator has died, follow the job to the one that took it
        over and ask again; a WeirError raised there is raised here."""
        deadline = time.monotonic() + self.FOLLOW_S
        while True:
            coordinator = self._coordinator
            try:
                return ray.get(getattr(coordinator, method).remote(self.job_name, *args), timeout=timeout_s)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, WeirError):
                    raise exc.cause from None
                raise
            except ray.exceptions.RayActorError:
                self._follow(coordinator, deadline)
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(
                    f"the job coordinator of '{self.job_name}' did not answer within {timeout_s}s"
                ) from None

    def _follow(self, dead: Any, deadline: float) -> None:
        """The coordinator the pool now names for the job, once it is not ``dead``."""
        pool = get_pool(create=False)
        while pool is not None and time.monotonic() < deadline:
            actor = ray.get(pool.coordinator_of.remote(self.job_name))
            if actor is None:
                raise JobForgottenError(f"job '{self.job_name}' ended long ago (its record is gone)")
            if actor._actor_id != dead._actor_id:
                self._coordinator = actor
                return
            time.sleep(0.05)
        raise JobCoordinatorLostError(
            f"the job coordinator of '{self.job_name}' died and no other took the job over within "
            f"{self.FOLLOW_S:g} s (is the cluster's weir pool gone?)"
        )

    @staticmethod
    def attach(job_name: str, address: str | None = None) -> "RayJobClient":
        """A client for a job submitted by any process of the cluster."""
        pool = get_pool(address, create=False)
        actor = None if pool is None else ray.get(pool.coordinator_of.remote(job_name))
        if actor is None:
            raise JobNotFoundError(f"no job named '{job_name}' on this Ray cluster (see `weir list`)")
        return RayJobClient(job_name, actor)

    @property
    def coordinator(self) -> Any:
        """The job coordinator's Ray actor now (failure tests kill it)."""
        return self._coordinator

    def status(self) -> JobStatus:
        try:
            return JobStatus(self._ask("status"))
        except JobForgottenError as exc:
            return JobStatus(self._recorded_end(exc)["status"])

    def _recorded_end(self, forgotten: JobForgottenError) -> dict[str, Any]:
        """What the job recorded in its checkpoint storage as it ended (FLIP-194's
        job result store), for a job its coordinator has forgotten."""
        recorded = None if self._storage is None else self._storage.recorded_result()
        if recorded is None:
            raise forgotten
        return recorded

    def info(self) -> dict[str, Any]:
        return self._ask("info")

    def _wait_ended(self, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            step = 5.0 if deadline is None else max(0.0, min(5.0, deadline - time.monotonic()))
            if self._ask("wait", step, timeout_s=None):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job '{self.job_name}' still {self.status().value} after {timeout_s}s")

    def wait(self, timeout_s: float | None = None) -> JobExecutionResult:
        try:
            self._wait_ended(timeout_s)
            kind, value = self._ask("result")
            if kind == "error":
                raise value
        except JobForgottenError as exc:
            value = self._recorded_result(self._recorded_end(exc))
        if value.status is JobStatus.CANCELED:
            raise JobCancelledError(f"job '{self.job_name}' was cancelled")
        return value

    def _recorded_result(self, recorded: dict[str, Any]) -> JobExecutionResult:
        status = JobStatus(recorded["status"])
        if status is JobStatus.FAILED:
            raise JobExecutionError(
                f"job '{self.job_name}' failed after {recorded.get('restarts', '?')} restart(s): {recorded['detail']} "
                "(the traceback went with the job's record; see the coordinator's log)"
            )
        return JobExecutionResult(
            self.job_name,
            status,
            recorded.get("duration_s", 0.0),
            recorded.get("restarts", 0),
            recorded.get("completed_checkpoints", 0),
        )

    def cancel(self, timeout_s: float = 30) -> None:
        self._ask("cancel")
        self._wait_ended(timeout_s)

    def rescale(self, parallelism: dict[str, int], timeout_s: float = 120) -> float:
        return self._answer("rescale", dict(parallelism), timeout_s)

    def task_actor(self, vertex: str, subtask: int) -> Any:
        """The Ray actor that runs task ``vertex/subtask`` now. Task actors come
        from a pool and carry no Ray name: this is the way from a task to its actor.
        A task not deployed yet (a job just submitted, or failing over) is waited
        for; one that finished, or that the job does not have, is refused."""
        deadline = time.monotonic() + TASK_WAIT_S
        while (answer := self._ask("task_actor", vertex, subtask))[0] == "deploying" and time.monotonic() < deadline:
            if self.status().is_terminal:
                answer = ("ended", None)
                break
            time.sleep(0.05)
        state, actor = answer
        if actor is None:
            raise UnknownTaskError.of(self.job_name, vertex, subtask, state, self.tasks())
        return actor

    def kill_task(self, vertex: str, subtask: int) -> str:
        ray.kill(self.task_actor(vertex, subtask))
        return task_actor_name(self.job_name, vertex, subtask)

    def savepoint(self, path: str | None = None, timeout_s: float = 120) -> str:
        return self._answer("savepoint", path, timeout_s)

    def stop(self, savepoint_path: str | None = None, drain: bool = False, timeout_s: float = 120) -> str:
        return self._answer("stop", savepoint_path, drain, timeout_s)

    def _answer(self, method: str, *args: Any) -> Any:
        """A control call whose last argument is its time-out: its answer, or its error raised."""
        kind, value = self._ask(method, *args, timeout_s=args[-1] + 30)
        if kind == "error":
            raise value
        return value

    def restarts(self) -> int:
        return int(self.info()["restarts"])

    def checkpoints(self) -> list[dict[str, Any]]:
        return self._ask("checkpoints")

    def tasks(self) -> list[str]:
        return self._ask("tasks")

    def exceptions(self) -> list[dict[str, Any]]:
        """The failures that restarted or ended the job, newest first: when
        (``at``, seconds since the epoch), the task and attempt, the exception's
        type and message."""
        return self._ask("exceptions")

    def graph_svg(self) -> str:
        return self._ask("graph_svg")

    def metrics(self) -> list[dict[str, Any]]:
        return self._ask("metrics")

    def ui(self, height: int = 720) -> JobFrame:
        """This job's view in the cluster's web UI (started if it does not run),
        shown inline as the last line of a notebook cell; ``.url`` is its address."""
        from weir.actors.ui import JobFrame  # noqa: F811  (the HTTP server's modules load where a UI is wanted)
        from weir.actors.ui_server import start_ui

        return JobFrame(start_ui(ClusterJobs)["url"], self.job_name, height)


class ClusterJobs:
    """The jobs of the cluster this process is connected to, by the pool's
    registry: what the web UI shows. A client is attached at each call, so a
    job submitted again under its name is the new run's at once."""

    def names(self) -> list[str]:
        pool = get_pool(create=False)
        return [] if pool is None else ray.get(pool.jobs.remote())

    def client(self, name: str) -> RayJobClient:
        return RayJobClient.attach(name)


def list_jobs(address: str | None = None) -> list[dict[str, Any]]:
    """Every weir job whose coordinator is alive on the cluster."""
    pool = get_pool(address, create=False)
    out = []
    for name in [] if pool is None else ray.get(pool.jobs.remote()):
        try:
            out.append(RayJobClient.attach(name, address).info())
        except WeirError:
            continue  # ended between the listing and the call
    return out


_application: Application | None = None


def this_application() -> Application:
    """This driver as the pool knows it: its Ray job id, and an object it owns,
    which Ray loses when the driver exits (then the pool retires the processes
    that ran its code)."""
    global _application
    job_id = ray.get_runtime_context().get_job_id()
    if _application is None or _application.id != job_id:  # a driver may reconnect: a new Ray job
        _application = Application(job_id, f"{socket.gethostname()} pid {os.getpid()}", [ray.put(job_id)])
    return _application


def _refusal(name: str, conflict: Conflict) -> JobAlreadyRunningError | OutputInUseError:
    since = (
        datetime.datetime.fromtimestamp(conflict.submitted_at).strftime("%H:%M:%S") if conflict.submitted_at else "?"
    )
    running = f"(run {conflict.run_id}, submitted at {since} by {conflict.where})"
    reach = (
        f"watch it with `weir status {conflict.job}` or RayJobClient.attach('{conflict.job}'), "
        f"end it with `weir cancel {conflict.job}` or `weir stop {conflict.job} --savepoint-path PATH`"
    )
    if conflict.location is None:
        return JobAlreadyRunningError(
            f"a job named '{name}' is already running on this Ray cluster {running}; one name runs once at a time: "
            f"{reach}, or submit under another name",
            job=conflict.job,
            run_id=conflict.run_id,
        )
    return OutputInUseError(
        f"sink '{conflict.operator}' of job '{name}' writes to {conflict.location}, which running job '{conflict.job}' "
        f"{running} writes to; "
        f"an output belongs to one running job, and nothing was written: {reach}, or give the sink an output of its own",
        job=conflict.job,
        location=conflict.location,
    )


class RayExecutor(Executor):
    def collect_channel(self) -> RayCollectChannel:
        ensure_ray()
        return RayCollectChannel()

    def submit(self, graph: JobGraph) -> RayJobClient:
        """Start the job on the cluster's pool; refused (nothing started, nothing
        written) when a running job holds its name or one of its outputs, and
        :class:`JobLoadError` when the cluster cannot load its code (its name and
        outputs are free again: a fixed job can be submitted at once)."""
        refuse_in_process_operators(graph)
        ensure_ray()
        check_feasible(graph)
        linger_s = float(os.environ.get("WEIR_JOB_LINGER_S", DEFAULT_LINGER_S))
        faults = {k: v for k, v in os.environ.items() if k.startswith("WEIR_FAULT")}  # weir's own failure tests
        runtime_env = actor_runtime_env()
        assignment = JobAssignment(
            graph.name,
            graph.run_id,
            cloudpickle.dumps(graph),
            this_application(),
            graph.outputs,
            linger_s,
            faults,
            submitted_at=time.time(),
            slots=slots_wanted(graph, runtime_env),
        )
        try:
            actor, conflict = ray.get(get_pool().submit.remote(assignment, runtime_env))
        except ray.exceptions.RayTaskError as exc:  # the cluster could not load the job (JobLoadError)
            raise exc.cause if isinstance(exc.cause, WeirError) else exc from None
        if conflict is not None:
            raise _refusal(graph.name, conflict)
        return RayJobClient(graph.name, actor, CheckpointStorage(graph.checkpointing.storage, graph.name, graph.run_id))

"""Submitting jobs to Ray, and clients for running jobs (also from other processes)."""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from actors.cluster import NAMESPACE, actor_runtime_env, coordinator_name, ensure_ray, task_actor_name
from actors.coordinator import RemoteJobCoordinator, check_feasible
from runtime.errors import JobCancelledError, WeirError
from runtime.executor import Executor, JobClient, JobExecutionResult, JobStatus
from runtime.graph import JobGraph

DEFAULT_LINGER_S = 300.0
COORDINATOR_RESTARTS = 5  # Ray restarts a dead job coordinator this often; it recovers from storage


class JobNotFoundError(WeirError):
    pass


class JobAlreadyRunningError(WeirError):
    pass


def _call(job_name: str, ref: Any, timeout_s: float | None = 60) -> Any:
    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.RayActorError:
        raise WeirError(f"the job coordinator of '{job_name}' is gone (it died, or the job ended long ago)") from None
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(f"the job coordinator of '{job_name}' did not answer within {timeout_s}s") from None


class RayJobClient(JobClient):
    def __init__(self, job_name: str, coordinator: Any) -> None:
        self.job_name = job_name
        self._coordinator = coordinator

    @staticmethod
    def attach(job_name: str, address: str | None = None) -> "RayJobClient":
        """A client for a job submitted by any process of the cluster."""
        ensure_ray(address)
        try:
            actor = ray.get_actor(coordinator_name(job_name), namespace=NAMESPACE)
        except ValueError:
            raise JobNotFoundError(f"no job named '{job_name}' on this Ray cluster (see `weir list`)") from None
        return RayJobClient(job_name, actor)

    def status(self) -> JobStatus:
        return JobStatus(_call(self.job_name, self._coordinator.status.remote()))

    def info(self) -> dict[str, Any]:
        return _call(self.job_name, self._coordinator.info.remote())

    def _wait_ended(self, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            step = 5.0 if deadline is None else max(0.0, min(5.0, deadline - time.monotonic()))
            if _call(self.job_name, self._coordinator.wait.remote(step), None):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job '{self.job_name}' still {self.status().value} after {timeout_s}s")

    def wait(self, timeout_s: float | None = None) -> JobExecutionResult:
        self._wait_ended(timeout_s)
        kind, value = _call(self.job_name, self._coordinator.result.remote())
        if kind == "error":
            raise value
        if value.status is JobStatus.CANCELED:
            raise JobCancelledError(f"job '{self.job_name}' was cancelled")
        return value

    def cancel(self, timeout_s: float = 30) -> None:
        _call(self.job_name, self._coordinator.cancel.remote())
        self._wait_ended(timeout_s)

    def rescale(self, parallelism: dict[str, int], timeout_s: float = 120) -> float:
        return self._answer(self._coordinator.rescale.remote(dict(parallelism), timeout_s), timeout_s)

    def kill_task(self, vertex: str, subtask: int) -> str:
        name = task_actor_name(self.job_name, vertex, subtask)
        if name not in self.tasks():
            raise WeirError(f"job '{self.job_name}' has no task {vertex}/{subtask}; its tasks: {', '.join(self.tasks()) or 'none'}")
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE))
        except ValueError:
            raise WeirError(f"task {name} is gone already (the job is restarting or ended)") from None
        return name

    def savepoint(self, path: str | None = None, timeout_s: float = 120) -> str:
        return self._answer(self._coordinator.savepoint.remote(path, timeout_s), timeout_s)

    def stop(self, savepoint_path: str | None = None, drain: bool = False, timeout_s: float = 120) -> str:
        return self._answer(self._coordinator.stop.remote(savepoint_path, drain, timeout_s), timeout_s)

    def _answer(self, ref: Any, timeout_s: float) -> Any:
        kind, value = _call(self.job_name, ref, timeout_s + 30)
        if kind == "error":
            raise value
        return value

    def checkpoints(self) -> list[dict[str, Any]]:
        return _call(self.job_name, self._coordinator.checkpoints.remote())

    def tasks(self) -> list[str]:
        return _call(self.job_name, self._coordinator.tasks.remote())

    def metrics(self) -> list[dict[str, Any]]:
        return _call(self.job_name, self._coordinator.metrics.remote())


def list_jobs(address: str | None = None) -> list[dict[str, Any]]:
    """Every weir job whose coordinator is alive on the cluster."""
    ensure_ray(address)
    names = [
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == NAMESPACE and a["name"].startswith(coordinator_name(""))
    ]
    out = []
    for name in sorted(names):
        try:
            out.append(RayJobClient.attach(name[len(coordinator_name("")):]).info())
        except WeirError:
            continue  # ended between the listing and the call
    return out


class RayExecutor(Executor):
    def submit(self, graph: JobGraph) -> RayJobClient:
        ensure_ray()
        check_feasible(graph)
        name = coordinator_name(graph.name)
        try:
            old = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            old = None
        if old is not None:
            try:
                status = JobStatus(ray.get(old.status.remote(), timeout=10))
            except Exception:
                status = JobStatus.FAILED
            if not status.is_terminal:
                raise JobAlreadyRunningError(f"a job named '{graph.name}' is {status.value} on this cluster; pick another name or cancel it")
            ray.kill(old, no_restart=True)
        linger_s = float(os.environ.get("WEIR_JOB_LINGER_S", DEFAULT_LINGER_S))
        deadline = time.monotonic() + 30
        while True:
            try:
                actor = RemoteJobCoordinator.options(
                    name=name, namespace=NAMESPACE, lifetime="detached", num_cpus=0, max_concurrency=64, runtime_env=actor_runtime_env(),
                    max_restarts=COORDINATOR_RESTARTS, max_task_retries=COORDINATOR_RESTARTS,
                ).remote(graph, linger_s)
                break
            except ValueError:  # the old coordinator's name is still being released
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        return RayJobClient(graph.name, actor)

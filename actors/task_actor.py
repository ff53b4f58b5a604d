"""The task actor (a *slot*): a thin Ray shell that runs one
:class:`runtime.task.StreamTask` at a time.

Slots come from the cluster's pool (:mod:`actors.pool`) already started; a job
runs its tasks on them across attempts and rescales, and gives them back when it
ends, after which :meth:`TaskActor.reset` makes the slot fit for another job.

``run`` is the task's loop thread (it returns when the task ends); every other
method only puts a letter into the mailbox or reads a counter. The actor is
threaded, so ``deliver`` calls may run in any order: each carries its channel's
sequence number and the mailbox restores the order. ``deliver`` returns once the
batch is in the mailbox; a full mailbox makes it wait, which holds back the
sender's credit: that is backpressure.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

import ray

from actors.pool import JobScope
from runtime.checkpointing import TaskKey
from runtime.errors import TaskFailedError, WeirError
from runtime.jobmaster import Deployment, MasterPorts
from runtime.task import StreamTask, TaskResult


class _RayPorts(MasterPorts):
    def __init__(self, d: Deployment, routes: list[list[tuple[Any, int]]], master: tuple[Any, str], credits: int) -> None:
        super().__init__(d)
        self._d = d
        self._routes = routes
        self._coordinator, self._run_id = master
        self._credits = credits
        self._inflight: dict[tuple[int, int], collections.deque[Any]] = collections.defaultdict(collections.deque)
        self.backpressured_s = 0.0

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        target, target_channel = self._routes[output][channel]
        inflight = self._inflight[(output, channel)]
        if len(inflight) >= self._credits:
            started = time.monotonic()
            self._get(inflight.popleft(), output, channel)
            self.backpressured_s += time.monotonic() - started
        inflight.append(target.deliver.remote(target_channel, seq, payload))

    def drain_outputs(self) -> None:
        for (output, channel), inflight in self._inflight.items():
            while inflight:
                self._get(inflight.popleft(), output, channel)

    def _get(self, ref: Any, output: int, channel: int) -> None:
        try:
            ray.get(ref)
        except ray.exceptions.RayError as exc:
            vertex = self._d.task.vertex.outputs[output].target
            raise TaskFailedError(f"{vertex} (channel {channel} of {self._d.task.name})", f"a delivery to it failed: {exc}") from None

    def post(self, letter: Any) -> None:
        self._coordinator.post.remote(self._run_id, letter)


class TaskActor:
    def __init__(self) -> None:
        self._task: StreamTask | None = None
        self.key: TaskKey | None = None
        self._scope = JobScope()
        self._running = False
        self._attempt = -1

    def ready(self) -> str:
        """The node this slot runs on; answering means its process is up."""
        return ray.get_runtime_context().get_node_id()

    def setup(self, deployment: Deployment, routes: list[list[tuple[Any, int]]], master: tuple[Any, str], env: dict[str, str]) -> None:
        """Take on a task (its previous one, if any, has ended). ``master``: the
        job coordinator and the job's run id, where its letters go; ``env``:
        variables the job sets in its tasks' processes (weir's failure injection)."""
        if self._running:
            raise WeirError(f"slot busy: task {self._task.deployment.name if self._task else '?'} is still running")
        self._scope.enter(env)
        ports = _RayPorts(deployment, routes, master, deployment.task.transport.credits)
        self.key, self._attempt = deployment.key, deployment.attempt
        self._task = StreamTask(deployment.task, ports)

    def reset(self) -> int:
        """Forget the job (see :class:`actors.pool.JobScope`); returns how many
        modules were dropped."""
        self._task, self.key = None, None
        return self._scope.leave()

    def run(self) -> TaskResult:
        assert self._task is not None, "setup() first"
        self._running = True
        try:
            result = self._task.run()
        finally:
            self._running = False
        if result.error is not None and not isinstance(result.error, WeirError):
            # Only weir's errors are sure to pickle back; keep the text of the rest.
            result = TaskResult(result.state, WeirError(f"task {self._task.deployment.name} failed:\n{result.error_text}"), result.error_text)
        return result

    def deliver(self, channel: int, seq: int, payload: bytes) -> None:
        assert self._task is not None
        self._task.mailbox.put_data(channel, seq, payload)

    def letter(self, attempt: int, letter: Any) -> None:
        """A control letter for the task of ``attempt`` (a late one for the slot's
        previous task is dropped)."""
        if self._task is not None and self._attempt == attempt:
            try:
                self._task.put_letter(letter)
            except Exception:
                pass  # the task ended; the job master hears of it through run()

    def metrics(self) -> dict[str, Any]:
        if self._task is None:
            return {}
        node = ray.get_runtime_context().get_node_id()
        return {**self._task.metrics(), "node_ip": ray.util.get_node_ip_address(), "node_id": node}

    def ping(self) -> bool:
        return True

    def pid(self) -> int:
        """The worker process (failure-injection tests SIGKILL it)."""
        return os.getpid()

    def assigned_resources(self) -> dict[str, float]:
        """What Ray gave this actor (CPU, GPU, custom)."""
        return dict(ray.get_runtime_context().get_assigned_resources())


RemoteTaskActor = ray.remote(TaskActor)

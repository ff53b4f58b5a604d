"""The task actor: a thin Ray shell around one :class:`runtime.task.StreamTask`.

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

from runtime.checkpointing import TaskKey
from runtime.errors import TaskFailedError, WeirError
from runtime.jobmaster import Deployment, MasterPorts
from runtime.task import StreamTask, TaskResult


class _RayPorts(MasterPorts):
    def __init__(self, d: Deployment, routes: list[list[tuple[Any, int]]], coordinator: Any, credits: int) -> None:
        super().__init__(d)
        self._d = d
        self._routes = routes
        self._coordinator = coordinator
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
        self._coordinator.post.remote(letter)


class TaskActor:
    def __init__(self) -> None:
        self._task: StreamTask | None = None
        self.key: TaskKey | None = None

    def setup(self, deployment: Deployment, routes: list[list[tuple[Any, int]]], coordinator: Any) -> None:
        ports = _RayPorts(deployment, routes, coordinator, deployment.task.transport.credits)
        self.key = deployment.key
        self._task = StreamTask(deployment.task, ports)

    def run(self) -> TaskResult:
        assert self._task is not None, "setup() first"
        result = self._task.run()
        if result.error is not None and not isinstance(result.error, WeirError):
            # Only weir's errors are sure to pickle back; keep the text of the rest.
            result = TaskResult(result.state, WeirError(f"task {self._task.deployment.name} failed:\n{result.error_text}"), result.error_text)
        return result

    def deliver(self, channel: int, seq: int, payload: bytes) -> None:
        assert self._task is not None
        self._task.mailbox.put_data(channel, seq, payload)

    def letter(self, letter: Any) -> None:
        if self._task is not None:
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

"""The task actor (a *slot*): a thin Ray shell that runs one
:class:`weir.runtime.task.StreamTask` at a time.

Slots come from the cluster's pool (:mod:`weir.actors.pool`) already started; a job
runs its tasks on them across attempts and rescales, and gives them back when it
ends, after which :meth:`TaskActor.reset` makes the slot fit for another job.

``run`` is the task's loop thread (it returns when the task ends); every other
method only puts a letter into the mailbox or reads a counter. Records do not
travel through Ray calls: the slot's :class:`weir.actors.exchange.Inbox` takes
deliveries on sockets straight into the running task's mailbox, and the task
sends through an :class:`weir.actors.exchange.Outbox` (backpressure included).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import ray

from weir.actors.exchange import DeliveryError, Endpoint, Inbox, Outbox, Route
from weir.actors.metrics import TaskMetrics, report_every_second
from weir.actors.slots import JobScope
from weir.runtime.checkpointing import TaskKey
from weir.runtime.deployment import Deployment, MasterPorts
from weir.runtime.errors import SlotBusyError, TaskFailedError, WeirError
from weir.runtime.letters import Cancel, TaskReport
from weir.runtime.lifecycle import TaskResult, TaskState
from weir.runtime.local_folders import sweep_known
from weir.runtime.task import StreamTask

log = logging.getLogger("weir.task_actor")

# Python's cyclic collector in a slot's process. A task keeps records and state in
# many small containers (a window's records, a join's buffered rows), nearly all
# without cycles; at Python's default thresholds (700, 10, 10) the collector
# traverses each of them over and over while they pile up: unpickling 1.6 M
# records into a list cost 4.3x as with no collector at all. A young generation
# 70x larger and middle collections 2x rarer cost 1.5x (the same with a 10x rarer
# full collection). Nexmark q8 (a window co-group) ran 1.3x faster with them, q3
# 1.14x, W1 1.05x. Cycles are still collected, only later; what the slot's
# process has when it starts (Ray's and weir's modules) is frozen, never traversed.
GC_THRESHOLDS = (50_000, 20, 10)


class _RayPorts(MasterPorts):
    """Deliveries go out through the task's :class:`Outbox`; letters for the job
    master through Ray."""

    def __init__(self, d: Deployment, outbox: Outbox, master: tuple[Any, str]) -> None:
        super().__init__(d)
        self._d = d
        self._outbox = outbox
        self._coordinator, self._run_id = master

    @property
    def backpressured_s(self) -> float:
        return self._outbox.blocked_s

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        self._delivering(self._outbox.send, output, channel, payload)

    def drain_outputs(self) -> None:
        self._delivering(self._outbox.drain)

    def _delivering(self, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except DeliveryError as exc:
            vertex = self._d.task.vertex.outputs[exc.output].target
            raise TaskFailedError(
                f"{vertex} (channel {exc.channel} of {self._d.task.name})", f"a delivery to it failed: {exc}"
            ) from None

    def post(self, letter: TaskReport) -> None:
        self._coordinator.post.remote(self._run_id, letter)


def _end_slot(cause: BaseException) -> None:
    """The slot's inbox broke: it can take no more deliveries, and a slot that
    stayed up would be leased again and hold up its senders. End the process, as
    a crash would: a job fails the running task over, one setting the slot up
    finds it dead and takes another, and the pool replaces it."""
    log.critical(
        "task actor (pid %d): its inbox broke (%s: %s); ending the process so that the slot is replaced",
        os.getpid(),
        type(cause).__name__,
        cause,
    )
    os._exit(1)


class TaskActor:
    def __init__(self) -> None:
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        self._task: StreamTask | None = None
        self.key: TaskKey | None = None
        self._scope = JobScope()
        self._running = False
        self._attempt = -1
        self._run_id = ""
        self._inbox = Inbox(ray.util.get_node_ip_address(), on_broken=_end_slot)
        self._outbox: Outbox | None = None
        self._metrics = TaskMetrics()
        report_every_second(self._report_metrics, "metrics")
        self.sweep()

    def sweep(self) -> int:
        """Delete the RocksDB folders of dead processes on this node (a killed task
        deletes nothing): when the slot starts, and when the pool retires it.
        Returns how many went."""
        return len(sweep_known())

    def _report_metrics(self) -> None:
        task, key = self._task, self.key
        if task is not None and key is not None:
            self._metrics.report(task.deployment.job_name, key[0], key[1], task.metrics())

    def ready(self) -> str:
        """The node this slot runs on; answering means its process is up."""
        return ray.get_runtime_context().get_node_id()

    def endpoint(self) -> Endpoint:
        """Where this slot takes deliveries (see :mod:`weir.actors.exchange`)."""
        return self._inbox.endpoint

    def setup(
        self, deployment: Deployment, routes: list[list[Route]], master: tuple[Any, str], env: dict[str, str]
    ) -> None:
        """Take on a task (its previous one, if any, has ended). ``routes``: the
        receiver of each output channel; ``master``: the job coordinator and the
        job's run id, where its letters go; ``env``: variables the job sets in its
        tasks' processes (weir's failure injection)."""
        if self._running:
            raise SlotBusyError(f"slot busy: task {self._task.deployment.name if self._task else '?'} is still running")
        self._scope.enter(env)
        self._run_id = master[1]
        self._outbox = Outbox(routes, self._run_id)
        self.key, self._attempt = deployment.key, deployment.attempt
        self._task = StreamTask(deployment.task, _RayPorts(deployment, self._outbox, master))
        self._inbox.open(self._run_id, self._attempt, self._task.mailbox)

    def reset(self) -> int:
        """Forget the job (see :class:`weir.actors.slots.JobScope`); returns how many
        modules were dropped."""
        self._task, self.key = None, None
        return self._scope.leave()

    def abandon(self, grace_s: float) -> bool:
        """The job's coordinator died and another takes the job over: cancel whatever task
        of the old attempt runs here (its run() answers a caller that is gone)
        and reset. False when the task did not return within ``grace_s`` (stuck
        in a user function): the slot must be killed instead."""
        task = self._task
        if task is not None and self._running:
            try:
                task.put_letter(Cancel())
            except Exception:
                pass  # it is ending anyway
        deadline = time.monotonic() + grace_s
        while self._running:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        self.reset()
        return True

    def run(self, attempt: int) -> TaskResult:
        """Run the task set up for ``attempt`` (a call of a dead coordinator's
        attempt arriving late runs nothing)."""
        if self._task is None or attempt != self._attempt or self._running:
            raise SlotBusyError(f"slot has no task of attempt {attempt} to run")
        self._running = True
        result = None
        try:
            result = self._task.run()
        finally:
            self._inbox.close(
                self._run_id, self._attempt, drop_connections=result is None or result.state is not TaskState.FINISHED
            )
            if self._outbox is not None:
                self._outbox.close()
            self._running = False
        if result.error is not None and not isinstance(result.error, WeirError):
            # Only weir's errors are sure to pickle back; keep the text of the rest.
            result = TaskResult(
                result.state,
                TaskFailedError(self._task.deployment.name, f"failed:\n{result.error_text}"),
                result.error_text,
            )
        return result

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

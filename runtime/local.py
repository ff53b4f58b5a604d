"""The in-process executor: every task on a thread of this process, channels as
direct mailbox puts. The same tasks and job master as on Ray, without Ray, for
tests, debugging and small jobs (``execute(executor="local")`` or
``WEIR_EXECUTOR=local``). Kills are simulated by cancelling a task's thread.
A test that passes a :class:`~weir.runtime.clock.ManualClock` to
``LocalExecutor(clock=...)`` moves the job master's time by hand (checkpoint
intervals and timeouts, restart delays), and its client's ``wait_until`` waits
for what the job does without sleeping: it is woken whenever the job master
tells the tasks something (a deployment, a checkpoint's trigger, completion or
abort, a cancel) or a task ends.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import cloudpickle

from weir.runtime.checkpointing import TaskKey, task_name
from weir.runtime.clock import SYSTEM_CLOCK, Clock
from weir.runtime.collect import LocalCollectChannel
from weir.runtime.deployment import Deployment, MasterPorts
from weir.runtime.errors import JobCancelledError, TaskFailedError, UnknownTaskError
from weir.runtime.executor import TASK_WAIT_S, Executor, JobClient
from weir.runtime.graph import JobGraph
from weir.runtime.job_lifecycle import JobExecutionResult, JobStatus
from weir.runtime.jobmaster import JobMaster
from weir.runtime.letters import OperatorEvent, Request, RescaleJob, StopJob, TaskLetter, TaskReport, TriggerSavepoint
from weir.runtime.lifecycle import TaskResult, TaskState
from weir.runtime.mailbox import MailboxClosedError
from weir.runtime.master_options import MasterOptions
from weir.runtime.task import StreamTask


class _Ports(MasterPorts):
    def __init__(self, gateway: "LocalGateway", d: Deployment) -> None:
        super().__init__(d)
        self._gw = gateway
        self._d = d
        self.backpressured_s = 0.0

    def post(self, letter: TaskReport) -> None:
        self._gw.master.mailbox.put_control(letter)

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        target, target_channel = self._d.routes[output][channel]
        task = self._gw.tasks.get(target)
        if task is None or self._gw.attempts.get(target) != self._d.attempt:
            raise MailboxClosedError(f"task {task_name(target)} is gone")
        task.mailbox.put_data(target_channel, seq, payload)

    def drain_outputs(self) -> None:
        pass  # a put is in the receiver's mailbox when it returns


class LocalGateway:
    def __init__(self) -> None:
        self.master: JobMaster
        self.tasks: dict[TaskKey, StreamTask] = {}
        self.attempts: dict[TaskKey, int] = {}  # each task's current attempt: only it reports
        self._threads: dict[TaskKey, threading.Thread] = {}
        # Tasks whose run() returned in their current attempt; True: it finished (not failed or cancelled).
        self._ended: dict[TaskKey, bool] = {}
        self._exits: list[tuple[TaskKey, TaskResult]] = []
        self._wake: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        # Counted and notified whenever the job master tells the tasks something
        # (a deployment, a letter, a kill) or a task ends: what a waiting client
        # may want to see (JobClient.wait_until).
        self.changes = 0
        self.changed = threading.Condition(self._lock)

    def deploy(self, deployments: list[Deployment]) -> None:
        # Each task gets its own copy of the deployment, user functions included, as
        # a task actor does: subtasks must never share a function object's fields.
        tasks = {d.key: StreamTask(cloudpickle.loads(cloudpickle.dumps(d.task)), _Ports(self, d)) for d in deployments}
        with self._lock:
            self.tasks = {**self.tasks, **tasks}
            self.attempts.update({d.key: d.attempt for d in deployments})
            for k in tasks:
                self._ended.pop(k, None)
            self._change()
        for d in deployments:
            t = threading.Thread(
                target=self._run, args=(d.key, d.attempt, tasks[d.key]), name=f"task-{task_name(d.key)}", daemon=True
            )
            self._threads[d.key] = t
            t.start()

    def _run(self, key: TaskKey, attempt: int, task: StreamTask) -> None:
        result = task.run()
        with self._lock:
            if self.attempts.get(key) == attempt:
                self._exits.append((key, result))
                self._ended[key] = result.state is TaskState.FINISHED
            self._change()
        self._wake()

    def send(self, task: TaskKey, letter: TaskLetter) -> None:
        t = self.tasks.get(task)
        try:
            if t is None:
                raise MailboxClosedError("no such task")
            t.put_letter(letter)
        except MailboxClosedError:  # it ended meanwhile: its exit is on its way
            if not isinstance(letter, OperatorEvent):
                return
            with self._lock:  # an event lost: the task fails over (if its exit is not reported already)
                if task in self.attempts:
                    self._exits.append(
                        (
                            task,
                            TaskResult(
                                TaskState.FAILED, TaskFailedError(task_name(task), "an operator event to it was lost")
                            ),
                        )
                    )
        with self._lock:
            self._change()

    def _change(self) -> None:  # with the lock held
        self.changes += 1
        self.changed.notify_all()

    def running(self) -> list[TaskKey]:
        """The tasks that run now: one whose ``run()`` returned is no task to kill."""
        with self._lock:
            return [k for k in self.tasks if k not in self._ended]

    def state_of(self, task: TaskKey) -> str:
        """ "running", "finished", or "deploying": not deployed yet, failing over, or
        failed and about to be. Reads without the lock (a waiter on ``changed`` holds it)."""
        if task not in self.tasks:
            return "deploying"
        ended = self._ended.get(task)
        return "running" if ended is None else "finished" if ended else "deploying"

    def crash(self, task: TaskKey) -> None:
        """Simulate a dead task: it stops and the job master sees it fail."""
        t = self.tasks.get(task)
        if t is not None:
            t.mailbox.close()

    def kill(self, tasks: frozenset[TaskKey]) -> None:
        with self._lock:
            for key in tasks:
                self.attempts.pop(key, None)  # nothing of their attempt reports any more
            self._exits = [e for e in self._exits if e[0] not in tasks]
            victims = [(self.tasks[key], self._threads.pop(key)) for key in tasks if key in self.tasks]
            self.tasks = {k: t for k, t in self.tasks.items() if k not in tasks}  # replaced: clients read it
            self._change()
        for t, _ in victims:
            t.mailbox.close()
        # A thread stuck in a user function cannot be stopped; it is left behind
        # (its attempt no longer reports) after a short wait for the others.
        deadline = time.monotonic() + 2
        for _, th in victims:
            th.join(timeout=max(0.0, deadline - time.monotonic()))

    def stop_deploying(self) -> None:
        pass  # a deploy here starts threads: it never waits for room

    def reserve(self, graph: JobGraph) -> bool:
        return True  # tasks run in this process: nothing to start

    def kill_all(self) -> None:
        self.kill(frozenset(self.tasks))

    def poll_exits(self) -> list[tuple[TaskKey, TaskResult]]:
        with self._lock:
            out, self._exits = self._exits, []
        return out

    def on_exit(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def metrics(self) -> list[dict[str, Any]]:
        return [t.metrics() for t in self.tasks.values()]


class LocalJobClient(JobClient):
    def __init__(self, master: JobMaster, gateway: LocalGateway) -> None:
        self.job_name = master.graph.name
        self._master = master
        self._gateway = gateway

    def status(self) -> JobStatus:
        return self._master.status

    def wait(self, timeout_s: float | None = None) -> JobExecutionResult:
        if not self._master.wait(timeout_s):
            raise TimeoutError(f"job '{self.job_name}' still {self._master.status.value} after {timeout_s}s")
        result = self._master.result()
        if result.status is JobStatus.CANCELED:
            raise JobCancelledError(f"job '{self.job_name}' was cancelled")
        return result

    def cancel(self, timeout_s: float = 30) -> None:
        self._master.cancel()
        if not self._master.wait(timeout_s):
            raise TimeoutError(f"job '{self.job_name}' did not end within {timeout_s}s of cancel")

    def savepoint(self, path: str | None = None, timeout_s: float = 120) -> str:
        return self._master.ask(TriggerSavepoint(path, Request()), timeout_s)

    def stop(self, savepoint_path: str | None = None, drain: bool = False, timeout_s: float = 120) -> str:
        return self._master.ask(StopJob(savepoint_path, drain, Request()), timeout_s)

    def rescale(self, parallelism: dict[str, int], timeout_s: float = 120) -> float:
        return self._master.ask(RescaleJob(dict(parallelism), Request()), timeout_s)

    def _change_mark(self) -> int:
        with self._gateway.changed:
            return self._gateway.changes

    def _await_change(self, mark: int, timeout_s: float) -> bool:
        gw = self._gateway
        with gw.changed:
            return gw.changed.wait_for(lambda: gw.changes != mark, timeout_s)

    def restarts(self) -> int:
        return self._master.restarts.count

    def checkpoints(self) -> list[dict[str, Any]]:
        return self._master.view.checkpoints

    def tasks(self) -> list[str]:
        return [task_name(k) for k in self._gateway.running()]

    def graph_svg(self) -> str:
        return self._master.graph.to_svg()

    def metrics(self) -> list[dict[str, Any]]:
        if self._master.status.is_terminal:
            return self._master.final_metrics
        return self._gateway.metrics()

    def kill_task(self, vertex: str, subtask: int) -> str:
        """Crash a running task; one not deployed yet (failing over) is waited for."""
        key, gw, m = (vertex, subtask), self._gateway, self._master
        if key not in m.graph.task_names():
            state = "absent"
        else:
            with gw.changed:
                gw.changed.wait_for(lambda: gw.state_of(key) != "deploying" or m.status.is_terminal, TASK_WAIT_S)
            state = gw.state_of(key)
            if state != "running" and m.status.is_terminal:
                state = "ended"
        if state != "running":
            raise UnknownTaskError.of(self.job_name, vertex, subtask, state, self.tasks())
        gw.crash(key)
        return task_name(key)


class LocalExecutor(Executor):
    """``clock``: the job master's (see the module docstring); the machine's by default."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    def collect_channel(self) -> LocalCollectChannel:
        return LocalCollectChannel()

    def submit(self, graph: JobGraph) -> LocalJobClient:
        gateway = LocalGateway()
        master = JobMaster(graph, gateway, MasterOptions(clock=self.clock.now))
        gateway.master = master
        threading.Thread(target=master.run, name=f"jobmaster-{graph.name}", daemon=True).start()
        return LocalJobClient(master, gateway)


__all__ = ["LocalExecutor", "LocalJobClient", "TaskState"]

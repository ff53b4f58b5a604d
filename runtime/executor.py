"""The bridge from ``env.execute()`` to whatever runs the job.

``weir.runtime`` never imports an executor: it looks one up by name among the
``weir.executors`` entry points (``ray`` by default, ``local`` for the
in-process executor), so importing ``weir.runtime`` never loads Ray.
"""

from __future__ import annotations

import importlib
import os
import time
from abc import ABC, abstractmethod
from importlib.metadata import entry_points
from typing import Any, Callable, Protocol

from weir.runtime.errors import InvalidConfigurationError, WeirError
from weir.runtime.graph import JobGraph
from weir.runtime.job_lifecycle import JobExecutionResult, JobStatus

# What travels on a channel: (committable id, records).
Committed = tuple[str, list[Any]]


class Publisher(Protocol):
    """The task's end of a :class:`CollectChannel`; pickled into the sink's task."""

    def publish(self, committed: list[Committed]) -> None:
        """Deliver to the driver; returns once the channel has them."""


class CollectChannel(ABC):
    """The driver's end: what the sink's task publishes, in order."""

    @abstractmethod
    def publisher(self) -> Publisher: ...

    @abstractmethod
    def poll(self, timeout_s: float) -> list[Committed]:
        """Everything published and not yet polled; waits up to ``timeout_s`` for
        the first item (0: does not wait)."""

    @abstractmethod
    def close(self) -> None:
        """Release the channel; later publishes are dropped (the job is ending)."""


_BUILTIN = {"ray": "weir.actors.executor:RayExecutor", "local": "weir.runtime.local:LocalExecutor"}


TASK_WAIT_S = 60  # how long a client waits for a task that is not deployed yet (failing over)


class JobClient(ABC):
    """A handle on a submitted job, from the process that submitted it or any other."""

    job_name: str
    POLL_S = 0.05  # how often wait_until asks again, where nothing wakes it

    def wait_until(self, condition: Callable[[Any], bool], timeout_s: float = 30) -> None:
        """Block until ``condition(client)`` holds: a test waits for what the job
        does (``lambda c: any(s["status"] == "COMPLETED" for s in
        c.checkpoints())``). Raises TimeoutError after ``timeout_s``, and
        :class:`WeirError` once the job has ended without it. The in-process
        client checks again whenever the job master tells the tasks something or
        a task ends; others ask every ``POLL_S``."""
        deadline = time.monotonic() + timeout_s
        while True:
            mark = self._change_mark()
            if condition(self):
                return
            status = self.status()
            if status.is_terminal:
                raise WeirError(f"job '{self.job_name}' ended {status.value} before the condition held")
            left = deadline - time.monotonic()
            if left <= 0 or not self._await_change(mark, left):
                raise TimeoutError(f"job '{self.job_name}': the condition did not hold within {timeout_s}s")

    def _change_mark(self) -> int:
        """Where the job is now, for :meth:`_await_change`."""
        return 0

    def _await_change(self, mark: int, timeout_s: float) -> bool:
        """Wait until the job may have moved on from ``mark``; False when
        ``timeout_s`` passed first. Here: one poll interval."""
        time.sleep(min(self.POLL_S, timeout_s))
        return True

    @abstractmethod
    def status(self) -> JobStatus: ...

    @abstractmethod
    def wait(self, timeout_s: float | None = None) -> JobExecutionResult:
        """Block until the job ends; raise :class:`JobExecutionError` if it failed."""

    @abstractmethod
    def cancel(self, timeout_s: float = 30) -> None:
        """End the job now (operators only close) and wait until it has ended."""

    @abstractmethod
    def restarts(self) -> int:
        """How often the job restarted so far (region restarts included)."""

    @abstractmethod
    def checkpoints(self) -> list[dict[str, Any]]:
        """id, status, duration_ms, size_bytes, reason, location of each checkpoint."""

    @abstractmethod
    def tasks(self) -> list[str]:
        """The names of the task actors of the current attempt."""

    @abstractmethod
    def graph_svg(self) -> str:
        """The job graph as it runs now (after rescales too), as an SVG picture."""

    @abstractmethod
    def metrics(self) -> list[dict[str, Any]]:
        """records in/out and backpressured time per task."""

    @abstractmethod
    def rescale(self, parallelism: dict[str, int], timeout_s: float = 120) -> float:
        """Give operators (by name or uid) a new parallelism while the job runs:
        exactly-once, keyed state moves by key group. Returns the seconds the job
        was not processing."""

    @abstractmethod
    def kill_task(self, vertex: str, subtask: int) -> str:
        """Kill one task (its actor on Ray) to rehearse failover; returns its name."""

    @abstractmethod
    def savepoint(self, path: str | None = None, timeout_s: float = 120) -> str:
        """Take a savepoint into ``path`` (a pyarrow.fs URI or local folder); None: a
        retained checkpoint. Returns its location; the job goes on."""

    @abstractmethod
    def stop(self, savepoint_path: str | None = None, drain: bool = False, timeout_s: float = 120) -> str:
        """Stop with a savepoint (FLIP-34). ``drain=True``: sources end their input
        (MAX_WATERMARK, finish) and the job ends FINISHED; else the job ends
        SUSPENDED and resumes from the savepoint as if never stopped. Without a
        path, a final retained checkpoint. Returns its location."""

    # PyFlink's names.
    def get_job_status(self) -> JobStatus:
        return self.status()

    def get_job_execution_result(self) -> JobExecutionResult:
        return self.wait()


class Executor(ABC):
    @abstractmethod
    def submit(self, graph: JobGraph) -> JobClient: ...

    @abstractmethod
    def collect_channel(self) -> "CollectChannel":
        """A channel from a job's collect sink to this process (``execute_and_collect``)."""


def find_executor(name: str | None = None) -> Executor:
    name = name or os.environ.get("WEIR_EXECUTOR", "ray")
    target = None
    for ep in entry_points(group="weir.executors"):
        if ep.name == name:
            target = ep.value
    target = target or _BUILTIN.get(name)
    if target is None:
        raise InvalidConfigurationError("executor", name, f"known executors: {', '.join(sorted(_BUILTIN))}")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)()

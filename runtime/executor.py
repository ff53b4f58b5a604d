"""The bridge from ``env.execute()`` to whatever runs the job.

``runtime`` never imports an executor: it looks one up by name among the
``weir.executors`` entry points (``ray`` by default, ``local`` for the
in-process executor), so importing ``runtime`` never loads Ray.
"""

from __future__ import annotations

import enum
import importlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from runtime.errors import InvalidConfigurationError
from runtime.graph import JobGraph

_BUILTIN = {"ray": "actors.executor:RayExecutor", "local": "runtime.local:LocalExecutor"}


class JobStatus(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    CANCELLING = "CANCELLING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)


@dataclass
class JobExecutionResult:
    job_name: str
    status: JobStatus
    duration_s: float
    restarts: int
    completed_checkpoints: int
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def get_net_runtime(self) -> float:
        """PyFlink's name: seconds the job ran."""
        return self.duration_s


class JobClient(ABC):
    """A handle on a submitted job, from the process that submitted it or any other."""

    job_name: str

    @abstractmethod
    def status(self) -> JobStatus: ...

    @abstractmethod
    def wait(self, timeout_s: float | None = None) -> JobExecutionResult:
        """Block until the job ends; raise :class:`JobExecutionError` if it failed."""

    @abstractmethod
    def cancel(self) -> None: ...

    @abstractmethod
    def checkpoints(self) -> list[dict[str, Any]]:
        """id, status, duration_ms, size_bytes, reason, location of each checkpoint."""

    @abstractmethod
    def tasks(self) -> list[str]:
        """The names of the task actors of the current attempt."""

    @abstractmethod
    def metrics(self) -> list[dict[str, Any]]:
        """records in/out and backpressured time per task."""

    # PyFlink's names.
    def get_job_status(self) -> JobStatus:
        return self.status()

    def get_job_execution_result(self) -> JobExecutionResult:
        return self.wait()


class Executor(ABC):
    @abstractmethod
    def submit(self, graph: JobGraph) -> JobClient: ...


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

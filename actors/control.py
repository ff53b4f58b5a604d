"""The control calls the ``weir`` CLI and the web UI both make, each with the
answer both show: one code path, so a savepoint, stop, cancel or rescale says
the same from a shell and from the page, and fails with the same error.

Each takes a job client (:class:`weir.actors.executor.RayJobClient`, or any
object with its methods) and returns a plain dict. Errors are the client's own
(a :class:`WeirError` or ``TimeoutError``): the CLI prints ``Error: <text>``,
the UI answers ``{"error": "<text>"}`` and the page shows ``Error: <text>``.
"""

from __future__ import annotations

from typing import Any, Protocol

from weir.runtime.errors import WeirError
from weir.runtime.job_lifecycle import JobStatus


class ControlledJob(Protocol):
    """What these calls need of a job client."""

    job_name: str

    def status(self) -> JobStatus: ...

    def savepoint(self, path: str | None = None, timeout_s: float = 120) -> str: ...

    def stop(self, savepoint_path: str | None = None, drain: bool = False, timeout_s: float = 120) -> str: ...

    def cancel(self, timeout_s: float = 30) -> None: ...

    def rescale(self, parallelism: dict[str, int], timeout_s: float = 120) -> float: ...


class InvalidRequestError(WeirError, ValueError):
    """A control request that names no valid change (``weir scale JOB x``, a page's
    form gone wrong): refused before the job hears of it."""


def savepoint(client: ControlledJob, path: str | None, timeout_s: float) -> dict[str, Any]:
    """Take a savepoint; the job goes on."""
    return {"job": client.job_name, "savepoint": client.savepoint(path, timeout_s)}


def stop(client: ControlledJob, savepoint_path: str | None, drain: bool, timeout_s: float) -> dict[str, Any]:
    """Stop with a savepoint: SUSPENDED, or FINISHED with ``drain``."""
    location = client.stop(savepoint_path, drain, timeout_s)
    return {"job": client.job_name, "status": client.status().value, "savepoint": location}


def cancel(client: ControlledJob) -> dict[str, Any]:
    """End the job now (operators only close)."""
    client.cancel()
    return {"job": client.job_name, "status": client.status().value}


def rescale(client: ControlledJob, parallelism: dict[str, int], timeout_s: float) -> dict[str, Any]:
    """Change operators' parallelism while the job runs; the answer has the pause."""
    if not parallelism:
        raise InvalidRequestError("no operator to rescale: name at least one as OPERATOR=PARALLELISM")
    for name, value in parallelism.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidRequestError(f"'{name}={value}' is not OPERATOR=PARALLELISM (a whole number from 1)")
    pause = client.rescale(parallelism, timeout_s)
    return {"job": client.job_name, "parallelism": parallelism, "pause_s": round(pause, 3)}


def parse_parallelism(changes: list[str] | tuple[str, ...]) -> dict[str, int]:
    """``["enrich=4", "totals=2"]`` as ``{"enrich": 4, "totals": 2}``."""
    parallelism = {}
    for change in changes:
        name, _, value = change.rpartition("=")
        if not name or not value.isdigit():
            raise InvalidRequestError(f"'{change}' is not OPERATOR=PARALLELISM")
        parallelism[name] = int(value)
    return parallelism

"""The progress bar ``execute()`` draws while it waits: records the job's sources
have read (of their total, when every source knows its size), checkpoints
completed, restarts. rich draws it, on stderr, in a terminal or a notebook's
output; where nobody watches (a pipe, a CI log) it is off unless asked for
(``env.set_progress_bar(True)``), and ``set_progress_bar(False)`` turns it off."""

from __future__ import annotations

import sys
from typing import Any

from weir.runtime.executor import JobClient, JobExecutionResult
from weir.runtime.graph import JobGraph

REFRESH_S = 0.25


def wanted(setting: bool | None) -> bool:
    if setting is not None:
        return setting
    return sys.stderr.isatty() or _in_notebook()


def _in_notebook() -> bool:
    """Running in a Jupyter kernel (not merely with IPython or ipykernel imported)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def watch(client: JobClient, graph: JobGraph, total: int | None) -> JobExecutionResult:
    """Wait for the job like ``client.wait()``, drawing its progress meanwhile."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    sources = {v.id for v in graph.sources}
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("records"),
        TextColumn("{task.fields[state]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=_console()) as bar:
        task = bar.add_task(graph.name, total=total, state="")
        while True:
            try:
                return client.wait(REFRESH_S)
            except TimeoutError:
                pass
            finally:
                _draw(bar, task, client, sources)


def _draw(bar: Any, task: Any, client: JobClient, sources: set[str]) -> None:
    read = sum(m["records_in"] for m in client.metrics() if m["task"].rsplit("/", 1)[0] in sources)
    checkpoints = sum(1 for c in client.checkpoints() if c["status"] == "COMPLETED")
    restarts = client.restarts()
    state = f"{checkpoints} checkpoint{'s' * (checkpoints != 1)}" + (
        f", {restarts} restart{'s' * (restarts != 1)}" if restarts else ""
    )
    bar.update(task, completed=read, state=state)

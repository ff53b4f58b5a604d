"""Killing a job's tasks at moments that prove something, through its client (Ray-free: on Ray and in-process alike)."""

from __future__ import annotations

import random
from typing import Any

from weir.runtime.errors import UnknownTaskError


def kill_each_after_checkpoints(
    client: Any, vertex: str, subtasks: tuple[int, ...] = (0, 1), checkpoints: int = 3
) -> None:
    """Kill each subtask of ``vertex`` in turn, each once ``checkpoints`` more
    checkpoints have completed: state was saved, and records came after it."""
    for subtask in subtasks:
        after = max([c["checkpoint_id"] for c in client.checkpoints()], default=0) + checkpoints
        client.wait_until(
            lambda c, after=after: any(
                s["status"] == "COMPLETED" and s["checkpoint_id"] >= after for s in c.checkpoints()
            ),
            300,
        )
        client.kill_task(vertex, subtask)


def kill_one_at_random(client: Any, rng: random.Random, vertex: str | None = None) -> str | None:
    """Kill one running task (of ``vertex`` if given), chosen by ``rng``; its name,
    or None when none runs (a restart is deploying them) or the one chosen
    finished before the kill reached it: a kill that killed nothing."""
    tasks = [t for t in client.tasks() if vertex is None or t.rsplit("/", 2)[-2] == vertex]
    if not tasks:
        return None
    task_vertex, subtask = rng.choice(tasks).rsplit("/", 2)[-2:]
    try:
        return client.kill_task(task_vertex, int(subtask))
    except UnknownTaskError:
        return None

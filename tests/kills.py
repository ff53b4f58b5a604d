"""Killing a local job's tasks at moments that prove something (Ray-free)."""

from __future__ import annotations

from typing import Any


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

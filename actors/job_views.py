"""What the web UI shows of a job, computed from what its clients already report:
plain functions over plain data (no Ray, no HTTP), tested by calling them.

Tasks report totals (records in and out, seconds backpressured and idle since
they started); rates are the difference between two reports over the time
between them, as Prometheus's ``rate()`` takes them from the same totals. A
task that restarted since the last report counts from zero again: it has no
rate until its next report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MetricsSample:
    """``client.metrics()`` as read at ``at`` (seconds, a monotonic clock)."""

    at: float
    tasks: list[dict[str, Any]]


def _rate(now: float | None, before: float | None, seconds: float) -> float | None:
    if now is None or before is None or now < before or seconds <= 0:
        return None
    return (now - before) / seconds


def task_rows(now: MetricsSample, before: MetricsSample | None) -> list[dict[str, Any]]:
    """Per task: its report, with rates per second since ``before`` (None on the
    first read) and the share of that time it was busy, backpressured and idle
    (Flink's busyTimeMsPerSecond and its two siblings, as fractions)."""
    earlier = {} if before is None else {t["task"]: t for t in before.tasks}
    seconds = 0.0 if before is None else now.at - before.at
    rows = []
    for t in sorted(now.tasks, key=lambda t: _task_key(t["task"])):
        prev = earlier.get(t["task"], {})
        vertex, subtask = _task_key(t["task"])
        backpressured = _rate(t.get("backpressured_s"), prev.get("backpressured_s"), seconds)
        idle = _rate(t.get("idle_s"), prev.get("idle_s"), seconds)
        if backpressured is not None and idle is not None:
            backpressured, idle = min(backpressured, 1.0), min(idle, 1.0 - min(backpressured, 1.0))
        rows.append(
            {
                **t,
                "vertex": vertex,
                "subtask": subtask,
                "in_per_s": _rate(t.get("records_in"), prev.get("records_in"), seconds),
                "out_per_s": _rate(t.get("records_out"), prev.get("records_out"), seconds),
                "backpressured": backpressured,
                "idle": idle,
                "busy": None if backpressured is None or idle is None else max(0.0, 1.0 - backpressured - idle),
            }
        )
    return rows


def _task_key(task: str) -> tuple[str, int]:
    vertex, _, subtask = task.rpartition("/")
    return vertex, int(subtask) if subtask.isdigit() else 0


def vertex_rows(tasks: list[dict[str, Any]], parallelism: dict[str, int]) -> list[dict[str, Any]]:
    """Per vertex, its subtasks together: rates and queued input summed, the
    highest busy and backpressured shares (the subtask that holds the others
    back, as Flink's UI shows the maximum), the lowest watermark."""
    out = []
    for vertex, p in parallelism.items():
        mine = [t for t in tasks if t["vertex"] == vertex]
        watermarks = [t["watermark"] for t in mine if t.get("watermark") is not None]
        out.append(
            {
                "vertex": vertex,
                "parallelism": p,
                "running": sum(t.get("state") == "RUNNING" for t in mine),
                "records_in": sum(t.get("records_in", 0) for t in mine),
                "records_out": sum(t.get("records_out", 0) for t in mine),
                "in_per_s": _total(mine, "in_per_s"),
                "out_per_s": _total(mine, "out_per_s"),
                "busy": _highest(mine, "busy"),
                "backpressured": _highest(mine, "backpressured"),
                "idle": _lowest(mine, "idle"),
                "watermark": min(watermarks) if watermarks else None,
                "queued": sum(t.get("queued", 0) for t in mine),
            }
        )
    return out


def _total(rows: list[dict[str, Any]], name: str) -> float | None:
    values = [r[name] for r in rows if r.get(name) is not None]
    return sum(values) if values else None


def _highest(rows: list[dict[str, Any]], name: str) -> float | None:
    values = [r[name] for r in rows if r.get(name) is not None]
    return max(values) if values else None


def _lowest(rows: list[dict[str, Any]], name: str) -> float | None:
    values = [r[name] for r in rows if r.get(name) is not None]
    return min(values) if values else None

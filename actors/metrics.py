"""weir's metrics in Ray's own metrics system (``ray.util.metrics``), so the Ray
dashboard and its Prometheus/Grafana set-up show them with no extra service.

Each slot reports its running task's counters, and each job coordinator its job's
checkpoints and restarts, once a second; Ray exports them (with the prefix
``ray_``) from every node's metrics agent, e.g. ``ray_weir_task_records_in_total``.
Counters are totals: rates are Prometheus's ``rate()``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from ray.util.metrics import Counter, Gauge

REPORT_EVERY_S = 1.0
log = logging.getLogger("weir.metrics")
_TASK = ("job", "vertex", "subtask")
_JOB = ("job",)


class _Counters:
    """Ray counters fed from totals that only grow (per run of a task), by delta."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, tuple[str, ...]], float] = {}

    def add(self, counter: Counter, name: str, tags: dict[str, str], total: float) -> None:
        key = (name, tuple(tags.values()))
        delta = total - self._last.get(key, 0.0)
        if delta < 0:  # a new attempt of the task counts from zero again
            delta = total
        if delta > 0:
            counter.inc(delta, tags=tags)
        self._last[key] = total


class TaskMetrics:
    def __init__(self) -> None:
        self.records_in = Counter("weir_task_records_in", "records a task took in", tag_keys=_TASK)
        self.records_out = Counter("weir_task_records_out", "records a task sent on", tag_keys=_TASK)
        self.backpressured = Counter(
            "weir_task_backpressured_seconds", "time a task waited for room downstream", tag_keys=_TASK
        )
        self.watermark = Gauge("weir_task_watermark_ms", "a task's event-time watermark", tag_keys=_TASK)
        self.watermark_lag = Gauge(
            "weir_task_watermark_lag_ms", "wall-clock time minus a task's watermark", tag_keys=_TASK
        )
        self._counters = _Counters()

    def report(self, job: str, vertex: str, subtask: int, m: dict[str, Any]) -> None:
        tags = {"job": job, "vertex": vertex, "subtask": str(subtask)}
        self._counters.add(self.records_in, "in", tags, m["records_in"])
        self._counters.add(self.records_out, "out", tags, m["records_out"])
        self._counters.add(self.backpressured, "bp", tags, m["backpressured_s"])
        if m.get("watermark") is not None:
            self.watermark.set(m["watermark"], tags=tags)
            self.watermark_lag.set(time.time() * 1000 - m["watermark"], tags=tags)


class JobMetrics:
    def __init__(self) -> None:
        self.restarts = Gauge("weir_job_restarts", "restarts of a job (region restarts included)", tag_keys=_JOB)
        self.checkpoints = Counter("weir_job_checkpoints_completed", "checkpoints a job completed", tag_keys=_JOB)
        self.checkpoint_duration = Gauge(
            "weir_job_last_checkpoint_duration_ms", "how long a job's last checkpoint took", tag_keys=_JOB
        )
        self.checkpoint_size = Gauge(
            "weir_job_last_checkpoint_size_bytes", "the state a job's last checkpoint wrote", tag_keys=_JOB
        )
        self._counters = _Counters()

    def report(self, job: str, restarts: int, completed: int, last: dict[str, Any] | None) -> None:
        tags = {"job": job}
        self.restarts.set(restarts, tags=tags)
        self._counters.add(self.checkpoints, "done", tags, completed)
        if last is not None:
            self.checkpoint_duration.set(last["duration_ms"], tags=tags)
            self.checkpoint_size.set(last["size_bytes"], tags=tags)


def report_every_second(report: Callable[[], None], name: str) -> None:
    """Call ``report`` once a second on a daemon thread, for the process's life."""

    def loop() -> None:
        while True:
            time.sleep(REPORT_EVERY_S)
            try:
                report()
            except Exception:  # a metric that fails must never touch the job
                log.debug("reporting metrics failed", exc_info=True)

    threading.Thread(target=loop, name=name, daemon=True).start()

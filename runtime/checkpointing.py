"""The checkpoint coordinator's bookkeeping: plans, pending checkpoints, acks,
completion and aborts. Sans-IO: the job master calls it and carries out what it
returns; time comes in as arguments.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import CheckpointFailureReason
from runtime.graph import JobGraph
from runtime.storage import StateHandle, handle_to_json

TaskKey = tuple[str, int]  # (vertex id, subtask)


def task_name(key: TaskKey) -> str:
    return f"{key[0]}/{key[1]}"


class AckResult(enum.Enum):
    SUCCESS = "success"
    DUPLICATE = "duplicate"      # this task already acknowledged
    UNKNOWN = "unknown"          # no such pending checkpoint (aborted, or never was)
    DISCARDED = "discarded"      # the task was not asked to acknowledge


@dataclass(frozen=True)
class CheckpointPlan:
    to_trigger: list[TaskKey]
    to_ack: set[TaskKey]
    finished: set[TaskKey]


def plan_checkpoint(graph: JobGraph, exited: set[TaskKey]) -> CheckpointPlan:
    """Trigger running tasks with no running predecessor (a pointwise edge needs its
    own producer exited, an all-to-all edge every producer); wait for every running
    task; record exited tasks as finished (FLIP-147)."""
    running = {k for k in graph.task_names() if k not in exited}
    to_trigger = []
    for key in graph.task_names():
        if key in exited:
            continue
        vertex = graph.vertices[key[0]]
        producers: list[TaskKey] = []
        for e in vertex.inputs:
            src = graph.vertices[e.source]
            producers += [(src.id, key[1])] if e.pointwise else [(src.id, j) for j in range(src.parallelism)]
        if all(p in exited for p in producers):
            to_trigger.append(key)
    return CheckpointPlan(to_trigger, running, set(exited))


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    timestamp_ms: int
    started: float
    plan: CheckpointPlan
    acks: dict[TaskKey, tuple[StateHandle, list[str]]] = field(default_factory=dict)

    @property
    def not_yet_acknowledged(self) -> set[TaskKey]:
        return self.plan.to_ack - self.acks.keys()


@dataclass
class CheckpointStats:
    checkpoint_id: int
    status: str  # PENDING | COMPLETED | ABORTED
    started_ms: int
    duration_ms: int | None = None
    size_bytes: int = 0
    reason: str = ""
    location: str = ""
    discarded: bool = False  # a completed checkpoint dropped beyond the retained count


class CheckpointCoordinator:
    def __init__(self, graph: JobGraph) -> None:
        self.graph = graph
        self.config = graph.checkpointing
        self.next_id = 1
        self.pending: dict[int, PendingCheckpoint] = {}
        self.history: dict[int, CheckpointStats] = {}
        self.last_trigger: float | None = None
        self.last_completion: float | None = None
        self.consecutive_failures = 0

    def due(self, now: float) -> bool:
        c = self.config
        if c.interval_ms is None or len(self.pending) >= c.max_concurrent:
            return False
        if self.last_trigger is not None and now - self.last_trigger < c.interval_ms / 1000:
            return False
        return self.last_completion is None or now - self.last_completion >= c.min_pause_ms / 1000

    def start(self, plan: CheckpointPlan, now: float) -> PendingCheckpoint:
        cid = self.next_id
        self.next_id += 1
        p = PendingCheckpoint(cid, int(time.time() * 1000), now, plan)
        self.pending[cid] = p
        self.history[cid] = CheckpointStats(cid, "PENDING", p.timestamp_ms)
        self.last_trigger = now
        return p

    def acknowledge(self, checkpoint_id: int, task: TaskKey, handle: StateHandle, finished_operators: list[str]) -> AckResult:
        p = self.pending.get(checkpoint_id)
        if p is None:
            return AckResult.UNKNOWN
        if task not in p.plan.to_ack:
            return AckResult.DISCARDED
        if task in p.acks:
            return AckResult.DUPLICATE
        p.acks[task] = (handle, finished_operators)
        return AckResult.SUCCESS

    def is_complete(self, checkpoint_id: int) -> bool:
        p = self.pending.get(checkpoint_id)
        return p is not None and not p.not_yet_acknowledged

    def metadata(self, checkpoint_id: int, exited: set[TaskKey]) -> dict[str, Any]:
        """The ``_metadata`` of a fully acknowledged checkpoint: per operator, the
        state file of each subtask (None for a subtask that had exited), and whether
        every subtask had finished (fully finished operators do not run again)."""
        p = self.pending[checkpoint_id]
        operators: dict[str, Any] = {}
        for v in self.graph.vertices.values():
            for spec in v.operators:
                handles: list[dict[str, Any] | None] = []
                finished = 0
                for i in range(v.parallelism):
                    key = (v.id, i)
                    if key in p.acks:
                        handle, fin = p.acks[key]
                        handles.append(handle_to_json(handle))
                        finished += spec.uid in fin
                    else:
                        handles.append(None)
                        finished += key in exited or key in p.plan.finished
                operators[spec.uid] = {
                    "vertex": v.id,
                    "name": spec.name,
                    "parallelism": v.parallelism,
                    "max_parallelism": v.max_parallelism,
                    "fully_finished": finished == v.parallelism,
                    "handles": handles,
                }
        return {
            "format": 1,
            "job": self.graph.name,
            "checkpoint_id": checkpoint_id,
            "timestamp_ms": p.timestamp_ms,
            "operators": operators,
            "size_bytes": sum(h.size for h, _ in p.acks.values()),
        }

    def complete(self, checkpoint_id: int, now: float, location: str) -> PendingCheckpoint:
        p = self.pending.pop(checkpoint_id)
        st = self.history[checkpoint_id]
        st.status, st.duration_ms = "COMPLETED", int((now - p.started) * 1000)
        st.size_bytes = sum(h.size for h, _ in p.acks.values())
        st.location = location
        self.last_completion = now
        self.consecutive_failures = 0
        # Older pending checkpoints are subsumed by a newer completed one.
        for older in [cid for cid in self.pending if cid < checkpoint_id]:
            self.abort(older, CheckpointFailureReason.DECLINED_SUBSUMED, "a newer checkpoint completed")
        return p

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str = "") -> PendingCheckpoint | None:
        p = self.pending.pop(checkpoint_id, None)
        if p is None:
            return None
        st = self.history[checkpoint_id]
        st.status = "ABORTED"
        st.reason = reason.message + (f" ({detail})" if detail else "")
        if reason not in (CheckpointFailureReason.DECLINED_SUBSUMED, CheckpointFailureReason.JOB_STOPPING):
            self.consecutive_failures += 1
        return p

    def expired(self, now: float) -> list[int]:
        limit = self.config.timeout_ms / 1000
        return [cid for cid, p in self.pending.items() if now - p.started > limit]

    def waiting_on(self, task: TaskKey) -> list[int]:
        """Pending checkpoints that still need ``task``'s acknowledgement."""
        return [cid for cid, p in self.pending.items() if task in p.not_yet_acknowledged]

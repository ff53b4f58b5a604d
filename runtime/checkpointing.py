"""The checkpoint coordinator's bookkeeping: plans, pending checkpoints, acks,
completion and aborts. Sans-IO: the job master calls it and carries out what it
returns; time comes in as arguments.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from runtime.task import OperatorRestore

from runtime.errors import CheckpointFailureReason, InvalidJobGraphError
from runtime.events import CheckpointKind
from runtime.graph import JobGraph
from runtime.state import SnapshotSummary
from runtime.storage import StateHandle, handle_from_json, handle_to_json

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
        if all(p in exited for p in graph.producers(key)):
            to_trigger.append(key)
    return CheckpointPlan(to_trigger, running, set(exited))


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    timestamp_ms: int
    started: float
    plan: CheckpointPlan
    kind: CheckpointKind
    location: str
    acks: dict[TaskKey, tuple[StateHandle, dict[str, SnapshotSummary]]] = field(default_factory=dict)
    coordinator_states: dict[str, bytes] = field(default_factory=dict)  # operator uid -> pickled, taken before the trigger

    @property
    def not_yet_acknowledged(self) -> set[TaskKey]:
        return self.plan.to_ack - self.acks.keys()


@dataclass
class CheckpointStats:
    checkpoint_id: int
    status: str  # PENDING | COMPLETED | ABORTED
    started_ms: int
    kind: str = "checkpoint"  # or savepoint
    duration_ms: int | None = None
    size_bytes: int = 0
    reason: str = ""
    location: str = ""
    discarded: bool = False  # a completed checkpoint dropped beyond the retained count


class CheckpointCoordinator:
    # Ended checkpoints kept in ``history`` (``weir checkpoints``), besides the
    # pending ones and the retained completed ones the job master discards later:
    # a job that runs for months must not grow with every checkpoint.
    HISTORY_LIMIT = 100

    def __init__(self, graph: JobGraph) -> None:
        self.graph = graph
        self.config = graph.checkpointing
        self.next_id = 1
        self.pending: dict[int, PendingCheckpoint] = {}
        self.history: dict[int, CheckpointStats] = {}
        self.completed = 0  # all completed so far, history or not
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

    def start(self, plan: CheckpointPlan, now: float, location: Callable[[int], str], kind: CheckpointKind = CheckpointKind.CHECKPOINT) -> PendingCheckpoint:
        """A new pending checkpoint; ``location(id)`` says where it is written."""
        cid = self.next_id
        self.next_id += 1
        p = PendingCheckpoint(cid, int(time.time() * 1000), now, plan, kind, location(cid))
        self.pending[cid] = p
        self.history[cid] = CheckpointStats(cid, "PENDING", p.timestamp_ms, kind.value, location=p.location)
        if kind is CheckpointKind.CHECKPOINT:
            self.last_trigger = now
        return p

    def acknowledge(self, checkpoint_id: int, task: TaskKey, handle: StateHandle, operators: dict[str, SnapshotSummary]) -> AckResult:
        p = self.pending.get(checkpoint_id)
        if p is None:
            return AckResult.UNKNOWN
        if task not in p.plan.to_ack:
            return AckResult.DISCARDED
        if task in p.acks:
            return AckResult.DUPLICATE
        p.acks[task] = (handle, operators)
        return AckResult.SUCCESS

    def is_complete(self, checkpoint_id: int) -> bool:
        p = self.pending.get(checkpoint_id)
        return p is not None and not p.not_yet_acknowledged

    def metadata(self, checkpoint_id: int, exited: set[TaskKey]) -> dict[str, Any]:
        """The ``_metadata`` of a fully acknowledged checkpoint: per operator, the
        state file of each subtask (None for a subtask that had exited), and whether
        it fully finished, so that it does not run again after a restore: every
        subtask had exited, or was restored fully finished itself. As in Flink, a
        subtask that ran ``finish()`` but still runs does not count: a drained stop
        takes its savepoint then, and a restore from it reads on from the sources'
        positions."""
        p = self.pending[checkpoint_id]
        operators: dict[str, Any] = {}
        for v in self.graph.vertices.values():
            for spec in v.operators:
                handles: list[dict[str, Any] | None] = []
                finished = 0
                has_state = False
                for i in range(v.parallelism):
                    key = (v.id, i)
                    if key in p.acks:
                        handle, summaries = p.acks[key]
                        summary = summaries.get(spec.uid)
                        handles.append(handle_to_json(handle))
                        finished += summary is not None and summary.finished_on_restore
                        has_state |= summary is not None and summary.has_state
                    else:
                        handles.append(None)
                        finished += key in exited or key in p.plan.finished
                operators[spec.uid] = {
                    "vertex": v.id,
                    "name": spec.name,
                    "parallelism": v.parallelism,
                    "max_parallelism": v.max_parallelism,
                    "fully_finished": finished == v.parallelism,
                    "has_state": has_state,
                    "handles": handles,
                }
        return {
            "format": 1,
            "job": self.graph.name,
            "kind": p.kind.value,
            "checkpoint_id": checkpoint_id,
            "timestamp_ms": p.timestamp_ms,
            "operators": operators,
            "size_bytes": sum(h.size for h, _ in p.acks.values()),
        }

    def union_state_partially_finished(self, checkpoint_id: int, exited: set[TaskKey]) -> str | None:
        """The name of an operator with union list state of which some subtasks
        finished and others run: such a checkpoint is declined, since restoring
        union state from part of the subtasks would lose the rest."""
        p = self.pending[checkpoint_id]
        for v in self.graph.vertices.values():
            for spec in v.operators:
                subtasks = [p.acks.get((v.id, i), (None, {}))[1].get(spec.uid) for i in range(v.parallelism)]
                if not any(s is not None and s.has_union_state for s in subtasks):
                    continue
                done = [(v.id, i) in exited or (s is not None and s.finished) for i, s in enumerate(subtasks)]
                if any(done) and not all(done):
                    return spec.name
        return None

    def complete(self, checkpoint_id: int, now: float) -> PendingCheckpoint:
        p = self.pending.pop(checkpoint_id)
        st = self.history[checkpoint_id]
        st.status, st.duration_ms = "COMPLETED", int((now - p.started) * 1000)
        st.size_bytes = sum(h.size for h, _ in p.acks.values())
        self.last_completion = now
        self.consecutive_failures = 0
        self.completed += 1
        # Older pending checkpoints are subsumed by a newer completed one.
        for older in [cid for cid in self.pending if cid < checkpoint_id]:
            self.abort(older, CheckpointFailureReason.DECLINED_SUBSUMED, "a newer checkpoint completed")
        self._trim_history()
        return p

    def _trim_history(self) -> None:
        """Forget the oldest ended checkpoints beyond ``HISTORY_LIMIT``; a pending one
        or a completed checkpoint still on storage (its discard needs its location)
        stays."""
        ended = [
            cid for cid, st in self.history.items()
            if st.status != "PENDING" and not (st.status == "COMPLETED" and st.kind == CheckpointKind.CHECKPOINT.value and not st.discarded)
        ]
        for cid in sorted(ended)[: max(0, len(ended) - self.HISTORY_LIMIT)]:
            del self.history[cid]

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str = "") -> PendingCheckpoint | None:
        p = self.pending.pop(checkpoint_id, None)
        if p is None:
            return None
        st = self.history[checkpoint_id]
        st.status = "ABORTED"
        st.reason = reason.message + (f" ({detail})" if detail else "")
        self._trim_history()
        if reason not in (
            CheckpointFailureReason.DECLINED_SUBSUMED,
            CheckpointFailureReason.JOB_STOPPING,
            CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK,  # not a failure: the next plan skips the task
            CheckpointFailureReason.TASK_FAILURE,  # the restart strategy counts that one
        ):
            self.consecutive_failures += 1
        return p

    def expired(self, now: float) -> list[int]:
        limit = self.config.timeout_ms / 1000
        return [cid for cid, p in self.pending.items() if now - p.started > limit]

    def waiting_on(self, task: TaskKey) -> list[int]:
        """Pending checkpoints that still need ``task``'s acknowledgement."""
        return [cid for cid, p in self.pending.items() if task in p.not_yet_acknowledged]


def restore_plan(metadata: dict[str, Any], graph: JobGraph, allow_non_restored_state: bool) -> dict[str, "OperatorRestore"]:
    """Match a checkpoint's or savepoint's operator state to this job's operators by
    uid. Parallelism may differ (key groups move, list state splits evenly); max
    parallelism may not. State of a uid the job does not have is an error unless
    ``allow_non_restored_state``."""
    from runtime.task import OperatorRestore

    in_job = {op.uid: v for v in graph.vertices.values() for op in v.operators}
    plan: dict[str, OperatorRestore] = {}
    for uid, op in metadata["operators"].items():
        vertex = in_job.get(uid)
        if vertex is None:
            if op.get("has_state", True) and not allow_non_restored_state:
                raise InvalidJobGraphError(
                    f"the snapshot holds state of operator '{op['name']}' (uid '{uid}'), which this job does not have; "
                    "give that operator the same uid(), or drop its state with allow_non_restored_state=True"
                )
            continue
        if op["max_parallelism"] != vertex.max_parallelism:
            raise InvalidJobGraphError(
                f"operator '{op['name']}' (uid '{uid}') was snapshotted with max parallelism {op['max_parallelism']} "
                f"but has {vertex.max_parallelism} now; max parallelism fixes the key groups and cannot change"
            )
        handles = [handle_from_json(h) if h is not None else None for h in op["handles"]]
        plan[uid] = OperatorRestore(handles, op["fully_finished"])
    _refuse_input_to_finished(plan, graph)
    return plan


def _refuse_input_to_finished(plan: dict[str, "OperatorRestore"], graph: JobGraph) -> None:
    """FLIP-147: a fully finished operator never runs again, so every operator
    feeding it must have fully finished too (a new or unfinished one in front of
    it would send it records)."""
    names = {op.uid: op.name for v in graph.vertices.values() for op in v.operators}
    for v in graph.vertices.values():
        for k, op in enumerate(v.operators):
            if not (op.uid in plan and plan[op.uid].fully_finished):
                continue
            feeding = [v.operators[k - 1].uid] if k else [
                e.source_operator or graph.vertices[e.source].operators[-1].uid for e in v.inputs
            ]
            for uid in feeding:
                if not (uid in plan and plan[uid].fully_finished):
                    raise InvalidJobGraphError(
                        f"operator '{op.name}' (uid '{op.uid}') had fully finished in the snapshot, but operator "
                        f"'{names[uid]}' (uid '{uid}') in front of it {'had not' if uid in plan else 'is new and has not'}; "
                        "a fully finished operator gets no input again, so what feeds it must have finished too"
                    )

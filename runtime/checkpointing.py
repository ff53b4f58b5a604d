"""The checkpoint coordinator's bookkeeping: plans, pending checkpoints, acks,
completion and aborts. Sans-IO: the job master calls it and carries out what it
returns; time comes in as arguments.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.events import CheckpointKind
from weir.runtime.graph import JobGraph, JobVertex
from weir.runtime.state import SnapshotSummary
from weir.runtime.storage import StateHandle, handle_to_json

TaskKey = tuple[str, int]  # (vertex id, subtask)


def task_name(key: TaskKey) -> str:
    return f"{key[0]}/{key[1]}"


class AckResult(enum.Enum):
    SUCCESS = "success"
    DUPLICATE = "duplicate"  # this task already acknowledged
    UNKNOWN = "unknown"  # no such pending checkpoint (aborted, or never was)
    DISCARDED = "discarded"  # the task was not asked to acknowledge


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
    base: int | None = None  # the completed checkpoint its tasks may write changes against
    acks: dict[TaskKey, tuple[StateHandle, dict[str, SnapshotSummary]]] = field(default_factory=dict)
    coordinator_states: dict[str, bytes] = field(
        default_factory=dict
    )  # operator uid -> pickled, taken before the trigger

    @property
    def not_yet_acknowledged(self) -> set[TaskKey]:
        return self.plan.to_ack - self.acks.keys()


class CheckpointStatus(enum.Enum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"


@dataclass
class CheckpointStats:
    """One checkpoint or savepoint in ``weir checkpoints`` (``JobClient.checkpoints()``
    shows it as a dict, ``status`` by its value)."""

    checkpoint_id: int
    status: CheckpointStatus
    started_ms: int
    kind: str = "checkpoint"  # or savepoint
    duration_ms: int | None = None
    size_bytes: int = 0  # written by this checkpoint
    full_size_bytes: int = 0  # every file it names, those of earlier checkpoints it builds on too
    reason: str = ""
    location: str = ""
    discarded: bool = False  # a completed checkpoint dropped beyond the retained count
    # Per acknowledged subtask ("vertex/subtask"): {"ack_ms": trigger to its acknowledgement,
    # "alignment_ms": its inputs' barriers' first to last, "size_bytes": what it wrote,
    # "full_size_bytes": every file it names}. Replaced, never
    # changed in place: clients read it from other threads.
    subtasks: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def is_retained(self) -> bool:
        """A completed checkpoint (not a savepoint) still on storage."""
        return (
            self.status is CheckpointStatus.COMPLETED
            and self.kind == CheckpointKind.CHECKPOINT.value
            and not self.discarded
        )


# Aborts that are no failure: a newer checkpoint took over, the job is stopping,
# the next plan skips a task that finished, or the restart strategy counts it.
NOT_FAILURES = frozenset(
    {
        CheckpointFailureReason.DECLINED_SUBSUMED,
        CheckpointFailureReason.JOB_STOPPING,
        CheckpointFailureReason.TASK_FINISHED_BEFORE_ACK,
        CheckpointFailureReason.TASK_FAILURE,
    }
)
STORAGE_FAILURES = frozenset(
    {
        CheckpointFailureReason.STORAGE_FAILURE,
        CheckpointFailureReason.DECLINED_STORAGE_FAILED,
    }
)
# Storage failures in a row a job survives when no tolerable number is set: a
# full or read-only store must fail the job, not loop on its final checkpoint.
DEFAULT_TOLERABLE_STORAGE_FAILURES = 10


@dataclass(frozen=True)
class FailedCheckpoints:
    """Checkpoints that failed in a row since the last one completed, and when the
    next may begin. A frozen value: each event returns the next one (sans-IO, time
    comes in as an argument).

    After the n-th failure in a row the next checkpoint, periodic or a bounded
    job's final one, waits ``base * 2 ** (n - 1)`` seconds, ``base`` being the
    checkpoint interval (``RETRY_BASE_S`` without one), capped at
    ``MAX_RETRY_DELAY_S`` (or the interval, if longer): a failing store is not
    hammered many times a second. Failures of any kind count in ``failed``;
    those of checkpoint storage (a task's state file, the metadata) also in
    ``storage_failed``, which a failure of another kind does not reset."""

    RETRY_BASE_S: ClassVar[float] = 0.1
    MAX_RETRY_DELAY_S: ClassVar[float] = 10.0

    failed: int = 0
    storage_failed: int = 0
    retry_at: float = -math.inf

    def aborted(self, reason: CheckpointFailureReason, now: float, interval_s: float | None) -> "FailedCheckpoints":
        """After a checkpoint aborted at ``now`` for ``reason``."""
        if reason in NOT_FAILURES:
            return self
        failed = self.failed + 1
        base = interval_s or self.RETRY_BASE_S
        delay = min(base * 2.0 ** min(failed - 1, 64), max(base, self.MAX_RETRY_DELAY_S))
        return FailedCheckpoints(failed, self.storage_failed + (reason in STORAGE_FAILURES), now + delay)

    def beyond(self, tolerable: int | None) -> str | None:
        """Why the job must fail, for its error, or None while it may go on: more
        failures in a row than ``tolerable`` (Flink's tolerable checkpoint failure
        number), or, with none set, more storage failures in a row than
        ``DEFAULT_TOLERABLE_STORAGE_FAILURES``."""
        if tolerable is not None:
            return (
                None
                if self.failed <= tolerable
                else f"{self.failed} checkpoints failed in a row (tolerable: {tolerable})"
            )
        if self.storage_failed > DEFAULT_TOLERABLE_STORAGE_FAILURES:
            return (
                f"{self.storage_failed} checkpoints failed in a row writing to it (tolerable: "
                f"{DEFAULT_TOLERABLE_STORAGE_FAILURES} unless set_tolerable_checkpoint_failure_number says otherwise)"
            )
        return None


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
        self.failures = FailedCheckpoints()
        self._last_named: set[str] = set()  # the files the latest completed checkpoint names

    def continue_from(self, next_id: int) -> None:
        """The run's earlier job master took checkpoints up to ``next_id - 1``: ids are never reused."""
        self.next_id = next_id

    def first_due_after(self, now: float) -> None:
        """The job's first deploy: the first checkpoint comes one interval after it, as in Flink."""
        if self.last_trigger is None:
            self.last_trigger = now

    def rescaled(self, graph: JobGraph) -> None:
        """Checkpoints from now on are of the rescaled ``graph``."""
        self.graph = graph

    def due(self, now: float) -> bool:
        """A periodic checkpoint is due at ``now``."""
        c = self.config
        if c.interval_ms is None or len(self.pending) >= c.max_concurrent or not self.may_retry(now):
            return False
        if self.last_trigger is not None and now - self.last_trigger < c.interval_ms / 1000:
            return False
        return self.last_completion is None or now - self.last_completion >= c.min_pause_ms / 1000

    def may_retry(self, now: float) -> bool:
        """The backoff after failed checkpoints has passed (see :class:`FailedCheckpoints`)."""
        return now >= self.failures.retry_at

    def start(
        self,
        plan: CheckpointPlan,
        now: float,
        location: Callable[[int], str],
        kind: CheckpointKind = CheckpointKind.CHECKPOINT,
        base: int | None = None,
    ) -> PendingCheckpoint:
        """A new pending checkpoint; ``location(id)`` says where it is written."""
        cid = self.next_id
        self.next_id += 1
        p = PendingCheckpoint(cid, int(time.time() * 1000), now, plan, kind, location(cid), base)
        self.pending[cid] = p
        self.history[cid] = CheckpointStats(
            cid, CheckpointStatus.PENDING, p.timestamp_ms, kind.value, location=p.location
        )
        if kind is CheckpointKind.CHECKPOINT:
            self.last_trigger = now
        return p

    def acknowledge(
        self,
        checkpoint_id: int,
        task: TaskKey,
        handle: StateHandle,
        operators: dict[str, SnapshotSummary],
        now: float,
        alignment_ms: int = 0,
    ) -> AckResult:
        """``task``'s acknowledgement of a checkpoint, heard at ``now`` (its barriers
        aligned in ``alignment_ms``)."""
        p = self.pending.get(checkpoint_id)
        if p is None:
            return AckResult.UNKNOWN
        if task not in p.plan.to_ack:
            return AckResult.DISCARDED
        if task in p.acks:
            return AckResult.DUPLICATE
        p.acks[task] = (handle, operators)
        named = {uri: size for link in handle.chain for uri, size in link.sizes.items()}
        st = self.history[checkpoint_id]
        st.subtasks = {
            **st.subtasks,
            task_name(task): {
                "ack_ms": int((now - p.started) * 1000),
                "alignment_ms": alignment_ms,
                "size_bytes": sum(size for uri, size in named.items() if uri not in self._last_named),
                "full_size_bytes": sum(named.values()),
            },
        }
        return AckResult.SUCCESS

    def is_complete(self, checkpoint_id: int) -> bool:
        p = self.pending.get(checkpoint_id)
        return p is not None and not p.not_yet_acknowledged

    def metadata(self, checkpoint_id: int, exited: set[TaskKey], stops: bool = False) -> dict[str, Any]:
        """The ``_metadata`` of a fully acknowledged checkpoint: per operator, the
        state file of each subtask (None for a subtask that had exited), and whether
        it fully finished, so that it does not run again after a restore: every
        subtask had exited, ran ``finish()`` before its snapshot, or was restored
        fully finished itself. A subtask that ran ``finish()`` emitted what it held
        (a batch reduce its final values), and its sink pre-committed them in this
        snapshot: running ``finish()`` again after a restore would emit them twice.
        A drained stop's own snapshot (``stops``) is the exception: the stop, not
        the end of the input, finished the tasks, and a restore from it reads on
        from the sources' positions (Flink's stop-with-savepoint ``--drain``)."""
        p = self.pending[checkpoint_id]
        operators = {
            spec.uid: _operator_entry(v, spec.uid, spec.name, p, exited, not stops)
            for v in self.graph.vertices.values()
            for spec in v.operators
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
        st.status, st.duration_ms = CheckpointStatus.COMPLETED, int((now - p.started) * 1000)
        named = {uri: size for h, _ in p.acks.values() for link in h.chain for uri, size in link.sizes.items()}
        st.full_size_bytes = sum(named.values())
        st.size_bytes = sum(size for uri, size in named.items() if uri not in self._last_named)
        if p.kind is CheckpointKind.CHECKPOINT:
            self._last_named = set(named)
        self.last_completion = now
        self.failures = FailedCheckpoints()
        self.completed += 1
        # Older pending checkpoints are subsumed by a newer completed one.
        for older in [cid for cid in self.pending if cid < checkpoint_id]:
            self.abort(older, CheckpointFailureReason.DECLINED_SUBSUMED, now, "a newer checkpoint completed")
        self._trim_history()
        return p

    def _trim_history(self) -> None:
        """Forget the oldest ended checkpoints beyond ``HISTORY_LIMIT``; a pending one
        or a completed checkpoint still on storage (its discard needs its location)
        stays."""
        ended = [
            cid for cid, st in self.history.items() if st.status is not CheckpointStatus.PENDING and not st.is_retained
        ]
        for cid in sorted(ended)[: max(0, len(ended) - self.HISTORY_LIMIT)]:
            del self.history[cid]

    def abort(
        self, checkpoint_id: int, reason: CheckpointFailureReason, now: float, detail: str = ""
    ) -> PendingCheckpoint | None:
        """End a pending checkpoint as aborted at ``now``; a failure counts (see
        :class:`FailedCheckpoints`). None: it was not pending."""
        p = self.pending.pop(checkpoint_id, None)
        if p is None:
            return None
        st = self.history[checkpoint_id]
        st.status = CheckpointStatus.ABORTED
        st.reason = reason.message + (f" ({detail})" if detail else "")
        self._trim_history()
        interval_s = None if self.config.interval_ms is None else self.config.interval_ms / 1000
        self.failures = self.failures.aborted(reason, now, interval_s)
        return p

    def recovered(self, location: str, metadata: dict[str, Any]) -> None:
        """A completed checkpoint of this run that a job master before this one
        wrote: it counts towards the retained ones, and is discarded like them."""
        cid = metadata["checkpoint_id"]
        self.history[cid] = CheckpointStats(
            cid,
            CheckpointStatus.COMPLETED,
            metadata.get("timestamp_ms", 0),
            metadata.get("kind", CheckpointKind.CHECKPOINT.value),
            full_size_bytes=metadata.get("size_bytes", 0),
            location=location,
        )

    def discard_beyond(self, retained: int) -> list[tuple[int, str]]:
        """Mark all but the newest ``retained`` completed checkpoints discarded and
        return their ids and locations, for the caller to delete; savepoints belong
        to the user and are never discarded."""
        completed = sorted(cid for cid, s in self.history.items() if s.is_retained)
        for cid in completed[:-retained]:
            self.history[cid].discarded = True
        return [(cid, self.history[cid].location) for cid in completed[:-retained]]

    def expired(self, now: float) -> list[int]:
        limit = self.config.timeout_ms / 1000
        return [cid for cid, p in self.pending.items() if now - p.started > limit]

    def stats(self) -> list[dict[str, Any]]:
        """Every checkpoint in the history, oldest first, as clients read them."""
        return [
            {**vars(s), "status": s.status.value} for s in sorted(self.history.values(), key=lambda s: s.checkpoint_id)
        ]

    def waiting_on(self, task: TaskKey) -> list[int]:
        """Pending checkpoints that still need ``task``'s acknowledgement."""
        return [cid for cid, p in self.pending.items() if task in p.not_yet_acknowledged]


def _operator_entry(
    v: JobVertex, uid: str, name: str, p: PendingCheckpoint, exited: set[TaskKey], finish_ends: bool
) -> dict[str, Any]:
    """One operator's entry in a checkpoint's metadata (see :meth:`CheckpointCoordinator.metadata`)."""
    handles: list[dict[str, Any] | None] = []
    finished = 0
    has_state = operator_state = False
    for i in range(v.parallelism):
        key = (v.id, i)
        if key in p.acks:
            handle, summaries = p.acks[key]
            summary = summaries.get(uid)
            handles.append(handle_to_json(handle))
            finished += summary is not None and (summary.finished_on_restore or (finish_ends and summary.finished))
            has_state |= summary is not None and summary.has_state
            operator_state |= summary is not None and summary.has_operator_state
        else:
            handles.append(None)
            finished += key in exited or key in p.plan.finished
    return {
        "vertex": v.id,
        "name": name,
        "parallelism": v.parallelism,
        "max_parallelism": v.max_parallelism,
        "fully_finished": finished == v.parallelism,
        "has_state": has_state,
        "operator_state": operator_state,
        "handles": handles,
    }

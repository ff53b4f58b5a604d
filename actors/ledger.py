"""The slot pool's bookkeeping, without Ray: the processes it holds and whose code
each has run, the jobs running under each name and output, and what to start or
retire next. :class:`weir.actors.pool.SlotPool` is its Ray shell: it calls these
methods under its lock and carries out what they return. Time comes in as an
argument, so the rules are tested by calling them.

The rules:

- **A process that ran one application's code never runs another's.** An
  application is one driver process (a notebook's kernel, a ``weir run``, a
  ``ray job submit`` entrypoint), known by its Ray job id; a job's operators,
  its coordinator's copy of the job graph and everything they import run in
  that application's processes only. A *fresh* process (one that never ran a
  job) may go to any application. Once leased it belongs to that application
  for its life: it serves the application's later jobs (reset in between, see
  :class:`weir.actors.slots.JobScope`) and retires once the application has ended
  and its jobs are done. Spark draws the same line around an application's
  executors.
- **One name, one running job; one exclusive output, one running job.** A
  FileSink's folder or a Kafka transactional-id prefix (``Sink.exclusive_location``)
  belongs to the job that writes it while that job runs. :meth:`PoolLedger.reserve`
  is the compare-and-set that enforces both, for every driver of the cluster.
"""

from __future__ import annotations

import collections
import enum
import json
import os
from dataclasses import dataclass, field
from typing import Any

from weir.runtime.job_lifecycle import JobLifecycle


@dataclass(frozen=True)
class Application:
    """The driver process that submits jobs. ``alive`` holds a Ray object the
    driver owns: Ray loses it when the driver exits, which is how the pool learns
    that the application has ended."""

    id: str  # the driver's Ray job id
    where: str  # its host and process id, for messages
    alive: Any = field(default=None, compare=False, repr=False)


@dataclass
class JobAssignment:
    """What a job coordinator runs, kept by the pool so that a standby
    coordinator can take the job over. The job graph travels pickled: the pool
    serves every application and never loads one's code; only the job's own
    coordinator unpickles it."""

    name: str
    run_id: str
    graph: bytes  # the pickled weir.runtime.graph.JobGraph
    app: Application
    outputs: dict[str, str]  # exclusive output -> the sink operator writing it
    linger_s: float
    faults: dict[str, str]  # WEIR_FAULT* of the submitter (weir's own failure tests)
    submitted_at: float = 0.0  # wall-clock time, for messages
    slots: list[tuple["Shape", int]] = field(default_factory=list)  # how many slots of each shape its tasks take
    rescales: list[dict[str, int]] = field(default_factory=list)  # completed rescales, in order: a restart keeps them
    incarnation: int = 0  # how often another coordinator took the job over
    # The exception history of its earlier incarnations, newest first, each
    # ending with the death of its coordinator: a successor lists it under its own.
    history: list[dict[str, Any]] = field(default_factory=list)
    # Its coordinator accepted it (``start`` returned). Until then its submitter,
    # not the pool, answers for it: a coordinator that dies with the start on
    # its way is replaced by the submitter's retry.
    started: bool = False


@dataclass(frozen=True)
class Shape:
    """What a task actor is created with: Ray options and a runtime env."""

    options: dict[str, Any]
    runtime_env: dict[str, Any]

    @property
    def key(self) -> str:
        return json.dumps([self.options, self.runtime_env], sort_keys=True, default=str)

    @property
    def cpus(self) -> float:
        return float(self.options.get("num_cpus", 1))


class SlotState(enum.Enum):
    STARTING = "starting"  # its process starts
    FRESH = "fresh"  # up, and has run no application's code: any application may lease it
    IDLE = "idle"  # has run an application's code and waits for that application's next job
    LEASED = "leased"  # runs a job's task, or waits for the job's next attempt


@dataclass
class SlotEntry:
    shape: str
    app: str | None = None  # the application whose code it has run; None: fresh
    job: str | None = None  # leased to this job
    node_id: str = ""  # "" while its process starts
    idle_since: float = 0.0  # when a job gave it back (0: it never ran a task)

    @property
    def state(self) -> SlotState:
        if self.job is not None:
            return SlotState.LEASED
        if self.app is not None:
            return SlotState.IDLE
        return SlotState.FRESH if self.node_id else SlotState.STARTING


@dataclass
class CoordinatorEntry:
    env: str
    app: str | None = None
    job: str | None = None  # the job it runs now
    retiring: bool = False  # it takes no new job: its application ended, or it stayed idle too long
    up: bool = False  # its process has started
    idle_since: float = 0.0  # when its last job ended


@dataclass
class JobEntry:
    assignment: JobAssignment
    coordinator: str
    ended: bool = False
    accepted: bool = False  # the coordinator's start returned: it answers for the job
    reported: list[dict[str, Any]] = field(default_factory=list)  # its incarnation's exceptions, as last reported


@dataclass(frozen=True)
class Conflict:
    """Why a job cannot start now: ``job`` runs under its name, or writes an output
    (``location``, by its sink ``operator``) that the new job would write too."""

    job: str
    run_id: str
    where: str
    submitted_at: float
    coordinator: str
    location: str | None = None
    operator: str | None = None


@dataclass
class RefillPlan:
    new_slots: list[str] = field(default_factory=list)  # shape keys, one per slot to start
    new_coordinators: list[str] = field(default_factory=list)  # runtime env keys
    retire_slots: list[str] = field(default_factory=list)
    retire_coordinators: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PoolSettings:
    idle_slots: int = 8  # fresh idle task actors kept per shape in use: a new driver's job at p=2 with 4 vertices
    idle_coordinators: int = 1  # fresh idle job coordinators kept per runtime env
    # Idle slots beyond the target leave after this; a shape no job leased for 6x
    # this long keeps none. Idle slots hold their CPU share, which Spark or Ray
    # Data on the same cluster may be waiting for.
    idle_timeout_s: float = 60.0
    reuse: bool = True  # an application's slots serve its later jobs (reset) instead of leaving

    @staticmethod
    def from_env() -> "PoolSettings":
        """Read from the environment of the process that creates the pool."""
        env = os.environ
        return PoolSettings(
            idle_slots=int(env.get("WEIR_POOL_IDLE_SLOTS", PoolSettings.idle_slots)),
            idle_coordinators=int(env.get("WEIR_POOL_IDLE_COORDINATORS", PoolSettings.idle_coordinators)),
            idle_timeout_s=float(env.get("WEIR_POOL_IDLE_TIMEOUT_S", PoolSettings.idle_timeout_s)),
            reuse=env.get("WEIR_POOL_REUSE", "1") not in ("0", "false", "no"),
        )


class PoolLedger:
    # While a job runs, a shape short of fresh slots gets more once it has been
    # short this long, one at a time, and a runtime env short of a standby
    # coordinator gets one after as long: a short job's slots come back when it
    # ends, and a process started meanwhile would compete with the job for CPU
    # (on 2 cores, 2 s let half of the 2-second jobs of bench.cost at p=4 pay 2
    # boots: 2-4x their CPU; a spare started at once beside a first job made it
    # take 5 s where it takes 3). Once no job has run for QUIET_S, every missing
    # one starts at once: a notebook's next cell, a new driver, finds them up,
    # while a script's jobs back to back do not run beside a burst of starts.
    REFILL_DELAY_S = 5.0
    QUIET_S = 2.0
    # After slots were lost, as many replacements start together this long
    # after: the job that lost them takes spares and redeploys first. On 2 cores a
    # process booting beside that recovery tripled it (bench.recovery, 10
    # isolated kills each: p50 1.06 s, p99 4.2 s, against 0.29 s and 1.9 s); and
    # replacing every missing spare at once kept the cores busy into the next
    # kill's recovery (2.05 s against 0.25-0.81 s for the others).
    REPLACE_DELAY_S = 1.0

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self.shapes: dict[str, Shape] = {}
        self.envs: dict[str, dict[str, Any]] = {}
        self.slots: dict[str, SlotEntry] = {}
        self.coordinators: dict[str, CoordinatorEntry] = {}
        self.jobs: dict[str, JobEntry] = {}
        self.apps: dict[str, bool] = {}  # application id -> it has ended
        self._short_since: dict[str, float] = {}  # shape key or runtime env key -> when it fell short of spares
        self._leased_at: dict[str, float] = {}  # shape key -> its latest lease
        self._largest_lease: dict[str, int] = {}  # shape key -> most slots one lease took lately
        self._lost: dict[
            str, tuple[float, int]
        ] = {}  # shape key -> (when it first lost slots, how many): replace them soon
        self._scarce_until = 0.0  # idle slots were retired to free CPU: start none before this
        self._busy_at = float("-inf")  # when a job last held a slot or a name

    # ------------------------------------------------------------ applications
    def ended(self, app: str | None) -> bool:
        return app is not None and self.apps.get(app, False)

    def live_apps(self) -> list[str]:
        """Applications that own a process or a running job: the ones to watch."""
        owners = {s.app for s in self.slots.values()} | {c.app for c in self.coordinators.values()}
        return [a for a, ended in self.apps.items() if not ended and a in owners]

    def app_ended(self, app: str) -> RefillPlan:
        """The driver has exited: its idle processes retire now; those its running
        jobs hold retire when the jobs end."""
        self.apps[app] = True
        plan = RefillPlan()
        for sid, s in self.slots.items():
            if s.app == app and s.job is None:
                plan.retire_slots.append(sid)
        for cid, c in self.coordinators.items():
            if c.app == app and c.job is None:
                c.retiring = True
                if not self._has_record(cid):
                    plan.retire_coordinators.append(cid)
        self.drop(plan)
        return plan

    # ------------------------------------------------------------ slots
    def lease(self, job: str, app: str, shape: Shape, count: int, now: float) -> tuple[list[str], int]:
        """``count`` slots of ``shape`` for ``job``: the application's own idle ones
        first (warm, given back last first), then fresh ones, started ones before
        those still starting, spread over nodes. Returns them and how many more
        the pool must start."""
        self.shapes.setdefault(shape.key, shape)
        self.apps.setdefault(app, False)
        if now - self._leased_at.get(shape.key, 0.0) > 6 * self.settings.idle_timeout_s:
            self._largest_lease[shape.key] = 0
        self._leased_at[shape.key] = now
        self._largest_lease[shape.key] = max(count, self._largest_lease.get(shape.key, 0))
        idle = [(sid, s) for sid, s in self.slots.items() if s.shape == shape.key and s.job is None]
        own = sorted((x for x in idle if x[1].app == app), key=lambda x: -x[1].idle_since)
        fresh = [x for x in idle if x[1].app is None]
        taken = [
            sid
            for sid, _ in (
                _spread([x for x in own if x[1].node_id])
                + _spread([x for x in fresh if x[1].node_id])
                + [x for x in own + fresh if not x[1].node_id]
            )
        ][:count]
        for sid in taken:
            self.slots[sid].job, self.slots[sid].app = job, app
        return taken, count - len(taken)

    def expect(self, shape: Shape, count: int, app: str) -> int:
        """A job of ``app`` about to deploy takes ``count`` slots of ``shape``: how
        many to start now, beside its coordinator, so that on a cold pool the
        processes boot together instead of one round after another."""
        self.shapes.setdefault(shape.key, shape)
        idle = sum(1 for s in self.slots.values() if s.shape == shape.key and s.job is None and s.app in (None, app))
        return max(0, count - idle)

    def add_slot(self, sid: str, shape: str, job: str | None = None, app: str | None = None) -> None:
        self.slots[sid] = SlotEntry(shape, app, job)

    def give_back(self, job: str, sid: str, now: float) -> bool:
        """A slot of ``job`` is reset and free: idle for its application's next job.
        False when it must go instead (its application has ended)."""
        s = self.slots.get(sid)
        if s is None or s.job != job:
            return False
        if self.ended(s.app) or not self.settings.reuse:
            return False
        s.job, s.idle_since = None, now
        return True

    def leased_to(self, job: str) -> list[str]:
        return [sid for sid, s in self.slots.items() if s.job == job]

    def forget_slots(self, sids: list[str], now: float) -> None:
        """These slots are gone or going; each is replaced soon (REPLACE_DELAY_S)."""
        for sid in sids:
            gone = self.slots.pop(sid, None)
            if gone is not None:
                at, count = self._lost.get(gone.shape, (now, 0))
                self._lost[gone.shape] = (at, count + 1)

    def slot_up(self, sid: str, node_id: str) -> None:
        s = self.slots.get(sid)
        if s is not None and not s.node_id:
            s.node_id = node_id

    # ------------------------------------------------------------ jobs
    def reserve(
        self, assignment: JobAssignment, env: dict[str, Any], env_key: str, now: float
    ) -> str | Conflict | None:
        """The compare-and-set of a job's identity: the running job that holds its
        name or one of its outputs, or else the job is recorded as running on the
        coordinator returned (None: the pool must start one and
        :meth:`place_job` it there)."""
        for name, entry in self.jobs.items():
            if entry.ended:
                continue
            other = entry.assignment
            if name == assignment.name:
                return Conflict(name, other.run_id, other.app.where, other.submitted_at, entry.coordinator)
            for location, operator in assignment.outputs.items():
                if location in other.outputs:
                    return Conflict(
                        name, other.run_id, other.app.where, other.submitted_at, entry.coordinator, location, operator
                    )
        self.envs.setdefault(env_key, env)
        app = assignment.app.id
        self.apps.setdefault(app, False)
        free = [
            (cid, c) for cid, c in self.coordinators.items() if c.env == env_key and c.job is None and not c.retiring
        ]
        chosen = next((cid for cid, c in free if c.app == app), None) or next(
            (cid for cid, c in free if c.app is None), None
        )
        if chosen is not None:
            self.place_job(assignment, chosen)
        return chosen

    def add_coordinator(self, cid: str, env_key: str) -> None:
        self.coordinators[cid] = CoordinatorEntry(env_key)

    def place_job(self, assignment: JobAssignment, cid: str) -> None:
        c = self.coordinators[cid]
        c.job, c.app = assignment.name, assignment.app.id
        self.jobs[assignment.name] = JobEntry(assignment, cid)

    def start_failed(self, name: str, cid: str) -> None:
        """The coordinator died idle before it took the job: drop both."""
        self.coordinators.pop(cid, None)
        if name in self.jobs and self.jobs[name].coordinator == cid:
            del self.jobs[name]

    def start_refused(self, name: str, cid: str, now: float) -> None:
        """The coordinator could not load the job (its code does not import there):
        the job never ran, so its name and outputs are free at once; the
        coordinator, reset, waits for its application's next job."""
        if name in self.jobs and self.jobs[name].coordinator == cid:
            del self.jobs[name]
        self.job_ended(cid, now)

    def exceptions_reported(self, name: str, incarnation: int, entries: list[dict[str, Any]]) -> None:
        """The coordinator of the job's ``incarnation`` lists these exceptions,
        newest first: kept for its successor, should it die."""
        entry = self.jobs.get(name)
        if entry is not None and entry.assignment.incarnation == incarnation:
            entry.reported = entries

    def coordinator_died(self, cid: str, at: float) -> tuple[JobAssignment, str | None, str] | None:
        """A coordinator has died (noticed at wall-clock time ``at``). Its running
        job, if it had accepted one, goes to a successor (:meth:`take_over`); a
        job still on its way there stays with the submitter, who takes it over
        once its start has returned."""
        c = self.coordinators.pop(cid, None)
        for name in [n for n, e in self.jobs.items() if e.coordinator == cid and e.ended]:
            del self.jobs[name]  # ended records it kept: gone with it
        entry = self.jobs.get(c.job) if c is not None and c.job is not None else None
        if entry is None or entry.ended or entry.coordinator != cid or not entry.assignment.started:
            return None
        return self.take_over(entry.assignment.name, c.env, cid, at)

    def take_over(self, name: str, env_key: str, dead: str, at: float) -> tuple[JobAssignment, str | None, str]:
        """The job's next incarnation goes to a standby coordinator: one of its
        application's, else a fresh one (None: the pool must start one and
        :meth:`place_job` it there). Its exception history so far, and the death
        of coordinator ``dead`` at ``at``, go with it."""
        entry = self.jobs[name]
        assignment = entry.assignment
        assignment.incarnation += 1
        died = {
            "at": round(at, 3),
            "task": None,
            "attempt": None,
            "operator": None,
            "exception": "JobCoordinatorDied",
            "message": f"the job coordinator ({dead[:8]}) died: another took the job over "
            f"from its latest checkpoint (incarnation {assignment.incarnation})",
        }
        assignment.history = [died, *entry.reported, *assignment.history][: JobLifecycle.HISTORY_LIMIT]
        entry.reported = []
        free = [
            (cid, c) for cid, c in self.coordinators.items() if c.env == env_key and c.job is None and not c.retiring
        ]
        app = assignment.app.id
        chosen = next((cid for cid, c in free if c.app == app), None) or next(
            (cid for cid, c in free if c.app is None), None
        )
        if chosen is not None:
            self.place_job(assignment, chosen)
        return assignment, chosen, env_key

    def job_ended(self, cid: str, now: float) -> None:
        """The coordinator's job has ended (before anyone hears of it): its name and
        outputs are free. The coordinator serves its application's next job,
        unless the application has ended: then it leaves once the job's record
        is forgotten."""
        c = self.coordinators.get(cid)
        if c is None:
            return
        if c.job is not None and c.job in self.jobs and self.jobs[c.job].coordinator == cid:
            self.jobs[c.job].ended = True
        c.job, c.idle_since = None, now
        c.retiring = c.retiring or self.ended(c.app) or not self.settings.reuse

    def job_over(self, name: str, run_id: str) -> None:
        """Its coordinator says the job has ended, before the end reached the pool."""
        entry = self.jobs.get(name)
        if entry is not None and entry.assignment.run_id == run_id:
            entry.ended = True

    def forget_job(self, name: str, cid: str) -> bool:
        """The ended job's record has lingered long enough. True when its
        coordinator must go now (it is retiring and holds no other record)."""
        if name in self.jobs and self.jobs[name].coordinator == cid and self.jobs[name].ended:
            del self.jobs[name]
        c = self.coordinators.get(cid)
        if c is not None and c.retiring and c.job is None and not self._has_record(cid):
            del self.coordinators[cid]
            return True
        return False

    def _has_record(self, cid: str) -> bool:
        return any(e.coordinator == cid for e in self.jobs.values())

    def rescaled(self, name: str, parallelism: dict[str, int]) -> None:
        if name in self.jobs:
            self.jobs[name].assignment.rescales.append(dict(parallelism))

    # ------------------------------------------------------------ upkeep
    def refill(self, now: float, free_cpus: float) -> RefillPlan:
        """What to start and retire now, with ``free_cpus`` CPUs free beyond the
        cluster's reserve. Fresh slots are kept per shape in use: enough to
        redeploy the largest job of the shape at once (so a failover never waits
        for a process), and fresh coordinators per runtime env. Once no job has
        run for QUIET_S every missing one starts at once; else one slot at a
        time after REFILL_DELAY_S short of them, and none beside a pool process
        still starting (on a small machine it would compete with it); lost
        slots are replaced REPLACE_DELAY_S after the loss, all together. An
        application's idle slots retire after the idle timeout; when CPUs run
        short, idle slots go, the applications' first, and none start for a
        while."""
        plan = RefillPlan()
        booting = any(not s.node_id for s in self.slots.values()) or any(not c.up for c in self.coordinators.values())
        if any(s.job is not None for s in self.slots.values()) or not all(e.ended for e in self.jobs.values()):
            self._busy_at = now
        quiet = now - self._busy_at >= self.QUIET_S
        for key, shape in self.shapes.items():
            idle = sorted(
                ((sid, s) for sid, s in self.slots.items() if s.shape == key and s.job is None),
                key=lambda x: x[1].idle_since,
            )
            fresh = [x for x in idle if x[1].app is None]
            in_use = now - self._leased_at.get(key, now) < 6 * self.settings.idle_timeout_s
            target = max(self.settings.idle_slots, self._largest_lease.get(key, 0)) if in_use else 0
            lost_at, lost = self._lost.get(key, (now, 0))
            if len(fresh) >= target:
                self._short_since.pop(key, None)
                self._lost.pop(key, None)
                starts = 0
            elif lost:
                starts = min(lost, target - len(fresh)) if now - lost_at >= self.REPLACE_DELAY_S else 0
                if starts:
                    self._lost.pop(key)
            else:
                starts = self._spares_due(key, target - len(fresh), now, booting, quiet)
            for _ in range(starts):
                if free_cpus < shape.cpus or now < self._scarce_until:
                    break
                plan.new_slots.append(key)
                free_cpus -= shape.cpus
            extra = fresh[: max(0, len(fresh) - target)] + [x for x in idle if x[1].app is not None]
            plan.retire_slots += [sid for sid, s in extra if now - s.idle_since > self.settings.idle_timeout_s]
            for sid, _ in [x for x in idle if x[1].app is not None] + fresh:  # short of room: idle ones go
                if free_cpus >= 0:
                    break
                if sid not in plan.retire_slots:
                    plan.retire_slots.append(sid)
                    free_cpus += shape.cpus
                    self._scarce_until = now + self.settings.idle_timeout_s
        for env_key in self.envs:
            missing = self.settings.idle_coordinators - self._fresh_coordinators(env_key)
            if self._spares_due(env_key, missing, now, booting, quiet):
                plan.new_coordinators += [env_key] * missing
        for cid, c in self.coordinators.items():  # an application's idle coordinator retires as its slots do
            if (
                c.app is not None
                and c.job is None
                and (c.retiring or now - c.idle_since > self.settings.idle_timeout_s)
            ):
                c.retiring = True
                if not self._has_record(cid):  # else it leaves when its last record is forgotten
                    plan.retire_coordinators.append(cid)
        self.drop(plan)
        return plan

    def warm_up(self, shape: Shape, env_key: str, env: dict[str, Any], now: float, free_cpus: float) -> RefillPlan:
        """A cluster's start (``weir pool start``): the fresh slots of ``shape`` and
        the coordinators of runtime env ``env`` the pool keeps, to start at once,
        so that a first job finds them up. The shape counts as in use from now."""
        self.shapes.setdefault(shape.key, shape)
        self.envs.setdefault(env_key, env)
        self._leased_at.setdefault(shape.key, now)
        fresh = sum(1 for s in self.slots.values() if s.shape == shape.key and s.app is None and s.job is None)
        room = int(max(0.0, free_cpus) // shape.cpus) if shape.cpus else self.settings.idle_slots
        return RefillPlan(
            new_slots=[shape.key] * min(room, max(0, self.settings.idle_slots - fresh)),
            new_coordinators=[env_key] * max(0, self.settings.idle_coordinators - self._fresh_coordinators(env_key)),
        )

    def _fresh_coordinators(self, env_key: str) -> int:
        return sum(1 for c in self.coordinators.values() if c.env == env_key and c.app is None and c.job is None)

    def _spares_due(self, key: str, missing: int, now: float, booting: bool, quiet: bool) -> int:
        """How many of ``missing`` spares of a shape or runtime env ``key`` to start
        now (see :meth:`refill`)."""
        if missing <= 0:
            self._short_since.pop(key, None)
            return 0
        short_s = now - self._short_since.setdefault(key, now)
        if booting:
            return 0
        return missing if quiet else (1 if short_s >= self.REFILL_DELAY_S else 0)

    def drop(self, plan: RefillPlan) -> None:
        """Retired on purpose: no refill for them."""
        for sid in plan.retire_slots:
            self.slots.pop(sid, None)
        for cid in plan.retire_coordinators:
            self.coordinators.pop(cid, None)

    def stats(self) -> dict[str, Any]:
        shapes = []
        for key, shape in self.shapes.items():
            states = collections.Counter(s.state for s in self.slots.values() if s.shape == key)
            shapes.append(
                {
                    "shape": ", ".join(
                        f"{k}={v}" for k, v in sorted(shape.options.items()) if k != "scheduling_strategy"
                    ),
                    **{state.value: states[state] for state in SlotState},
                }
            )
        return {
            "settings": vars(self.settings),
            "shapes": shapes,
            "idle_coordinators": sum(1 for c in self.coordinators.values() if c.job is None and not c.retiring),
            "applications": sum(1 for ended in self.apps.values() if not ended),
            "jobs": sorted(self.jobs),
        }


def _spread(slots: list[tuple[str, SlotEntry]]) -> list[tuple[str, SlotEntry]]:
    """Interleave slots by node (keeping their order on each node), so a job's
    tasks land on as many nodes as it can."""
    by_node: dict[str, list[tuple[str, SlotEntry]]] = {}
    for x in slots:
        by_node.setdefault(x[1].node_id, []).append(x)
    rounds = [
        [on_node[i] for on_node in by_node.values() if i < len(on_node)]
        for i in range(max(map(len, by_node.values()), default=0))
    ]
    return [x for r in rounds for x in r]

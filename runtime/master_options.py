"""How a job master is wired: its clock, where its slow work runs, and what an
executor tells it about the run it takes on."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

from weir.runtime.job_lifecycle import JobStatus
from weir.runtime.off_loop import Work, inline


@dataclass
class MasterOptions:
    """``recovering``: the job master replaces one that died; it picks the job up
    from the latest completed checkpoint in storage. ``event_valve=False`` switches
    off the FLINK-16986 protection of operator coordinators (tests only: it shows
    what the valve prevents). ``first_attempt``: attempts are numbered after it (a
    coordinator taking a job over starts above its predecessor's). ``incarnation``:
    how often the job was taken over; a recovering job master claims the run's
    storage with it, and one with a lower one stands down (see
    :class:`~weir.runtime.storage.CheckpointStorage`). ``on_end``:
    records the job's end where a restarted job master would look, before the end
    is reported to anyone (an ended job never runs again). ``on_failure``: told
    of each failure the job master records (a successor keeps the exception
    history). ``storage_io``,
    ``coordinator_io``, ``deploy_io``: where storage writes (default: an
    :class:`~weir.runtime.off_loop.OffLoopThread`), coordinators' async calls
    (default: two threads) and deploys (default: at once) run.
    ``restart_jitter``: draws where each restart delay falls in its jitter band
    (a seeded one replays)."""

    clock: Callable[[], float] = time.monotonic
    recovering: bool = False
    event_valve: bool = True
    first_attempt: int = 0
    incarnation: int = 0
    on_end: Callable[[JobStatus], None] | None = None
    on_failure: Callable[[], None] | None = None
    storage_io: Callable[[Work], None] | None = None
    coordinator_io: Callable[[Work], None] | None = None
    restart_jitter: random.Random | None = None
    deploy_io: Callable[[Work], None] = inline

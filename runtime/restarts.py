"""Where a job stands with its restart strategy (Flink's RestartBackoffTimeStrategy):
the attempts counted, when the latest restart was due, and whether the job has
made durable progress since. A frozen value: each event returns the next one, so
the job master keeps it only once the restart it decided goes ahead (a region
restart that turns into a full one must not count twice). Sans-IO: time and the
jitter's random draw come in as arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from weir.runtime.config import RestartStrategy


@dataclass(frozen=True)
class RestartBackoff:
    strategy: RestartStrategy
    attempts: int = 0  # counted restarts since the last reset (fixed delay: since the job started)
    restart_at: float = -math.inf  # when the latest restart was due
    checkpointed_at: float | None = None  # when the first checkpoint after it completed

    def failed(self, now: float, jitter_draw: float, count: bool = True) -> "RestartBackoff | None":
        """After a failure at ``now`` that restarts the job (``count``: using up an
        attempt): the next state, its restart due at ``restart_at``. None: the
        attempts are used up, the job fails."""
        s = self.strategy
        if s.resets and now <= self.restart_at:
            return self  # a restart is on its way: this failure joins it, as Flink merges them
        attempts = self.attempts
        if s.reset_backoff_threshold_s is not None and now - self.restart_at >= s.reset_backoff_threshold_s:
            attempts = 0  # the job ran that long since its latest restart without failing
        if count and s.max_attempts is not None and attempts >= s.max_attempts:
            return None
        attempts += count
        delay = s.delay_before(max(attempts, 1), jitter_draw)
        return RestartBackoff(s, attempts, now + delay, None)

    def checkpoint_completed(self, started: float, now: float) -> "RestartBackoff":
        """A checkpoint that began at ``started`` completed at ``now``. After a
        restart, the first may hold no more than what the tasks restored (it can
        begin the moment they are back); one that began after that completed shows
        the job ran on from a checkpoint of its own: the backoff starts over."""
        if not self.strategy.resets or self.attempts == 0:
            return self
        if self.checkpointed_at is None:
            return replace(self, checkpointed_at=now)
        if started >= self.checkpointed_at:
            return replace(self, attempts=0, checkpointed_at=None)
        return self

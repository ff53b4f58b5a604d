"""Where the job master's slow work runs: checkpoint storage writes and deletes,
and deploying tasks on a cluster that may have to make room. It runs off the
loop thread, in order (:class:`OffLoopThread`), and answers with a letter; or at
once on the caller's thread for tests and fast gateways (:func:`inline`).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

log = logging.getLogger("weir.jobmaster")

Work = Callable[[], None]  # a piece of work handed off the loop


class OffLoopThread:
    """Runs one kind of the job master's work (``what``) in order, off its loop:
    slow or hanging storage, or a cluster short of room, must not keep the loop
    from timing out checkpoints, failing over or taking a cancel. Being one
    thread, a delete of a location always comes after a write to it that was
    handed over first."""

    CLOSE_TIMEOUT_S = 5.0

    def __init__(self, name: str, what: str) -> None:
        self._what = what
        self._work: queue.Queue[Work | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"{what.split()[-1]}-{name}", daemon=True)
        self._thread.start()

    def __call__(self, work: Work) -> None:
        self._work.put(work)

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            try:
                work()
            except Exception:  # a delete that failed leaves a folder behind, nothing worse
                log.exception("%s work failed", self._what)

    def close(self) -> None:
        """Finish what was handed over before the job's end is reported, waiting at
        most ``CLOSE_TIMEOUT_S``: a hanging storage must not hold up a cancel."""
        self._work.put(None)
        self._thread.join(self.CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("%s is slow: %d piece(s) of work go on after the job's end", self._what, self._work.qsize())


def inline(work: Work) -> None:
    """Work done at once, on the caller's thread: for tests that drive a job master
    by hand and replay it by seed, and for gateways that deploy at once."""
    work()
